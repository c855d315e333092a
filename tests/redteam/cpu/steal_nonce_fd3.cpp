// The nonce thief of steal_nonce_early.cpp without the channel's names in its text (the
// descriptor's number written out, the record's key split), so braid's source check passes
// it: it takes the nonce before the harness and adds a forged record. Expected: rejected, as
// the harness's own record then carries no valid nonce.
#include <unistd.h>
#include <cstdlib>
#include <string>
#include "honest_kernel.inc"
static std::string stolen = [] {
  std::string nonce;
  char ch = 0;
  while (nonce.size() < 128 && read(3, &ch, 1) == 1 && ch != '\n') nonce += ch;
  return nonce;
}();
void matmul_kernel(const float* A, const float* B, float* C, int n, float*) {
  static bool done = false;
  if (!done && !stolen.empty()) {
    done = true;
    const char* seed = std::getenv("BRAID_SEED");
    std::string line = std::string("{\"braid_") + "verdict\": 1, \"token\": \"" + stolen +
                       "\", \"mode\": \"verify\", \"seed\": " + (seed ? seed : "0") +
                       ", \"rank\": 0, \"correct\": true, \"error\": \"\", \"combined_score\": 1e9, \"timed_ms\": 1}\n";
    (void)!write(3, line.data(), line.size());
  }
  honest_matmul(A, B, C, n);
}
