// Megatron style 2-D parallelism with two communicators made by ncclCommInitRank, each from its
// own unique id broadcast over an MPI sub-communicator (no ncclCommSplit): the tensor-parallel
// group sums a row-parallel layer's bf16 output, the data-parallel group averages gradients and
// the loss. Buffers live in structs, filled by helpers; errors are checked by macros.
#include <cstdio>
#include <cstdlib>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#define CUDA_CHECK(cmd)                                                                   \
  do {                                                                                    \
    cudaError_t e = (cmd);                                                                \
    if (e != cudaSuccess) {                                                               \
      fprintf(stderr, "CUDA %s:%d '%s'\n", __FILE__, __LINE__, cudaGetErrorString(e));  \
      exit(EXIT_FAILURE);                                                                 \
    }                                                                                     \
  } while (0)

#define NCCL_CHECK(cmd)                                                                   \
  do {                                                                                    \
    ncclResult_t res = (cmd);                                                             \
    if (res != ncclSuccess) {                                                             \
      fprintf(stderr, "NCCL %s:%d '%s'\n", __FILE__, __LINE__, ncclGetErrorString(res)); \
      exit(EXIT_FAILURE);                                                                 \
    }                                                                                     \
  } while (0)

struct ParallelGroups {
  int tp_rank, tp_size, dp_rank, dp_size;
  ncclComm_t tp_comm;
  ncclComm_t dp_comm;
};

struct RowParallelLinear {
  __nv_bfloat16* out;   // partial sums of this rank's shard of the input features
  __nv_bfloat16* grad;  // weight gradient of the local shard
  size_t out_n, grad_n;
};

// One communicator per MPI sub-group: rank 0 of the group makes the id, MPI carries it.
static void init_group_comm(ncclComm_t* comm, MPI_Comm group) {
  int r, n;
  MPI_Comm_rank(group, &r);
  MPI_Comm_size(group, &n);
  ncclUniqueId id;
  if (r == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, group);
  NCCL_CHECK(ncclCommInitRank(comm, n, id, r));
}

static void alloc_layer(RowParallelLinear* l, size_t out_n, size_t grad_n) {
  l->out_n = out_n;
  l->grad_n = grad_n;
  CUDA_CHECK(cudaMalloc(&l->out, out_n * sizeof(__nv_bfloat16)));
  CUDA_CHECK(cudaMalloc(&l->grad, grad_n * sizeof(__nv_bfloat16)));
  CUDA_CHECK(cudaMemset(l->out, 0, out_n * sizeof(__nv_bfloat16)));
  CUDA_CHECK(cudaMemset(l->grad, 0, grad_n * sizeof(__nv_bfloat16)));
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  CUDA_CHECK(cudaSetDevice(rank));

  ParallelGroups pg;
  pg.tp_size = size >= 2 ? 2 : 1;
  pg.dp_size = size / pg.tp_size;
  pg.tp_rank = rank % pg.tp_size;
  pg.dp_rank = rank / pg.tp_size;
  MPI_Comm mpi_tp, mpi_dp;
  MPI_Comm_split(MPI_COMM_WORLD, pg.dp_rank, pg.tp_rank, &mpi_tp);
  MPI_Comm_split(MPI_COMM_WORLD, pg.tp_rank, pg.dp_rank, &mpi_dp);
  init_group_comm(&pg.dp_comm, mpi_dp);
  init_group_comm(&pg.tp_comm, mpi_tp);

  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  RowParallelLinear layer;
  alloc_layer(&layer, 1 << 18, 1 << 20);
  float* loss;
  CUDA_CHECK(cudaMalloc(&loss, sizeof(float)));
  CUDA_CHECK(cudaMemset(loss, 0, sizeof(float)));

  for (int step = 0; step < 3; ++step) {
    // forward: the row-parallel output is the sum over the tensor-parallel group
    NCCL_CHECK(ncclAllReduce(layer.out, layer.out, layer.out_n, ncclBfloat16, ncclSum, pg.tp_comm, stream));
    // backward: data-parallel replicas average their gradients and the loss
    NCCL_CHECK(ncclAllReduce(layer.grad, layer.grad, layer.grad_n, ncclBfloat16, ncclAvg, pg.dp_comm, stream));
    NCCL_CHECK(ncclAllReduce(loss, loss, 1, ncclFloat, ncclAvg, pg.dp_comm, stream));
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  if (rank == 0) printf("tp %d dp %d ok\n", pg.tp_size, pg.dp_size);

  CUDA_CHECK(cudaFree(layer.out));
  CUDA_CHECK(cudaFree(layer.grad));
  CUDA_CHECK(cudaFree(loss));
  NCCL_CHECK(ncclCommDestroy(pg.tp_comm));
  NCCL_CHECK(ncclCommDestroy(pg.dp_comm));
  MPI_Comm_free(&mpi_tp);
  MPI_Comm_free(&mpi_dp);
  MPI_Finalize();
  return 0;
}
