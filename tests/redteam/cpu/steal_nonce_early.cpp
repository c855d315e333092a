// Steals the verdict nonce: a static initialiser (it runs before the harness's main) reads the
// channel descriptor first, then forges a record with what it read once the kernel is called.
// Expected: rejected (the harness got no nonce, so no record carries this step's).
#include <unistd.h>
#include <cstdlib>
#include <string>
#include "honest_kernel.inc"
static std::string stolen = [] {
  std::string nonce;
  char ch = 0;
  if (const char* fd = std::getenv("BRAID_RESULT_FD"))
    while (nonce.size() < 128 && read(std::atoi(fd), &ch, 1) == 1 && ch != '\n') nonce += ch;
  return nonce;
}();
void matmul_kernel(const float* A, const float* B, float* C, int n, float*) {
  static bool done = false;
  if (!done && !stolen.empty()) {
    done = true;
    const char* fd = std::getenv("BRAID_RESULT_FD");
    const char* seed = std::getenv("BRAID_SEED");
    for (const char* mode : {"verify", "bench"}) {
      std::string line = std::string("{\"braid_verdict\": 1, \"token\": \"") + stolen + "\", \"mode\": \"" + mode +
                         "\", \"seed\": " + (seed ? seed : "0") +
                         ", \"rank\": 0, \"correct\": true, \"error\": \"\", \"combined_score\": 1e9, \"timed_ms\": 1}\n";
      if (fd) (void)!write(std::atoi(fd), line.data(), line.size());
    }
  }
  honest_matmul(A, B, C, n);
}
