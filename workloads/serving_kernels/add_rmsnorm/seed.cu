// Fused residual-add + RMSNorm, the seed: the plain kernel of add_rmsnorm.cuh (one 256-thread
// block per row, scalar loads, two passes, shared-memory tree). Its score is 1 by construction
// (the baseline is the same kernel); run it to see the harness's spread between identical programs.
#include "braid/harness.cuh"
#include "add_rmsnorm.cuh"

using namespace braid::dev;

int main(int argc, char** argv) {
  const Workload wl = add_rmsnorm::make_workload();
  return harness_main(argc, argv, wl, Candidate{{}, {}, wl.baseline, {}});
}
