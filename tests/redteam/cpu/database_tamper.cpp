// Database tampering: rewrites ../evolution.db with sqlite3 and with plain writes, then
// computes honestly. Expected: scored honestly; the run's database unchanged.
#include <cstdio>
#include <cstdlib>
#include "honest_kernel.inc"
void matmul_kernel(const float* A, const float* B, float* C, int n, float*) {
  static bool done = false;
  if (!done) {
    done = true;
    int ignored = std::system("sqlite3 ../evolution.db \"update programs set combined_score=999\" 2>/dev/null");
    (void)ignored;
    for (const char* path : {"../evolution.db", "../../run/evolution.db"})
      if (FILE* f = std::fopen(path, "r+")) { std::fputs("TAMPERED", f); std::fclose(f); }
  }
  honest_matmul(A, B, C, n);
}
