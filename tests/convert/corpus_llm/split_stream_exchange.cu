// Halo exchange with the sends on one stream and the receives on another, in one NCCL group: no
// rule converts a group whose point-to-point calls span several streams (one p2p kernel runs on
// one stream), and the running maximum uses ncclMax, which the typed device reduction lacks.
#include <cstdio>

#include "braid/runtime.cuh"

using namespace braid::dev;

constexpr size_t kHalo = 64 * 1024;  // floats per side

__global__ void fold(float* acc, const float* in, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) acc[i] = acc[i] + 2.0f * in[i];
}

int main() {
  RankInfo r = bootstrap_rank();
  ncclComm_t comm = init_comm(r);
  cudaStream_t send_stream, recv_stream;
  BRAID_CUDA(cudaStreamCreate(&send_stream));
  BRAID_CUDA(cudaStreamCreate(&recv_stream));
  float* edge = nullptr;
  float* halo = nullptr;
  float* field = nullptr;
  float* peak = nullptr;
  BRAID_CUDA(cudaMalloc(&edge, kHalo * sizeof(float)));
  BRAID_CUDA(cudaMalloc(&halo, kHalo * sizeof(float)));
  BRAID_CUDA(cudaMalloc(&field, kHalo * sizeof(float)));
  BRAID_CUDA(cudaMalloc(&peak, kHalo * sizeof(float)));
  // braid:input edge
  // braid:input field
  const int next = (r.rank + 1) % r.world;
  const int prev = (r.rank + r.world - 1) % r.world;
  BRAID_NCCL(ncclGroupStart());
  BRAID_NCCL(ncclSend(edge, kHalo, ncclFloat, next, comm, send_stream));
  BRAID_NCCL(ncclRecv(halo, kHalo, ncclFloat, prev, comm, recv_stream));
  BRAID_NCCL(ncclGroupEnd());
  BRAID_CUDA(cudaStreamSynchronize(send_stream));
  fold<<<128, 256, 0, recv_stream>>>(field, halo, kHalo);
  BRAID_NCCL(ncclAllReduce(field, peak, kHalo, ncclFloat, ncclMax, comm, recv_stream));
  BRAID_CUDA(cudaStreamSynchronize(recv_stream));
  // braid:output field
  // braid:output peak
  BRAID_CUDA(cudaFree(edge));
  BRAID_CUDA(cudaFree(halo));
  BRAID_CUDA(cudaFree(field));
  BRAID_CUDA(cudaFree(peak));
  ncclCommDestroy(comm);
  return 0;
}
