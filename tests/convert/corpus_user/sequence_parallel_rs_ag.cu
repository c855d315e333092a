// Sequence parallelism: layer norm output reduce-scattered along the sequence, then all-gathered
// back before the next matmul, over a loop of layers with activations in a struct of arrays.
#include <cstdio>
#include <cstdlib>
#include <mpi.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define NCCLCHECK(cmd) do { ncclResult_t r = cmd; if (r != ncclSuccess) { printf("NCCL error %s:%d\n", __FILE__, __LINE__); exit(1); } } while (0)

#define N_LAYERS 2

struct Activations {
  half* full[N_LAYERS];
  half* part[N_LAYERS];
};

void sp_exchange(half* full, half* part, size_t part_elems, ncclComm_t comm, cudaStream_t st) {
  NCCLCHECK(ncclReduceScatter(full, part, part_elems, ncclFloat16, ncclSum, comm, st));
  NCCLCHECK(ncclAllGather(part, full, part_elems, ncclFloat16, comm, st));
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  ncclUniqueId id;
  if (rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  cudaSetDevice(rank);
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, nranks, id, rank));
  cudaStream_t st;
  cudaStreamCreate(&st);
  const size_t part_elems = 512 * 1024;
  Activations acts;
  for (int l = 0; l < N_LAYERS; ++l) {
    cudaMalloc(&acts.full[l], nranks * part_elems * sizeof(half));
    cudaMalloc(&acts.part[l], part_elems * sizeof(half));
  }
  for (int l = 0; l < N_LAYERS; ++l) sp_exchange(acts.full[l], acts.part[l], part_elems, comm, st);
  cudaStreamSynchronize(st);
  printf("rank %d ok\n", rank);
  for (int l = 0; l < N_LAYERS; ++l) {
    cudaFree(acts.full[l]);
    cudaFree(acts.part[l]);
  }
  ncclCommDestroy(comm);
  MPI_Finalize();
  return 0;
}
