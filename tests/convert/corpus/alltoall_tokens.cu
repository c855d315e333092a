// All-to-all of fixed-size token blocks (expert parallel dispatch) with ncclAlltoAll, then a
// kernel on the received tokens. The raw string below holds text that looks like code.
#include <cstdio>

#include "braid/runtime.cuh"

using namespace braid::dev;

constexpr size_t kTokensPerPeer = 2048;
constexpr size_t kHidden = 128;
constexpr int kMaxRanks = 8;
constexpr size_t kBlockElems = kTokensPerPeer * kHidden;

__global__ void relu(float* x, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) x[i] = x[i] > 0.f ? x[i] : 0.f;
}

const char* kBanner = R"banner(ncclAllReduce(x, y, n, ncclFloat, ncclSum, comm, s); /* not a call */)banner";

int main() {
  RankInfo r = bootstrap_rank();
  ncclComm_t comm = init_comm(r);
  cudaStream_t stream;
  BRAID_CUDA(cudaStreamCreate(&stream));
  float* dispatch = nullptr;
  float* received = nullptr;
  BRAID_CUDA(cudaMalloc(&dispatch, kBlockElems * kMaxRanks * sizeof(float)));
  BRAID_CUDA(cudaMalloc(&received, kBlockElems * kMaxRanks * sizeof(float)));
  // braid:input dispatch
  BRAID_NCCL(ncclAlltoAll(dispatch, received, kBlockElems, ncclFloat, comm, stream));  // ncclSend( in a comment
  relu<<<256, 256, 0, stream>>>(received, kBlockElems * r.world);
  BRAID_CUDA(cudaStreamSynchronize(stream));
  // braid:output received
  if (r.rank == 0) std::printf("%s\n", kBanner);
  BRAID_CUDA(cudaFree(dispatch));
  BRAID_CUDA(cudaFree(received));
  ncclCommDestroy(comm);
  return 0;
}
