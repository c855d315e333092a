// All-reduce after a kernel: every rank scales its gradient, then ncclAllReduce sums them.
#include <cstdio>

#include "braid/runtime.cuh"

using namespace braid::dev;

constexpr size_t kCount = 1 << 20;  // elements per rank

__global__ void fill(float* x, size_t n, int rank) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) x[i] = (float)((i + rank) % 7);
}

__global__ void scale(float* x, size_t n, float a) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) x[i] *= a;
}

int main() {
  RankInfo r = bootstrap_rank();
  ncclComm_t comm = init_comm(r);
  cudaStream_t stream;
  BRAID_CUDA(cudaStreamCreate(&stream));
  float* grad = nullptr;
  float* sum = nullptr;
  BRAID_CUDA(cudaMalloc(&grad, kCount * sizeof(float)));
  BRAID_CUDA(cudaMalloc(&sum, kCount * sizeof(float)));
  fill<<<128, 256, 0, stream>>>(grad, kCount, r.rank);
  BRAID_CUDA(cudaStreamSynchronize(stream));
  // braid:input grad
  scale<<<128, 256, 0, stream>>>(grad, kCount, 2.0f);
  BRAID_NCCL(ncclAllReduce(grad, sum, kCount, ncclFloat, ncclSum, comm, stream));
  BRAID_CUDA(cudaStreamSynchronize(stream));
  // braid:output sum
  BRAID_CUDA(cudaFree(grad));
  BRAID_CUDA(cudaFree(sum));
  BRAID_CUDA(cudaStreamDestroy(stream));
  ncclCommDestroy(comm);
  std::printf("rank %d done\n", r.rank);
  return 0;
}
