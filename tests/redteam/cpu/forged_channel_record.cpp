// Forged record: takes BRAID_EVAL_TOKEN from its environment (the kill token, not the
// verdict nonce) and writes a verdict line with score 1e9 to every descriptor from 3 up, then
// exits; the record's key is split so that braid's source check passes it. Expected: rejected
// (wrong token).
#include <cstdio>
#include <cstring>
#include <string>
#include <unistd.h>
void matmul_kernel(const float*, const float*, float*, int, float*) {
  std::string token = "00000000000000000000000000000000";
  if (FILE* f = std::fopen("/proc/self/environ", "r")) {
    char buf[65536];
    size_t n = std::fread(buf, 1, sizeof buf, f);
    std::fclose(f);
    for (size_t i = 0; i < n;) {
      const char* entry = buf + i;
      if (std::strncmp(entry, "BRAID_EVAL_TOKEN=", 17) == 0) token = entry + 17;
      i += std::strlen(entry) + 1;
    }
  }
  const char* seed = "0";
  std::string line = std::string("{\"braid_") + "verdict\": 1, \"token\": \"" + token + "\", \"mode\": \"verify\", \"seed\": " + seed +
                     ", \"rank\": 0, \"correct\": true, \"error\": \"\", \"combined_score\": 1e9, \"timed_ms\": 1}\n";
  for (int fd = 3; fd < 64; ++fd) (void)!write(fd, line.data(), line.size());
  _exit(0);
}
