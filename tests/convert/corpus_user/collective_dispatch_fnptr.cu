// A small communication wrapper class: collectives go through a member helper and one through a
// function pointer table; the direct calls convert, the pointer call cannot be followed.
#include <cstdio>
#include <cstdlib>
#include <mpi.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define NCCLCHECK(cmd) do { ncclResult_t r = cmd; if (r != ncclSuccess) { printf("NCCL error %d\n", (int)r); exit(1); } } while (0)

typedef ncclResult_t (*AllReduceFn)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);

struct Communicator {
  ncclComm_t comm;
  cudaStream_t stream;
  void all_reduce(float* buf, size_t n) { NCCLCHECK(ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, comm, stream)); }
};

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  ncclUniqueId id;
  if (rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  cudaSetDevice(rank);
  Communicator c;
  NCCLCHECK(ncclCommInitRank(&c.comm, nranks, id, rank));
  cudaStreamCreate(&c.stream);
  const size_t n = 1 << 20;
  float* a;
  float* b;
  cudaMalloc(&a, n * sizeof(float));
  cudaMalloc(&b, n * sizeof(float));
  c.all_reduce(a, n);
  AllReduceFn fn = &ncclAllReduce;
  NCCLCHECK(fn(b, b, n, ncclFloat32, ncclSum, c.comm, c.stream));
  cudaStreamSynchronize(c.stream);
  printf("rank %d ok\n", rank);
  cudaFree(a);
  cudaFree(b);
  ncclCommDestroy(c.comm);
  MPI_Finalize();
  return 0;
}
