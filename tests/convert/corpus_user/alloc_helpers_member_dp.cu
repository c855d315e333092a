// Device buffers come from a small allocation helper that returns the pointer; a class owns the
// communicator and the gradient buffer (allocated in its constructor) and reduces in a member.
#include <cstdio>
#include <cstdlib>
#include <mpi.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define NCCLCHECK(cmd) do { ncclResult_t r = cmd; if (r != ncclSuccess) { std::printf("nccl %s\n", ncclGetErrorString(r)); std::exit(1); } } while (0)

template <typename T>
T* device_alloc(size_t n) {
  T* p = nullptr;
  if (cudaMalloc(&p, n * sizeof(T)) != cudaSuccess) std::exit(1);
  return p;
}

float* alloc_floats(size_t n) {
  float* p;
  cudaMalloc((void**)&p, n * sizeof(float));
  return p;
}

class DataParallel {
 public:
  DataParallel(ncclComm_t comm, size_t n) : comm_(comm), n_(n) { cudaMalloc(&grads_, n * sizeof(float)); }
  ~DataParallel() { cudaFree(grads_); }
  float* grads() { return grads_; }
  void sync(cudaStream_t s) { NCCLCHECK(ncclAllReduce(grads_, grads_, n_, ncclFloat, ncclSum, comm_, s)); }
 private:
  ncclComm_t comm_;
  size_t n_;
  float* grads_ = nullptr;
};

__global__ void fill(float* x, size_t n, float v) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) x[i] = v;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, world;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  cudaSetDevice(rank);
  ncclUniqueId id;
  if (rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, world, id, rank));
  cudaStream_t s;
  cudaStreamCreate(&s);
  const size_t n = 1 << 22;
  float* act = device_alloc<float>(n);
  float* logits = alloc_floats(n / 4);
  DataParallel dp(comm, n);
  fill<<<256, 256, 0, s>>>(act, n, 1.0f + rank);
  fill<<<256, 256, 0, s>>>(dp.grads(), n, 0.5f * rank);
  NCCLCHECK(ncclAllReduce(act, act, n, ncclFloat, ncclMax, comm, s));
  NCCLCHECK(ncclAllGather(logits + rank * (n / 4 / world), logits, n / 4 / world, ncclFloat, comm, s));
  dp.sync(s);
  cudaStreamSynchronize(s);
  float h[2];
  cudaMemcpy(&h[0], act, sizeof(float), cudaMemcpyDeviceToHost);
  cudaMemcpy(&h[1], dp.grads(), sizeof(float), cudaMemcpyDeviceToHost);
  std::printf("rank %d %f %f\n", rank, h[0], h[1]);
  cudaFree(act);
  cudaFree(logits);
  ncclCommDestroy(comm);
  MPI_Finalize();
  return 0;
}
