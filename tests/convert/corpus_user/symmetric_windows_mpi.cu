// A data-parallel step on NCCL's symmetric memory, written the way NCCL 2.27+ users are told to:
// buffers from ncclMemAlloc, each registered as a window with NCCL_WIN_COLL_SYMMETRIC on every
// rank, then host collectives on them (a gradient sum and an all-gather of a bf16 shard), then
// the windows deregistered before the memory is freed. MPI bootstrap, one GPU per rank.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#define CUDA_OK(call)                                                                         \
  do {                                                                                        \
    cudaError_t e_ = (call);                                                                  \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d cuda: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                           \
    }                                                                                         \
  } while (0)
#define NCCL_OK(call)                                                                         \
  do {                                                                                        \
    ncclResult_t r_ = (call);                                                                 \
    if (r_ != ncclSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d nccl: %s\n", __FILE__, __LINE__, ncclGetErrorString(r_)); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                           \
    }                                                                                         \
  } while (0)

__global__ void fill_grads(float* g, size_t n, int rank, int step) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    g[i] = 0.001f * (float)((i * 7 + rank * 13 + step) % 97);
}

__global__ void fill_shard(__nv_bfloat16* s, size_t n, int rank) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    s[i] = __float2bfloat16((float)(rank * 100 + (int)(i % 50)));
}

struct SymBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  ncclWindow_t win = nullptr;
};

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int devices = 0;
  CUDA_OK(cudaGetDeviceCount(&devices));
  CUDA_OK(cudaSetDevice(rank % devices));

  ncclUniqueId id;
  if (rank == 0) NCCL_OK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  NCCL_OK(ncclCommInitRank(&comm, world, id, rank));

  const size_t n_grads = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (size_t)1 << 22;
  const size_t shard = 1 << 16;
  SymBuffer grads, sum, part, gathered;
  grads.bytes = sum.bytes = n_grads * sizeof(float);
  part.bytes = shard * sizeof(__nv_bfloat16);
  gathered.bytes = part.bytes * world;
  NCCL_OK(ncclMemAlloc(&grads.ptr, grads.bytes));
  NCCL_OK(ncclMemAlloc(&sum.ptr, sum.bytes));
  NCCL_OK(ncclMemAlloc(&part.ptr, part.bytes));
  NCCL_OK(ncclMemAlloc(&gathered.ptr, gathered.bytes));
  // Every rank registers the same windows in the same order.
  NCCL_OK(ncclCommWindowRegister(comm, grads.ptr, grads.bytes, &grads.win, NCCL_WIN_COLL_SYMMETRIC));
  NCCL_OK(ncclCommWindowRegister(comm, sum.ptr, sum.bytes, &sum.win, NCCL_WIN_COLL_SYMMETRIC));
  NCCL_OK(ncclCommWindowRegister(comm, part.ptr, part.bytes, &part.win, NCCL_WIN_COLL_SYMMETRIC));
  NCCL_OK(ncclCommWindowRegister(comm, gathered.ptr, gathered.bytes, &gathered.win, NCCL_WIN_COLL_SYMMETRIC));

  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  double checksum = 0.0;
  std::vector<float> host(4);
  for (int step = 0; step < 3; ++step) {
    fill_grads<<<256, 256, 0, stream>>>((float*)grads.ptr, n_grads, rank, step);
    NCCL_OK(ncclAllReduce(grads.ptr, sum.ptr, n_grads, ncclFloat, ncclSum, comm, stream));
    CUDA_OK(cudaMemcpyAsync(host.data(), sum.ptr, host.size() * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    checksum += host[0] + host[3];
  }
  fill_shard<<<64, 256, 0, stream>>>((__nv_bfloat16*)part.ptr, shard, rank);
  NCCL_OK(ncclAllGather(part.ptr, gathered.ptr, shard, ncclBfloat16, comm, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  if (rank == 0) std::printf("checksum %.4f over %d ranks\n", checksum, world);

  NCCL_OK(ncclCommWindowDeregister(comm, gathered.win));
  NCCL_OK(ncclCommWindowDeregister(comm, part.win));
  NCCL_OK(ncclCommWindowDeregister(comm, sum.win));
  NCCL_OK(ncclCommWindowDeregister(comm, grads.win));
  NCCL_OK(ncclMemFree(gathered.ptr));
  NCCL_OK(ncclMemFree(part.ptr));
  NCCL_OK(ncclMemFree(sum.ptr));
  NCCL_OK(ncclMemFree(grads.ptr));
  CUDA_OK(cudaStreamDestroy(stream));
  NCCL_OK(ncclCommDestroy(comm));
  MPI_Finalize();
  return 0;
}
