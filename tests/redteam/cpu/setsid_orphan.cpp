// Leaves a process behind: fork, setsid, fork again, and the grandchild sleeps on.
// Expected: scored honestly, and no such process alive once the evaluation returns.
#include <unistd.h>
#include "honest_kernel.inc"
void matmul_kernel(const float* A, const float* B, float* C, int n, float*) {
  static bool done = false;
  if (!done) {
    done = true;
    if (fork() == 0) {
      setsid();
      if (fork() == 0) {
        execl("/bin/sleep", "sleep", "61.4242", static_cast<char*>(nullptr));
        _exit(0);
      }
      _exit(0);
    }
  }
  honest_matmul(A, B, C, n);
}
