// Initial weights broadcast from rank 0: an array of parameter buffers bufs[i] of different sizes,
// the calls through (void*) casts, inside one NCCL group.
#include <cstdio>
#include <cstdlib>
#include <mpi.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define NCCLCHECK(cmd) do { ncclResult_t r = cmd; if (r != ncclSuccess) { printf("NCCL error %s:%d\n", __FILE__, __LINE__); exit(1); } } while (0)

#define NUM_TENSORS 4

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
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  size_t sizes[NUM_TENSORS] = {1024, 4096, 65536, 1 << 20};
  float* bufs[NUM_TENSORS];
  for (int i = 0; i < NUM_TENSORS; i++) {
    cudaMalloc((void**)&bufs[i], sizes[i] * sizeof(float));
    if (rank == 0) cudaMemset(bufs[i], 0, sizes[i] * sizeof(float));
  }
  NCCLCHECK(ncclGroupStart());
  for (int i = 0; i < NUM_TENSORS; i++)
    NCCLCHECK(ncclBroadcast((const void*)bufs[i], (void*)bufs[i], sizes[i], ncclFloat, 0, comm, stream));
  NCCLCHECK(ncclGroupEnd());
  cudaStreamSynchronize(stream);
  printf("rank %d has the weights\n", rank);
  for (int i = 0; i < NUM_TENSORS; i++) cudaFree(bufs[i]);
  ncclCommDestroy(comm);
  MPI_Finalize();
  return 0;
}
