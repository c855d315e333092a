// Two streams: the all-gather runs on a communication stream while an unrelated kernel runs on
// the compute stream; an event orders the consumer kernel after the gather.
#include <cstdio>

#include "braid/runtime.cuh"

using namespace braid::dev;

constexpr size_t kShard = 1 << 20;
constexpr int kMaxRanks = 8;

__global__ void square(float* x, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) x[i] = x[i] * x[i];
}

__global__ void add_into(float* out, const float* a, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) out[i] += a[i % 1024];
}

int main() {
  RankInfo r = bootstrap_rank();
  ncclComm_t comm = init_comm(r);
  cudaStream_t compute, comm_stream;
  cudaEvent_t gathered_ready;
  BRAID_CUDA(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  BRAID_CUDA(cudaStreamCreateWithFlags(&comm_stream, cudaStreamNonBlocking));
  BRAID_CUDA(cudaEventCreateWithFlags(&gathered_ready, cudaEventDisableTiming));
  float* shard = nullptr;
  float* gathered = nullptr;
  float* local = nullptr;
  BRAID_CUDA(cudaMalloc(&shard, kShard * sizeof(float)));
  BRAID_CUDA(cudaMalloc(&gathered, kShard * kMaxRanks * sizeof(float)));
  BRAID_CUDA(cudaMalloc(&local, 1024 * sizeof(float)));
  // braid:input shard
  // braid:input local
  BRAID_NCCL(ncclAllGather(shard, gathered, kShard, ncclFloat, comm, comm_stream));
  BRAID_CUDA(cudaEventRecord(gathered_ready, comm_stream));
  square<<<8, 128, 0, compute>>>(local, 1024);
  BRAID_CUDA(cudaStreamWaitEvent(compute, gathered_ready, 0));
  add_into<<<256, 256, 0, compute>>>(gathered, local, kShard * r.world);
  BRAID_CUDA(cudaStreamSynchronize(compute));
  // braid:output gathered
  BRAID_CUDA(cudaEventDestroy(gathered_ready));
  BRAID_CUDA(cudaFree(shard));
  BRAID_CUDA(cudaFree(gathered));
  BRAID_CUDA(cudaFree(local));
  ncclCommDestroy(comm);
  return 0;
}
