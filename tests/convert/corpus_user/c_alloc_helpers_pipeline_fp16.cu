// A C-style data- and pipeline-parallel step, written the way C/HPC programmers write CUDA: device
// memory comes from helpers that fill the caller's pointer through a pointer to it
// (`dev_alloc(&grad, n)` with `float** p`, a template `alloc_zero(&h, n)` with `T** p` for float
// and __half buffers), a stage function returns early on the last rank (receive only) and when there
// is one rank, the gradient is reduced in fp16 and fp32, the activations are gathered. MPI bootstrap.
#include <stdio.h>
#include <stdlib.h>
#include <mpi.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <nccl.h>

#define CHECK_CUDA(x)                                                                 \
  do {                                                                                \
    cudaError_t err_ = (x);                                                           \
    if (err_ != cudaSuccess) {                                                        \
      fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(err_));   \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                   \
    }                                                                                 \
  } while (0)
#define CHECK_NCCL(x)                                                                 \
  do {                                                                                \
    ncclResult_t res_ = (x);                                                          \
    if (res_ != ncclSuccess) {                                                        \
      fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, ncclGetErrorString(res_));   \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                   \
    }                                                                                 \
  } while (0)

static void dev_alloc(float** p, size_t n) { CHECK_CUDA(cudaMalloc((void**)p, n * sizeof(float))); }

template <typename T>
static void alloc_zero(T** p, size_t n) {
  CHECK_CUDA(cudaMalloc(p, n * sizeof(T)));
  CHECK_CUDA(cudaMemset(*p, 0, n * sizeof(T)));
}

__global__ void init_values(float* x, size_t n, int rank) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    x[i] = 0.25f * (float)rank + 0.001f * (float)(i % 101);
}
__global__ void to_half(const float* x, __half* h, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    h[i] = __float2half(x[i] * 0.5f);
}
__global__ void stage_compute(const float* in, float* out, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    out[i] = in[i] * 0.9f + 0.1f;
}

// One pipeline hop: every rank but the last sends its activations on; every rank but the first
// receives its predecessor's. Returns how many transfers this rank took part in.
static int pipeline_hop(int rank, int world, const float* act, float* prev_act, size_t n, ncclComm_t comm,
                        cudaStream_t stream) {
  if (world == 1) return 0;
  if (rank == world - 1) {
    CHECK_NCCL(ncclRecv(prev_act, n, ncclFloat, rank - 1, comm, stream));
    return 1;
  }
  CHECK_NCCL(ncclGroupStart());
  CHECK_NCCL(ncclSend(act, n, ncclFloat, rank + 1, comm, stream));
  if (rank > 0) CHECK_NCCL(ncclRecv(prev_act, n, ncclFloat, rank - 1, comm, stream));
  CHECK_NCCL(ncclGroupEnd());
  return rank > 0 ? 2 : 1;
}

int main(int argc, char** argv) {
  int rank, world, ndev;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  CHECK_CUDA(cudaGetDeviceCount(&ndev));
  CHECK_CUDA(cudaSetDevice(rank % ndev));

  ncclUniqueId id;
  if (rank == 0) CHECK_NCCL(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  CHECK_NCCL(ncclCommInitRank(&comm, world, id, rank));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));

  const size_t n = argc > 1 ? (size_t)atol(argv[1]) : (size_t)(1 << 20);
  float *grad, *act, *prev_act, *gathered;
  __half* grad_half;
  dev_alloc(&grad, n);
  dev_alloc(&act, n);
  alloc_zero(&prev_act, n);
  alloc_zero(&gathered, n * world);
  alloc_zero(&grad_half, n);

  init_values<<<128, 256, 0, stream>>>(grad, n, rank);
  stage_compute<<<128, 256, 0, stream>>>(grad, act, n);
  const int hops = pipeline_hop(rank, world, act, prev_act, n, comm, stream);
  to_half<<<128, 256, 0, stream>>>(grad, grad_half, n);
  CHECK_NCCL(ncclAllReduce(grad_half, grad_half, n, ncclHalf, ncclSum, comm, stream));
  CHECK_NCCL(ncclAllReduce(grad, grad, n, ncclFloat, ncclAvg, comm, stream));
  CHECK_NCCL(ncclAllGather(act, gathered, n, ncclFloat, comm, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));

  float first = 0.f;
  CHECK_CUDA(cudaMemcpy(&first, gathered, sizeof(float), cudaMemcpyDeviceToHost));
  printf("rank %d: %d hops, gathered[0] = %f\n", rank, hops, first);

  CHECK_CUDA(cudaFree(grad));
  CHECK_CUDA(cudaFree(act));
  CHECK_CUDA(cudaFree(prev_act));
  CHECK_CUDA(cudaFree(gathered));
  CHECK_CUDA(cudaFree(grad_half));
  CHECK_NCCL(ncclCommDestroy(comm));
  MPI_Finalize();
  return 0;
}
