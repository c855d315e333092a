// Written after NCCL's user-buffer-registration and symmetric-memory examples: MPI bootstrap with
// the local header's check macros, the gradient buffers registered with ncclCommRegister for
// zero-copy, a parameter block the program makes its own symmetric window
// (ncclMemAlloc + ncclCommWindowRegister(..., NCCL_WIN_COLL_SYMMETRIC)), and an unregistered
// int64 step counter broadcast from rank 0. Every handle is deregistered before its free.
#include <stdio.h>
#include <vector>
#include "cuda_runtime.h"
#include "nccl.h"
#include "mpi.h"
#include "nccl_examples_common.h"

__global__ void init_grads(float* g, size_t n, int rank) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) g[i] = 0.001f * (float)(rank + 1) * (float)(i % 97);
}

__global__ void scale_params(double* p, size_t n, double f) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) p[i] = p[i] * f + 1.0;
}

int main(int argc, char* argv[]) {
  const size_t count = 4 * 1024 * 1024;
  const size_t param_count = 256 * 1024;
  int myRank, nRanks, localRank = 0;

  MPICHECK(MPI_Init(&argc, &argv));
  MPICHECK(MPI_Comm_rank(MPI_COMM_WORLD, &myRank));
  MPICHECK(MPI_Comm_size(MPI_COMM_WORLD, &nRanks));

  std::vector<uint64_t> hostHashs(nRanks);
  char hostname[1024];
  getHostName(hostname, 1024);
  hostHashs[myRank] = getHostHash(hostname);
  MPICHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, hostHashs.data(), sizeof(uint64_t), MPI_BYTE, MPI_COMM_WORLD));
  for (int p = 0; p < myRank; p++)
    if (hostHashs[p] == hostHashs[myRank]) localRank++;

  ncclUniqueId id;
  if (myRank == 0) NCCLCHECK(ncclGetUniqueId(&id));
  MPICHECK(MPI_Bcast((void*)&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD));
  CUDACHECK(cudaSetDevice(localRank));

  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, nRanks, id, myRank));
  cudaStream_t stream;
  CUDACHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  // Zero-copy gradients: the example registers both ends once and keeps the handles.
  float *sendbuff = nullptr, *recvbuff = nullptr;
  void *sendHandle = nullptr, *recvHandle = nullptr;
  CUDACHECK(cudaMalloc((void**)&sendbuff, count * sizeof(float)));
  CUDACHECK(cudaMalloc((void**)&recvbuff, count * sizeof(float)));
  NCCLCHECK(ncclCommRegister(comm, sendbuff, count * sizeof(float), &sendHandle));
  NCCLCHECK(ncclCommRegister(comm, recvbuff, count * sizeof(float), &recvHandle));

  // The parameters live in the program's own symmetric window.
  double* params = nullptr;
  ncclWindow_t paramWin;
  NCCLCHECK(ncclMemAlloc((void**)&params, param_count * sizeof(double)));
  NCCLCHECK(ncclCommWindowRegister(comm, params, param_count * sizeof(double), &paramWin, NCCL_WIN_COLL_SYMMETRIC));
  CUDACHECK(cudaMemset(params, 0, param_count * sizeof(double)));

  // A plain device counter nobody registered.
  int64_t* step = nullptr;
  CUDACHECK(cudaMalloc((void**)&step, sizeof(int64_t)));
  CUDACHECK(cudaMemset(step, 0, sizeof(int64_t)));

  for (int iter = 0; iter < 3; iter++) {
    init_grads<<<(count + 255) / 256, 256, 0, stream>>>(sendbuff, count, myRank);
    NCCLCHECK(ncclAllReduce((const void*)sendbuff, (void*)recvbuff, count, ncclFloat, ncclSum, comm, stream));
    scale_params<<<(param_count + 255) / 256, 256, 0, stream>>>(params, param_count, 0.5);
    NCCLCHECK(ncclAllReduce(params, params, param_count, ncclDouble, ncclMax, comm, stream));
    NCCLCHECK(ncclBroadcast(step, step, 1, ncclInt64, 0, comm, stream));
  }
  CUDACHECK(cudaStreamSynchronize(stream));

  float first = 0.f;
  CUDACHECK(cudaMemcpy(&first, recvbuff, sizeof(float), cudaMemcpyDeviceToHost));
  printf("[MPI Rank %d] recvbuff[0] = %f\n", myRank, first);

  NCCLCHECK(ncclCommDeregister(comm, sendHandle));
  NCCLCHECK(ncclCommDeregister(comm, recvHandle));
  NCCLCHECK(ncclCommWindowDeregister(comm, paramWin));
  NCCLCHECK(ncclMemFree(params));
  CUDACHECK(cudaFree(sendbuff));
  CUDACHECK(cudaFree(recvbuff));
  CUDACHECK(cudaFree(step));
  CUDACHECK(cudaStreamDestroy(stream));
  ncclCommDestroy(comm);
  MPICHECK(MPI_Finalize());
  return 0;
}
