// Data-parallel step, MPI bootstrap: gradients of every layer averaged by a helper that takes the
// buffer as a parameter (the usual shape of a trainer's all-reduce).
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <mpi.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define CUDACHECK(cmd) do { cudaError_t e = cmd; if (e != cudaSuccess) { printf("CUDA error %s:%d '%s'\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)
#define NCCLCHECK(cmd) do { ncclResult_t r = cmd; if (r != ncclSuccess) { printf("NCCL error %s:%d '%s'\n", __FILE__, __LINE__, ncclGetErrorString(r)); exit(1); } } while (0)

static const int kLayers = 4;
static const size_t kParams = 1 << 20;

__global__ void backward(float* g, size_t n, int layer, int rank) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) g[i] = (float)((i + layer + rank) % 7);
}
__global__ void scale(float* g, size_t n, float s) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) g[i] *= s;
}

void allreduce_grads(float* g, size_t n, ncclComm_t comm, cudaStream_t s) {
  NCCLCHECK(ncclAllReduce(g, g, n, ncclFloat, ncclSum, comm, s));
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  ncclUniqueId id;
  if (rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  CUDACHECK(cudaSetDevice(rank));
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, nranks, id, rank));
  cudaStream_t s;
  CUDACHECK(cudaStreamCreate(&s));
  std::vector<float*> grads(kLayers);
  for (int l = 0; l < kLayers; ++l) CUDACHECK(cudaMalloc(&grads[l], kParams * sizeof(float)));
  for (int step = 0; step < 3; ++step) {
    for (int l = kLayers - 1; l >= 0; --l) {
      backward<<<128, 256, 0, s>>>(grads[l], kParams, l, rank);
      allreduce_grads(grads[l], kParams, comm, s);
      scale<<<128, 256, 0, s>>>(grads[l], kParams, 1.0f / nranks);
    }
  }
  CUDACHECK(cudaStreamSynchronize(s));
  float h = 0;
  CUDACHECK(cudaMemcpy(&h, grads[0], sizeof(float), cudaMemcpyDeviceToHost));
  printf("rank %d grad[0][0] = %f\n", rank, h);
  for (int l = 0; l < kLayers; ++l) CUDACHECK(cudaFree(grads[l]));
  ncclCommDestroy(comm);
  MPI_Finalize();
  return 0;
}
