// A small communicator class: the communicator is a field created through the object, the
// collectives are member functions that name it bare.
#include <cstdio>
#include <mpi.h>
#include <cuda_runtime.h>
#include <nccl.h>

struct Communicator {
  ncclComm_t comm;
  cudaStream_t stream;
  int rank = 0, size = 1;
  void all_reduce(float* buf, size_t n) { ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm, stream); }
  void all_gather(const float* shard, float* full, size_t n) { ncclAllGather(shard, full, n, ncclFloat, comm, stream); }
  void sync() { cudaStreamSynchronize(stream); }
};

__global__ void init(float* x, size_t n, float v) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) x[i] = v;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Communicator c;
  MPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &c.size);
  cudaSetDevice(c.rank);
  ncclUniqueId id;
  if (c.rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclCommInitRank(&c.comm, c.size, id, c.rank);
  cudaStreamCreate(&c.stream);
  const size_t n = 1 << 20;
  float *grad, *shard, *full;
  cudaMalloc(&grad, n * sizeof(float));
  cudaMalloc(&shard, n / 8 * sizeof(float));
  cudaMalloc(&full, n / 8 * c.size * sizeof(float));
  init<<<128, 256, 0, c.stream>>>(grad, n, 1.0f + c.rank);
  init<<<128, 256, 0, c.stream>>>(shard, n / 8, (float)c.rank);
  c.all_reduce(grad, n);
  c.all_gather(shard, full, n / 8);
  c.sync();
  float h[2];
  cudaMemcpy(&h[0], grad, sizeof(float), cudaMemcpyDeviceToHost);
  cudaMemcpy(&h[1], full + n / 8 * (c.size - 1), sizeof(float), cudaMemcpyDeviceToHost);
  std::printf("rank %d %f %f\n", c.rank, h[0], h[1]);
  cudaFree(grad); cudaFree(shard); cudaFree(full);
  ncclCommDestroy(c.comm);
  MPI_Finalize();
  return 0;
}
