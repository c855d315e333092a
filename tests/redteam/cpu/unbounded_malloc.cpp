// Unbounded memory: allocates and touches 64 MiB blocks until malloc fails, then uses the
// null pointer. Expected: rejected (run_failed) quickly, bounded by memory_limit_mb.
#include <cstdlib>
#include <cstring>
void matmul_kernel(const float*, const float*, float* C, int n, float*) {
  char* last = nullptr;
  while (true) {
    char* p = static_cast<char*>(std::malloc(64u << 20));
    if (!p) break;
    std::memset(p, 1, 64u << 20);
    last = p;
  }
  volatile char* crash = nullptr;
  C[0] = static_cast<float>(*crash + (last ? 1 : 0) + n);
}
