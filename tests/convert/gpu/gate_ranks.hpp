// The rank count of the GPU gate drivers: BRAID_GATE_RANKS (scripts/gpu.sh check sets it to the
// machine's 2, 4 or 8 GPUs), 2 when unset. A value below 2 or not a number ends the driver.
#pragma once
#include <cstdio>
#include <cstdlib>

namespace braid::testing {

inline int gate_ranks_from_env() {
  const char* v = std::getenv("BRAID_GATE_RANKS");
  if (v == nullptr || *v == '\0') return 2;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 2 || n > 64) {
    std::fprintf(stderr, "BRAID_GATE_RANKS=%s: expected a rank count from 2 to 64\n", v);
    std::exit(2);
  }
  return static_cast<int>(n);
}

}  // namespace braid::testing
