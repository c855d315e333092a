// Gradient step: every rank all-reduces its gradients (a rule converts that), then sums the optional
// loss statistics on rank 0 with ncclReduce, left to the LLM: `loss` is allocated under a condition on
// the environment (no rule makes it a window). Other ranks' `loss_total` stays untouched: an all-reduce is wrong.
#include <cstdlib>

#include "braid/runtime.cuh"

using namespace braid::dev;

constexpr size_t kGrads = 1 << 20;   // floats
constexpr size_t kLoss = 4096;       // floats

__global__ void scale(float* x, size_t n, float by) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) x[i] *= by;
}

int main() {
  RankInfo r = bootstrap_rank();
  ncclComm_t comm = init_comm(r);
  cudaStream_t stream;
  BRAID_CUDA(cudaStreamCreate(&stream));
  float* grads = nullptr;
  float* grads_sum = nullptr;
  float* loss = nullptr;
  float* loss_total = nullptr;
  BRAID_CUDA(cudaMalloc(&grads, kGrads * sizeof(float)));
  BRAID_CUDA(cudaMalloc(&grads_sum, kGrads * sizeof(float)));
  if (!std::getenv("NO_LOSS_STATS")) BRAID_CUDA(cudaMalloc(&loss, kLoss * sizeof(float)));  // optional statistics
  BRAID_CUDA(cudaMalloc(&loss_total, kLoss * sizeof(float)));
  // braid:input grads
  // braid:input loss
  BRAID_NCCL(ncclAllReduce(grads, grads_sum, kGrads, ncclFloat, ncclSum, comm, stream));
  scale<<<256, 256, 0, stream>>>(grads_sum, kGrads, 0.5f);
  BRAID_NCCL(ncclReduce(loss, loss_total, kLoss, ncclFloat, ncclSum, 0, comm, stream));
  BRAID_CUDA(cudaStreamSynchronize(stream));
  // braid:output grads_sum
  // braid:output loss_total
  BRAID_CUDA(cudaFree(grads));
  BRAID_CUDA(cudaFree(grads_sum));
  BRAID_CUDA(cudaFree(loss));
  BRAID_CUDA(cudaFree(loss_total));
  ncclCommDestroy(comm);
  return 0;
}
