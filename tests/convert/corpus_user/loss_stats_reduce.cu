// Metrics: the loss summed to rank 0 (ncclReduce), the max gradient norm and min step time
// across ranks (ncclMax/ncclMin all-reduces) on tiny buffers, MPI bootstrap.
#include <cstdio>
#include <mpi.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define NCCLCHECK(c) if ((c) != ncclSuccess) { printf("nccl error line %d\n", __LINE__); return 1; }

__global__ void compute_stats(float* loss, float* gnorm, float* step_ms, int rank) {
  if (threadIdx.x == 0) { loss[0] = 1.0f + rank; gnorm[0] = 0.5f * rank; step_ms[0] = 10.0f - rank; }
}

int main(int argc, char* argv[]) {
  MPI_Init(&argc, &argv);
  int myRank, nRanks;
  MPI_Comm_rank(MPI_COMM_WORLD, &myRank);
  MPI_Comm_size(MPI_COMM_WORLD, &nRanks);
  ncclUniqueId id;
  if (myRank == 0) ncclGetUniqueId(&id);
  MPI_Bcast((void*)&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  cudaSetDevice(myRank);
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, nRanks, id, myRank));
  cudaStream_t s;
  cudaStreamCreate(&s);
  float *loss, *loss_sum, *gnorm, *step_ms;
  cudaMalloc(&loss, sizeof(float));
  cudaMalloc(&loss_sum, sizeof(float));
  cudaMalloc(&gnorm, sizeof(float));
  cudaMalloc(&step_ms, sizeof(float));
  compute_stats<<<1, 32, 0, s>>>(loss, gnorm, step_ms, myRank);
  NCCLCHECK(ncclReduce(loss, loss_sum, 1, ncclFloat, ncclSum, 0, comm, s));
  NCCLCHECK(ncclAllReduce(gnorm, gnorm, 1, ncclFloat, ncclMax, comm, s));
  NCCLCHECK(ncclAllReduce(step_ms, step_ms, 1, ncclFloat, ncclMin, comm, s));
  cudaStreamSynchronize(s);
  float h[3];
  cudaMemcpy(&h[0], loss_sum, sizeof(float), cudaMemcpyDeviceToHost);
  cudaMemcpy(&h[1], gnorm, sizeof(float), cudaMemcpyDeviceToHost);
  cudaMemcpy(&h[2], step_ms, sizeof(float), cudaMemcpyDeviceToHost);
  if (myRank == 0) printf("loss %f max gnorm %f min step %f\n", h[0], h[1], h[2]);
  cudaFree(loss); cudaFree(loss_sum); cudaFree(gnorm); cudaFree(step_ms);
  ncclCommDestroy(comm);
  MPI_Finalize();
  return 0;
}
