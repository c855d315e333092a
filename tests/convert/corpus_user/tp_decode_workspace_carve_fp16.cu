// A tensor-parallel decode step as an inference engine lays out its memory, MPI bootstrap, fp16:
// one device slab per rank, allocated by main into a `Workspace` (`cudaMalloc(&ws.base, ...)`), and
// carved into named activations by a member template (`ws.carve<__half>(n)`, a bump allocator that
// rounds to 256 bytes). Each layer all-reduces its attention and MLP partial outputs in place; the
// step ends with an all-gather of each rank's vocabulary shard of the logits.
#include <cstdio>
#include <cstdlib>
#include <mpi.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define CUDACHECK(cmd) do { cudaError_t e = (cmd); if (e != cudaSuccess) { std::printf("CUDA %s:%d '%s'\n", __FILE__, __LINE__, cudaGetErrorString(e)); std::exit(EXIT_FAILURE); } } while (0)
#define NCCLCHECK(cmd) do { ncclResult_t r = (cmd); if (r != ncclSuccess) { std::printf("NCCL %s:%d '%s'\n", __FILE__, __LINE__, ncclGetErrorString(r)); std::exit(EXIT_FAILURE); } } while (0)

struct Workspace {
  char* base = nullptr;
  size_t offset = 0;
  size_t capacity = 0;
  template <typename T>
  T* carve(size_t count) {
    const size_t bytes = (count * sizeof(T) + 255) / 256 * 256;
    if (offset + bytes > capacity) {
      std::printf("workspace exhausted\n");
      std::exit(EXIT_FAILURE);
    }
    T* p = reinterpret_cast<T*>(base + offset);
    offset += bytes;
    return p;
  }
};

struct Activations {
  __half* attn_out;
  __half* mlp_out;
  float* logits;  // [world * vocab_shard]: this rank's shard at rank * vocab_shard
};

__global__ void partial_output(__half* x, size_t n, float v) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    x[i] = __float2half(v + (float)(i % 29) * 0.0625f);
}
__global__ void shard_logits(float* shard, const __half* h, size_t n, int rank) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    shard[i] = __half2float(h[i % 4096]) + (float)rank;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1, ndev = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  CUDACHECK(cudaGetDeviceCount(&ndev));
  CUDACHECK(cudaSetDevice(rank % ndev));
  ncclUniqueId id;
  if (rank == 0) NCCLCHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, world, id, rank));
  cudaStream_t stream;
  CUDACHECK(cudaStreamCreate(&stream));

  const size_t batch = argc > 1 ? (size_t)std::atol(argv[1]) : 8, hidden = 4096, vocab_shard = 32000 / 4;
  Workspace ws;
  ws.capacity = 64ull << 20;
  CUDACHECK(cudaMalloc(&ws.base, ws.capacity));
  Activations act;
  act.attn_out = ws.carve<__half>(batch * hidden);
  act.mlp_out = ws.carve<__half>(batch * hidden);
  act.logits = ws.carve<float>(world * vocab_shard);

  for (int layer = 0; layer < 4; ++layer) {
    partial_output<<<64, 256, 0, stream>>>(act.attn_out, batch * hidden, 0.25f * (float)(rank + layer));
    NCCLCHECK(ncclAllReduce(act.attn_out, act.attn_out, batch * hidden, ncclHalf, ncclSum, comm, stream));
    partial_output<<<64, 256, 0, stream>>>(act.mlp_out, batch * hidden, 0.5f * (float)(rank + layer));
    NCCLCHECK(ncclAllReduce(act.mlp_out, act.mlp_out, batch * hidden, ncclHalf, ncclSum, comm, stream));
  }
  float* mine = act.logits + (size_t)rank * vocab_shard;
  shard_logits<<<64, 256, 0, stream>>>(mine, act.mlp_out, vocab_shard, rank);
  NCCLCHECK(ncclAllGather(mine, act.logits, vocab_shard, ncclFloat, comm, stream));
  CUDACHECK(cudaStreamSynchronize(stream));

  float last = 0.f;
  CUDACHECK(cudaMemcpy(&last, act.logits + (size_t)(world - 1) * vocab_shard, sizeof(float), cudaMemcpyDeviceToHost));
  std::printf("rank %d: logits[last shard][0] = %f\n", rank, last);
  CUDACHECK(cudaFree(ws.base));
  NCCLCHECK(ncclCommDestroy(comm));
  MPI_Finalize();
  return 0;
}
