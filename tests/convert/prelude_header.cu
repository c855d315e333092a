// The converter's prelude as nvcc sees it in a converted program (nvcc_compile_test.cpp compiles
// this with -c): the kCallSites preamble converted_prelude() generates, the headers of
// device/include/braid/converted/, and one call of every replacement so each template is
// instantiated, plain and with an annotated Site.
#include "braid/harness.cuh"

#ifndef BRAID_ONE_THREAD_DRIVES_RANKS  // compiled three ways (nvcc_compile_test.cpp)
#define BRAID_ONE_THREAD_DRIVES_RANKS false
#endif
#ifndef BRAID_RANK_PER_THREAD
#define BRAID_RANK_PER_THREAD false
#endif
namespace braid_converted { constexpr int kCallSites = 3; constexpr bool kOneThreadDrivesRanks = BRAID_ONE_THREAD_DRIVES_RANKS; constexpr bool kRankPerThread = BRAID_RANK_PER_THREAD; }
#include "braid/converted/prelude.cuh"
#include "braid/converted/prelude_harness.cuh"

namespace bc = braid_converted;
using Tuned = bc::Site<2, braid::dev::Issuer::Warp, 4, 4096>;

ncclResult_t every_replacement(float* a, float* b, size_t n, ncclComm_t comm, cudaStream_t s) {
  ncclResult_t r = ncclSuccess;
  ncclComm_t comms[2];
  const int devs[2] = {0, 1};
  r = bc::comm_init_all(comms, 2, devs);
  r = bc::all_gather<0>(a, b, n, ncclFloat32, comm, s);
  r = bc::all_reduce<0>(a, b, n, ncclFloat32, ncclSum, comm, s);
  r = bc::reduce_scatter<0>(a, b, n, ncclBfloat16, ncclMax, comm, s);
  r = bc::broadcast<1>(a, b, n, ncclFloat32, 0, comm, s);
  r = bc::bcast<1>(a, n, ncclFloat16, 0, comm, s);
  r = bc::all_to_all<1>(a, b, n, ncclFloat32, comm, s);
  r = bc::reduce<1>(a, b, n, ncclFloat32, ncclSum, 0, comm, s);
  r = bc::gather<2>(a, b, n, ncclFloat32, 0, comm, s);
  r = bc::scatter<2>(a, b, n, ncclFloat32, 0, comm, s);
  r = bc::all_gather<Tuned>(a, b, n, ncclFloat32, comm, s);
  r = bc::all_reduce<Tuned>(a, b, n, ncclFloat32, ncclSum, comm, s);
  r = bc::reduce_scatter<Tuned>(a, b, n, ncclFloat32, ncclSum, comm, s);
  r = bc::broadcast<Tuned>(a, b, n, ncclFloat32, 0, comm, s);
  r = bc::all_to_all<Tuned>(a, b, n, ncclFloat32, comm, s);
  r = bc::group_start();
  r = bc::send<2>(a, n, ncclFloat32, 1, comm, s);
  r = bc::recv<2>(b, n, ncclFloat32, 1, comm, s);
  r = bc::group_end<2>();
  r = bc::group_end<Tuned>();
  return r;
}

cudaError_t allocations(float** p, size_t bytes, cudaStream_t s) {
  cudaError_t e = bc::sym_malloc(p, bytes);
  e = bc::sym_free_async(*p, s);
  e = bc::sym_free(*p);
  return e;
}

void harness_hooks(braid::dev::Context& c) {
  bc::adopt_harness(c);
  bc::release_harness(c);
}

// Linked and run once (nvcc_compile_test.cpp, no GPU needed): a converted program asks for eager
// module loading before its first CUDA call, and keeps a loading mode the user chose.
int main() {
  const char* mode = std::getenv("CUDA_MODULE_LOADING");
  std::printf("CUDA_MODULE_LOADING=%s\n", mode != nullptr ? mode : "");
  return 0;
}
