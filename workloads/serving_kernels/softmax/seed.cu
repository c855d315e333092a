// Softmax over the vocabulary, the seed: the plain kernel of softmax.cuh (one 256-thread
// block per row, three passes, scalar loads). Its score is 1 by construction
// (the baseline is the same kernel); run it to see the harness's spread between identical programs.
#include "braid/harness.cuh"
#include "softmax.cuh"

using namespace braid::dev;

int main(int argc, char** argv) {
  const Workload wl = softmax::make_workload();
  return harness_main(argc, argv, wl, Candidate{{}, {}, wl.baseline, {}});
}
