// Stage A left to the LLM: the all-reduce's buffers come from the stream-ordered allocator
// (cudaMallocAsync), which no rule moves to symmetric memory, so the rules' device all-reduce
// would fall back to host NCCL at run time until the allocations are rewritten.
#include <cstdio>

#include "braid/runtime.cuh"

using namespace braid::dev;

constexpr size_t kCount = 1 << 18;  // elements per rank

__global__ void fill(float* x, size_t n, int rank) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) x[i] = (float)((i + rank) % 5);
}

int main() {
  RankInfo r = bootstrap_rank();
  ncclComm_t comm = init_comm(r);
  cudaStream_t stream;
  BRAID_CUDA(cudaStreamCreate(&stream));
  float* acts = nullptr;
  float* total = nullptr;
  BRAID_CUDA(cudaMallocAsync(&acts, kCount * sizeof(float), stream));
  BRAID_CUDA(cudaMallocAsync(&total, kCount * sizeof(float), stream));
  fill<<<64, 256, 0, stream>>>(acts, kCount, r.rank);
  BRAID_CUDA(cudaStreamSynchronize(stream));
  // braid:input acts
  BRAID_NCCL(ncclAllReduce(acts, total, kCount, ncclFloat, ncclSum, comm, stream));
  BRAID_CUDA(cudaStreamSynchronize(stream));
  // braid:output total
  BRAID_CUDA(cudaFreeAsync(acts, stream));
  BRAID_CUDA(cudaFreeAsync(total, stream));
  BRAID_CUDA(cudaStreamSynchronize(stream));
  BRAID_CUDA(cudaStreamDestroy(stream));
  ncclCommDestroy(comm);
  std::printf("rank %d done\n", r.rank);
  return 0;
}
