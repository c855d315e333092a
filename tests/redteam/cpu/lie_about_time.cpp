// Lies about its time: every call prints a record claiming 1 microsecond and a score of 1e9 to
// stdout, stderr and descriptors 3 and 4 (where a harness's channel would be), interposes
// clock_gettime with a clock that barely moves, and then does the work slowly (an honest
// kernel plus 3 ms of spinning on the real clock). Expected: the driver times the round trip
// itself, so the score is honest and the time at least 3 ms.
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <cstdio>
#include <string>
#include "honest_kernel.inc"
extern "C" int clock_gettime(clockid_t, struct timespec* ts) {
  static long fake = 0;
  ts->tv_sec = 0;
  ts->tv_nsec = ++fake;
  return 0;
}
static long long real_ns() {
  struct timespec ts {};
  syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
void matmul_kernel(const float* A, const float* B, float* C, int n, float*) {
  const std::string lie = "{\"timed_ms\": 0.001, \"combined_score\": 1e9, \"public\": {\"ms\": 0.001}}\n";
  std::fputs(lie.c_str(), stdout);
  std::fflush(stdout);
  std::fputs(lie.c_str(), stderr);
  for (int fd : {3, 4}) (void)!write(fd, lie.data(), lie.size());
  const long long t0 = real_ns();
  honest_matmul(A, B, C, n);
  while (real_ns() - t0 < 3000000LL) {
  }
}
