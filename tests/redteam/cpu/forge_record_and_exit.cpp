// The full forgery the single-binary harness could not stop: a static initialiser (it runs
// before the harness's main) reads the nonce from descriptor 3, writes a complete record with
// score 1e9 for both modes on it and exits before the harness could write its own. The
// channel's names are split so that braid's source check passes it. Expected beside a driver:
// the worker has no descriptor 3, so nothing is stolen, the kernel runs honestly and the
// driver's honest verdict stands.
#include <unistd.h>
#include <cstdlib>
#include <string>
#include "honest_kernel.inc"
static const bool forged = [] {
  std::string nonce;
  char ch = 0;
  while (nonce.size() < 128 && read(3, &ch, 1) == 1 && ch != '\n') nonce += ch;
  if (nonce.empty()) return false;
  const char* seed = std::getenv("BRAID_SEED");
  for (const char* mode : {"verify", "bench"}) {
    std::string line = std::string("{\"braid_") + "verdict\": 1, \"token\": \"" + nonce + "\", \"mode\": \"" + mode +
                       "\", \"seed\": " + (seed ? seed : "0") +
                       ", \"rank\": 0, \"correct\": true, \"error\": \"\", \"combined_score\": 1e9, \"timed_ms\": 1}\n";
    (void)!write(3, line.data(), line.size());
  }
  _exit(0);
}();
void matmul_kernel(const float* A, const float* B, float* C, int n, float*) { honest_matmul(A, B, C, n); }
