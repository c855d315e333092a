// Expert parallel with NCCL's own allocator: buffers from ncclMemAlloc, an even all-to-all of
// tokens, a scatter of routing tables from rank 0 and a gather of expert loads to rank 0.
#include <cstdio>
#include <cstdlib>
#include <mpi.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define NCCLCHECK(cmd) do { ncclResult_t r = cmd; if (r != ncclSuccess) { printf("NCCL error %s:%d\n", __FILE__, __LINE__); exit(1); } } while (0)

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
  cudaStream_t s;
  cudaStreamCreate(&s);
  const size_t per_peer = 64 * 1024;
  void* tokens_out = nullptr;
  void* tokens_in = nullptr;
  void* table_all = nullptr;
  void* table_mine = nullptr;
  void* load_mine = nullptr;
  void* load_all = nullptr;
  NCCLCHECK(ncclMemAlloc(&tokens_out, nranks * per_peer * sizeof(float)));
  NCCLCHECK(ncclMemAlloc(&tokens_in, nranks * per_peer * sizeof(float)));
  NCCLCHECK(ncclMemAlloc(&table_all, nranks * 1024 * sizeof(int)));
  NCCLCHECK(ncclMemAlloc(&table_mine, 1024 * sizeof(int)));
  NCCLCHECK(ncclMemAlloc(&load_mine, 16 * sizeof(float)));
  NCCLCHECK(ncclMemAlloc(&load_all, nranks * 16 * sizeof(float)));
  NCCLCHECK(ncclAlltoAll(tokens_out, tokens_in, per_peer, ncclFloat, comm, s));
  NCCLCHECK(ncclScatter(table_all, table_mine, 1024, ncclInt32, 0, comm, s));
  NCCLCHECK(ncclGather(load_mine, load_all, 16, ncclFloat, 0, comm, s));
  cudaStreamSynchronize(s);
  printf("rank %d ok\n", rank);
  ncclMemFree(tokens_out);
  ncclMemFree(tokens_in);
  ncclMemFree(table_all);
  ncclMemFree(table_mine);
  ncclMemFree(load_mine);
  ncclMemFree(load_all);
  ncclCommDestroy(comm);
  MPI_Finalize();
  return 0;
}
