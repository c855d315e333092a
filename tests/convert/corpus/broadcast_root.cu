// Broadcast from rank 0 (parameters at start-up), then every rank applies them.
#include <cstdio>

#include "braid/runtime.cuh"

using namespace braid::dev;

constexpr size_t kParams = 3 * 1000 * 1000;  // not a multiple of 16 bytes per rank on purpose

__global__ void offset(float* x, size_t n, int rank) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) x[i] += (float)rank;
}

int main() {
  RankInfo r = bootstrap_rank();
  ncclComm_t comm = init_comm(r);
  cudaStream_t stream;
  BRAID_CUDA(cudaStreamCreate(&stream));
  float* params = nullptr;
  float* local = nullptr;
  BRAID_CUDA(cudaMalloc(&params, kParams * sizeof(float)));
  BRAID_CUDA(cudaMalloc(&local, kParams * sizeof(float)));
  // braid:input params
  BRAID_NCCL(ncclBroadcast(params, local, kParams, ncclFloat, 0, comm, stream));
  offset<<<256, 256, 0, stream>>>(local, kParams, r.rank);
  BRAID_CUDA(cudaStreamSynchronize(stream));
  // braid:output local
  BRAID_CUDA(cudaFree(params));
  BRAID_CUDA(cudaFree(local));
  ncclCommDestroy(comm);
  return 0;
}
