// Megatron-style 2-D parallelism in fp16: one all-reduce helper serves the tensor-parallel group
// (partial activations summed) and the data-parallel group (gradients summed, then scaled), the way
// trainers keep one wrapper per collective and pass it the group.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <mpi.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define CUDACHECK(cmd) do { cudaError_t e = cmd; if (e != cudaSuccess) { \
  printf("Failed: Cuda error %s:%d '%s'\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(EXIT_FAILURE); } } while (0)
#define NCCLCHECK(cmd) do { ncclResult_t r = cmd; if (r != ncclSuccess) { \
  printf("Failed: NCCL error %s:%d '%s'\n", __FILE__, __LINE__, ncclGetErrorString(r)); exit(EXIT_FAILURE); } } while (0)

struct ParallelState {
  ncclComm_t world;
  ncclComm_t tp;
  ncclComm_t dp;
  int tp_size;
  int dp_size;
};

static void all_reduce_fp16(__half* buf, size_t count, ncclComm_t comm, cudaStream_t stream) {
  NCCLCHECK(ncclAllReduce(buf, buf, count, ncclHalf, ncclSum, comm, stream));
}

__global__ void partial_matmul_out(__half* act, size_t n, int rank, int step) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    act[i] = __float2half(0.25f * (float)((i * 7 + rank * 3 + step) % 13) - 1.5f);
}

__global__ void backward_from(const __half* act, __half* grad, size_t n, int rank) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    grad[i] = __float2half(0.125f * __half2float(act[i % 4096]) + 0.01f * (float)(rank + 1));
}

__global__ void scale_fp16(__half* x, size_t n, float f) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    x[i] = __float2half(__half2float(x[i]) * f);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  int local_rank = rank;
  if (const char* lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK")) local_rank = atoi(lr);
  CUDACHECK(cudaSetDevice(local_rank));

  ncclUniqueId id;
  if (rank == 0) NCCLCHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);

  ParallelState ps;
  ps.tp_size = nranks >= 2 ? 2 : 1;
  ps.dp_size = nranks / ps.tp_size;
  NCCLCHECK(ncclCommInitRank(&ps.world, nranks, id, rank));
  NCCLCHECK(ncclCommSplit(ps.world, rank / ps.tp_size, rank, &ps.tp, NULL));
  NCCLCHECK(ncclCommSplit(ps.world, rank % ps.tp_size, rank, &ps.dp, NULL));

  cudaStream_t stream;
  CUDACHECK(cudaStreamCreate(&stream));
  const size_t act_elems = 4096 * 8, grad_elems = 1 << 20;
  __half *act = nullptr, *grad = nullptr;
  CUDACHECK(cudaMalloc(&act, act_elems * sizeof(__half)));
  CUDACHECK(cudaMalloc(&grad, grad_elems * sizeof(__half)));

  for (int step = 0; step < 3; ++step) {
    partial_matmul_out<<<64, 256, 0, stream>>>(act, act_elems, rank, step);
    all_reduce_fp16(act, act_elems, ps.tp, stream);  // row-parallel output: sum of partials
    backward_from<<<128, 256, 0, stream>>>(act, grad, grad_elems, rank);
    all_reduce_fp16(grad, grad_elems, ps.dp, stream);  // data-parallel gradients
    scale_fp16<<<128, 256, 0, stream>>>(grad, grad_elems, 1.0f / (float)ps.dp_size);
  }
  CUDACHECK(cudaStreamSynchronize(stream));

  std::vector<__half> host(grad_elems);
  CUDACHECK(cudaMemcpy(host.data(), grad, grad_elems * sizeof(__half), cudaMemcpyDeviceToHost));
  double sum = 0;
  for (size_t i = 0; i < grad_elems; i += 97) sum += __half2float(host[i]);
  printf("rank %d grad checksum %.4f\n", rank, sum);

  CUDACHECK(cudaFree(act));
  CUDACHECK(cudaFree(grad));
  ncclCommDestroy(ps.tp);
  ncclCommDestroy(ps.dp);
  ncclCommDestroy(ps.world);
  MPI_Finalize();
  return 0;
}
