// A collective inside a loop: each step reduce-scatters the partial sums (bf16), updates the
// local shard, then all-gathers it back, as in a sharded optimizer step.
#include <cuda_bf16.h>

#include <cstdio>

#include "braid/runtime.cuh"

using namespace braid::dev;

constexpr size_t kShardElems = 256 * 1024;
constexpr int kMaxRanks = 8;
constexpr int kSteps = 4;

__global__ void update(__nv_bfloat16* shard, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    shard[i] = __float2bfloat16(__bfloat162float(shard[i]) * 0.5f);
}

int main() {
  RankInfo r = bootstrap_rank();
  ncclComm_t comm = init_comm(r);
  cudaStream_t stream;
  BRAID_CUDA(cudaStreamCreate(&stream));
  __nv_bfloat16* full = nullptr;
  __nv_bfloat16* shard = nullptr;
  BRAID_CUDA(cudaMalloc(&full, kShardElems * kMaxRanks * sizeof(__nv_bfloat16)));
  BRAID_CUDA(cudaMalloc(&shard, kShardElems * sizeof(__nv_bfloat16)));
  // braid:input full
  for (int step = 0; step < kSteps; ++step) {
    BRAID_NCCL(ncclReduceScatter(full, shard, kShardElems, ncclBfloat16, ncclSum, comm, stream));
    update<<<128, 256, 0, stream>>>(shard, kShardElems);
    BRAID_NCCL(ncclAllGather(shard, full, kShardElems, ncclBfloat16, comm, stream));
  }
  BRAID_CUDA(cudaStreamSynchronize(stream));
  // braid:output full
  BRAID_CUDA(cudaFree(full));
  BRAID_CUDA(cudaFree(shard));
  ncclCommDestroy(comm);
  return 0;
}
