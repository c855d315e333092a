// SiLU-and-mul, the seed: the plain kernel of silu_mul.cuh (one thread per output element,
// scalar loads). Its score is 1 by construction
// (the baseline is the same kernel); run it to see the harness's spread between identical programs.
#include "braid/harness.cuh"
#include "silu_mul.cuh"

using namespace braid::dev;

int main(int argc, char** argv) {
  const Workload wl = silu_mul::make_workload();
  return harness_main(argc, argv, wl, Candidate{{}, {}, wl.baseline, {}});
}
