// Grouped calls: two all-reduces and an all-gather issued inside one ncclGroupStart/End.
#include <cstdio>

#include "braid/runtime.cuh"

using namespace braid::dev;

constexpr size_t kWeights = 512 * 1024;
constexpr size_t kBias = 4096;
constexpr size_t kShard = 128 * 1024;
constexpr int kMaxRanks = 8;

int main() {
  RankInfo r = bootstrap_rank();
  ncclComm_t comm = init_comm(r);
  cudaStream_t stream;
  BRAID_CUDA(cudaStreamCreate(&stream));
  float* weights = nullptr;
  float* bias = nullptr;
  float* shard = nullptr;
  float* gathered = nullptr;
  BRAID_CUDA(cudaMalloc(&weights, kWeights * sizeof(float)));
  BRAID_CUDA(cudaMalloc(&bias, kBias * sizeof(float)));
  BRAID_CUDA(cudaMalloc(&shard, kShard * sizeof(float)));
  BRAID_CUDA(cudaMalloc(&gathered, kShard * kMaxRanks * sizeof(float)));
  // braid:input weights
  // braid:input bias
  // braid:input shard
  BRAID_NCCL(ncclGroupStart());
  BRAID_NCCL(ncclAllReduce(weights, weights, kWeights, ncclFloat, ncclSum, comm, stream));  // in place
  BRAID_NCCL(ncclAllReduce(bias, bias, kBias, ncclFloat, ncclSum, comm, stream));
  BRAID_NCCL(ncclAllGather(shard, gathered, kShard, ncclFloat, comm, stream));
  BRAID_NCCL(ncclGroupEnd());
  BRAID_CUDA(cudaStreamSynchronize(stream));
  // braid:output weights
  // braid:output bias
  // braid:output gathered
  BRAID_CUDA(cudaFree(weights));
  BRAID_CUDA(cudaFree(bias));
  BRAID_CUDA(cudaFree(shard));
  BRAID_CUDA(cudaFree(gathered));
  ncclCommDestroy(comm);
  return 0;
}
