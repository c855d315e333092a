// The nccl-tests harness idioms in one program: the rank and size asked of the communicator
// (ncclCommUserRank, ncclCommCount), the stream waited on by polling cudaStreamQuery and
// ncclCommGetAsyncError (a failed peer aborts the communicator instead of hanging), in-place pointers
// computed from the rank (an all-gather whose send buffer is this rank's slice of the receive
// buffer, `-i 1`), a root taken from the command line (`-r`) for ncclReduce and ncclBroadcast,
// and independent collectives issued together between ncclGroupStart and ncclGroupEnd.
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CUDACHECK(cmd)                                                                      \
  do {                                                                                      \
    cudaError_t e = cmd;                                                                    \
    if (e != cudaSuccess) {                                                                 \
      printf("Cuda failure %s:%d '%s'\n", __FILE__, __LINE__, cudaGetErrorString(e));       \
      exit(EXIT_FAILURE);                                                                   \
    }                                                                                       \
  } while (0)
#define NCCLCHECK(cmd)                                                                      \
  do {                                                                                      \
    ncclResult_t r = cmd;                                                                   \
    if (r != ncclSuccess) {                                                                 \
      printf("NCCL failure %s:%d '%s'\n", __FILE__, __LINE__, ncclGetErrorString(r));       \
      exit(EXIT_FAILURE);                                                                   \
    }                                                                                       \
  } while (0)

// Waits for the stream while watching the communicator for asynchronous errors.
static ncclResult_t wait_stream(cudaStream_t stream, ncclComm_t comm) {
  while (true) {
    cudaError_t q = cudaStreamQuery(stream);
    if (q == cudaSuccess) return ncclSuccess;
    if (q != cudaErrorNotReady) {
      printf("stream error: %s\n", cudaGetErrorString(q));
      return ncclUnhandledCudaError;
    }
    ncclResult_t async;
    NCCLCHECK(ncclCommGetAsyncError(comm, &async));
    if (async != ncclSuccess && async != ncclInProgress) {
      ncclCommAbort(comm);  // a peer failed: nothing more can complete on this communicator
      return async;
    }
    sched_yield();
  }
}

__global__ void fill_ints(int* x, size_t n, int rank) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    x[i] = (int)(i % 1000) + rank;
}

int main(int argc, char* argv[]) {
  int root = 0, in_place = 1;
  size_t count = 1 << 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-r")) root = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "-i")) in_place = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "-n")) count = strtoull(argv[i + 1], NULL, 0);
  }
  int mpi_rank, mpi_size;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &mpi_size);
  int ndev;
  CUDACHECK(cudaGetDeviceCount(&ndev));
  CUDACHECK(cudaSetDevice(mpi_rank % ndev));
  ncclUniqueId id;
  if (mpi_rank == 0) NCCLCHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, mpi_size, id, mpi_rank));

  int rank, nranks;
  NCCLCHECK(ncclCommUserRank(comm, &rank));
  NCCLCHECK(ncclCommCount(comm, &nranks));
  root = root % nranks;

  cudaStream_t stream;
  CUDACHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int *sendbuff, *recvbuff, *partials, *reduced;
  float* scale;
  CUDACHECK(cudaMalloc(&sendbuff, count * sizeof(int)));
  CUDACHECK(cudaMalloc(&recvbuff, count * nranks * sizeof(int)));
  CUDACHECK(cudaMalloc(&partials, count * nranks * sizeof(int)));
  CUDACHECK(cudaMalloc(&reduced, count * sizeof(int)));
  CUDACHECK(cudaMalloc(&scale, 64 * sizeof(float)));
  CUDACHECK(cudaMemset(scale, 0, 64 * sizeof(float)));

  // The all-gather's input: this rank's slice of the output when in place.
  int* gather_in = in_place ? recvbuff + (size_t)rank * count : sendbuff;
  fill_ints<<<128, 256, 0, stream>>>(gather_in, count, rank);
  fill_ints<<<128, 256, 0, stream>>>(partials, count * nranks, rank);
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclAllGather(gather_in, recvbuff, count, ncclInt32, comm, stream));
  NCCLCHECK(ncclReduceScatter(partials, reduced, count, ncclInt32, ncclMax, comm, stream));
  NCCLCHECK(ncclGroupEnd());
  NCCLCHECK(ncclReduce(reduced, reduced, count, ncclInt32, ncclSum, root, comm, stream));
  NCCLCHECK(ncclBroadcast(scale, scale, 64, ncclFloat, root, comm, stream));
  NCCLCHECK(wait_stream(stream, comm));

  int first = 0;
  CUDACHECK(cudaMemcpy(&first, reduced, sizeof(int), cudaMemcpyDeviceToHost));
  if (rank == root) printf("root %d: reduced[0] = %d (in place %d)\n", root, first, in_place);

  CUDACHECK(cudaFree(sendbuff));
  CUDACHECK(cudaFree(recvbuff));
  CUDACHECK(cudaFree(partials));
  CUDACHECK(cudaFree(reduced));
  CUDACHECK(cudaFree(scale));
  CUDACHECK(cudaStreamDestroy(stream));
  NCCLCHECK(ncclCommDestroy(comm));
  MPI_Finalize();
  return 0;
}
