// Rotary embedding (NeoX), the seed: the plain kernel of rope.cuh (one thread per rotated
// pair, scalar loads). Its score is 1 by construction
// (the baseline is the same kernel); run it to see the harness's spread between identical programs.
#include "braid/harness.cuh"
#include "rope.cuh"

using namespace braid::dev;

int main(int argc, char** argv) {
  const Workload wl = rope::make_workload();
  return harness_main(argc, argv, wl, Candidate{{}, {}, wl.baseline, {}});
}
