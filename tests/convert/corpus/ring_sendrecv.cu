/* Ring exchange: each rank sends its block to the next rank and receives from the previous one,
   a grouped ncclSend/ncclRecv pair, repeated world-1 times so every block travels the ring. */
#include <cstdio>

#include "braid/runtime.cuh"

using namespace braid::dev;

constexpr size_t kBlock = 256 * 1024;  // floats per block

__global__ void accumulate(float* acc, const float* in, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) acc[i] += in[i];
}

int main() {
  RankInfo r = bootstrap_rank();
  ncclComm_t comm = init_comm(r);
  cudaStream_t stream;
  BRAID_CUDA(cudaStreamCreate(&stream));
  float* mine = nullptr;
  float* incoming = nullptr;
  float* total = nullptr;
  BRAID_CUDA(cudaMalloc(&mine, kBlock * sizeof(float)));
  BRAID_CUDA(cudaMalloc(&incoming, kBlock * sizeof(float)));
  BRAID_CUDA(cudaMalloc(&total, kBlock * sizeof(float)));
  BRAID_CUDA(cudaMemset(total, 0, kBlock * sizeof(float)));
  // braid:input mine
  const int next = (r.rank + 1) % r.world;
  const int prev = (r.rank + r.world - 1) % r.world;
  accumulate<<<64, 256, 0, stream>>>(total, mine, kBlock);
  for (int step = 1; step < r.world; ++step) {
    BRAID_NCCL(ncclGroupStart());
    BRAID_NCCL(ncclSend(mine, kBlock, ncclFloat32, next, comm, stream));
    BRAID_NCCL(ncclRecv(incoming, kBlock, ncclFloat32, prev, comm, stream));
    BRAID_NCCL(ncclGroupEnd());
    accumulate<<<64, 256, 0, stream>>>(total, incoming, kBlock);
    BRAID_CUDA(cudaMemcpyAsync(mine, incoming, kBlock * sizeof(float), cudaMemcpyDeviceToDevice, stream));
  }
  BRAID_CUDA(cudaStreamSynchronize(stream));
  // braid:output total
  BRAID_CUDA(cudaFree(mine));
  BRAID_CUDA(cudaFree(incoming));
  BRAID_CUDA(cudaFree(total));
  ncclCommDestroy(comm);
  return 0;
}
