// A parameter registry by name (std::unordered_map<std::string, Tensor>), device memory owned by
// std::unique_ptr with a cudaFree deleter made by a returning helper, tensors moved into the map
// (emplace with std::move), gradients averaged per registered name inside one group each step;
// MPI bootstrap.
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <cstdio>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

struct CudaFree { void operator()(float* p) const { cudaFree(p); } };
using DevPtr = std::unique_ptr<float, CudaFree>;

static DevPtr device_alloc(size_t n) {
  float* p = nullptr;
  cudaMalloc(&p, n * sizeof(float));
  return DevPtr(p);
}

__global__ void fill(float* g, size_t n, int rank, int salt) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    g[i] = (float)((i * 7 + rank * 3 + salt) % 11) * 0.5f;
}

struct Tensor {
  DevPtr data;
  DevPtr grad;
  size_t numel = 0;
};

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, world;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  cudaSetDevice(rank % 8);
  ncclUniqueId id;
  if (rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  ncclCommInitRank(&comm, world, id, rank);
  cudaStream_t s;
  cudaStreamCreate(&s);
  std::unordered_map<std::string, Tensor> params;
  for (const char* name : {"wq", "wk", "wv", "wo"}) {
    Tensor t;
    t.numel = 1 << 20;
    t.data = device_alloc(t.numel);
    t.grad = device_alloc(t.numel);
    fill<<<128, 256, 0, s>>>(t.grad.get(), t.numel, rank, (int)params.size());
    params.emplace(name, std::move(t));
  }
  for (int step = 0; step < 3; ++step) {
    ncclGroupStart();
    for (auto& [name, t] : params)
      ncclAllReduce(t.grad.get(), t.grad.get(), t.numel, ncclFloat, ncclAvg, comm, s);
    ncclGroupEnd();
  }
  cudaStreamSynchronize(s);
  float first = 0.0f;
  cudaMemcpy(&first, params.at("wq").grad.get(), sizeof(float), cudaMemcpyDeviceToHost);
  std::printf("rank %d: wq.grad[0] = %.3f\n", rank, first);
  params.clear();
  ncclCommDestroy(comm);
  MPI_Finalize();
  return 0;
}
