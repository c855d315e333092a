// Data-parallel step whose device memory comes from one workspace arena, as inference and training
// codes carve it: a `Workspace` class allocates one block and hands out aligned views with a member
// template (`ws.take<__half>(n)`); the per-layer gradient pointers live in a `std::array` filled
// through a range-for reference, are averaged with `std::for_each` and a lambda (fp16, ncclAvg), and
// the loss scale's overflow flag is reduced with ncclMax. MPI bootstrap.
#include <mpi.h>
#include <nccl.h>
#include <cuda_fp16.h>
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>

#define CUDA_TRY(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { std::fprintf(stderr, "%s\n", cudaGetErrorString(e_)); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)
#define NCCL_TRY(x) do { ncclResult_t r_ = (x); if (r_ != ncclSuccess) { std::fprintf(stderr, "%s\n", ncclGetErrorString(r_)); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)

class Workspace {
 public:
  void reserve(size_t bytes) {
    CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&base_), bytes));
    capacity_ = bytes;
  }
  template <typename T>
  T* take(size_t count) {
    T* view = reinterpret_cast<T*>(base_ + used_);
    used_ += (count * sizeof(T) + 255) & ~size_t(255);
    return view;
  }
  void release() { CUDA_TRY(cudaFree(base_)); }

 private:
  uint8_t* base_ = nullptr;
  size_t used_ = 0, capacity_ = 0;
};

constexpr int kLayers = 4;
constexpr size_t kGradElems = 1 << 18;

__global__ void backward_stub(__half* g, size_t n, float scale) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) g[i] = __float2half(scale * (float)(i % 17) / 17.f);
}

__global__ void check_overflow(const __half* g, size_t n, float* flag) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n && !isfinite(__half2float(g[i]))) *flag = 1.f;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int devices = 0;
  CUDA_TRY(cudaGetDeviceCount(&devices));
  CUDA_TRY(cudaSetDevice(rank % devices));
  ncclUniqueId id;
  if (rank == 0) NCCL_TRY(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  NCCL_TRY(ncclCommInitRank(&comm, world, id, rank));
  cudaStream_t stream;
  CUDA_TRY(cudaStreamCreate(&stream));

  Workspace ws;
  ws.reserve(size_t(kLayers) * kGradElems * sizeof(__half) + (1 << 20));
  std::array<__half*, kLayers> grads{};
  for (auto& g : grads) g = ws.take<__half>(kGradElems);
  float* overflow = ws.take<float>(1);

  for (int step = 0; step < 2; ++step) {
    for (int l = 0; l < kLayers; ++l)
      backward_stub<<<(kGradElems + 255) / 256, 256, 0, stream>>>(grads[l], kGradElems, 1.f + rank + l + step);
    std::for_each(grads.begin(), grads.end(), [&](__half* g) {
      NCCL_TRY(ncclAllReduce(g, g, kGradElems, ncclHalf, ncclAvg, comm, stream));
    });
    CUDA_TRY(cudaMemsetAsync(overflow, 0, sizeof(float), stream));
    for (__half* g : grads) check_overflow<<<(kGradElems + 255) / 256, 256, 0, stream>>>(g, kGradElems, overflow);
    NCCL_TRY(ncclAllReduce(overflow, overflow, 1, ncclFloat, ncclMax, comm, stream));
    CUDA_TRY(cudaStreamSynchronize(stream));
  }
  __half first;
  float flag = 0;
  CUDA_TRY(cudaMemcpy(&first, grads[kLayers - 1] + 5, sizeof(__half), cudaMemcpyDeviceToHost));
  CUDA_TRY(cudaMemcpy(&flag, overflow, sizeof(float), cudaMemcpyDeviceToHost));
  std::printf("rank %d grad %.4f overflow %.0f\n", rank, __half2float(first), flag);
  ws.release();
  CUDA_TRY(cudaStreamDestroy(stream));
  ncclCommDestroy(comm);
  MPI_Finalize();
  return 0;
}
