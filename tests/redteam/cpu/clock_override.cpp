// Timer tampering: defines clock_gettime (interposing libc's, so std::chrono sees a clock
// that barely moves) and macros for the harness's timing helper. Expected: timed honestly by
// the harness's own system-call clock, a plausible score.
#include <time.h>
#include "honest_kernel.inc"
extern "C" int clock_gettime(clockid_t, struct timespec* ts) {
  static long fake = 0;
  ts->tv_sec = 0;
  ts->tv_nsec = ++fake;
  return 0;
}
#define time_ms(f) 1e-6
#define median(v) 1e-6
void matmul_kernel(const float* A, const float* B, float* C, int n, float*) { honest_matmul(A, B, C, n); }
