// 2-D parallelism: a tensor-parallel communicator and a data-parallel one split from the world.
// Activations are summed on the TP communicator, gradients averaged on the DP communicator.
#include <cstdio>
#include <cstdlib>
#include <mpi.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define NCCL(x) do { if ((x) != ncclSuccess) { fprintf(stderr, "NCCL failed: %s\n", #x); exit(1); } } while (0)

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  ncclUniqueId id;
  if (rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  cudaSetDevice(rank);
  ncclComm_t world_comm, tp_comm, dp_comm;
  NCCL(ncclCommInitRank(&world_comm, size, id, rank));
  const int tp = size >= 2 ? 2 : 1;
  NCCL(ncclCommSplit(world_comm, rank / tp, rank, &tp_comm, NULL));
  NCCL(ncclCommSplit(world_comm, rank % tp, rank, &dp_comm, NULL));
  cudaStream_t s;
  cudaStreamCreate(&s);
  const size_t act_n = 1 << 20, grad_n = 1 << 21;
  float *acts, *grads;
  cudaMalloc(&acts, act_n * sizeof(float));
  cudaMalloc(&grads, grad_n * sizeof(float));
  for (int it = 0; it < 2; ++it) {
    NCCL(ncclAllReduce(acts, acts, act_n, ncclFloat, ncclSum, tp_comm, s));
    NCCL(ncclAllReduce(grads, grads, grad_n, ncclFloat, ncclAvg, dp_comm, s));
  }
  cudaStreamSynchronize(s);
  printf("rank %d ok\n", rank);
  cudaFree(acts);
  cudaFree(grads);
  ncclCommDestroy(tp_comm);
  ncclCommDestroy(dp_comm);
  ncclCommDestroy(world_comm);
  MPI_Finalize();
  return 0;
}
