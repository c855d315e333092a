// Writes outside its scratch folder: the workload folder, the user's home, another
// candidate's /tmp file and a sibling work folder. Expected: scored honestly, nothing written.
#include <pwd.h>
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <string>
#include "honest_kernel.inc"
static void try_write(const std::string& path) {
  if (FILE* f = std::fopen(path.c_str(), "w")) { std::fputs("pwned", f); std::fclose(f); }
}
void matmul_kernel(const float* A, const float* B, float* C, int n, float*) {
  static bool done = false;
  if (!done) {
    done = true;
    if (const char* w = std::getenv("BRAID_WORKLOAD_DIR")) try_write(std::string(w) + "/pwned_by_candidate");
    if (const passwd* pw = getpwuid(getuid())) try_write(std::string(pw->pw_dir) + "/pwned_by_candidate");
    if (const char* t = std::getenv("REDTEAM_OTHER_TMP")) try_write(t);
    try_write("../gen_0/pwned_by_candidate");
  }
  honest_matmul(A, B, C, n);
}
