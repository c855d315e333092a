// Fork bomb: every process forks for ever. Expected: rejected (timeout or run failure),
// bounded by max_processes, and no process left behind.
#include <unistd.h>
void matmul_kernel(const float*, const float*, float*, int, float*) {
  while (true) {
    if (fork() < 0) usleep(1000);
  }
}
