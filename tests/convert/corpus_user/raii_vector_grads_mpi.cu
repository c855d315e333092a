// Data-parallel gradient sync the way a C++ training loop keeps its tensors: an RAII DeviceBuffer<T>
// (cudaMalloc in the constructor, cudaFree in the destructor, a move constructor so std::vector can
// hold it), one gradient buffer per layer in a std::vector filled by emplace_back, an fp32 sum per
// layer, and one bf16 buffer of activation statistics. MPI bootstrap, a GPU per local rank.
// Inputs are made on the device from the rank; rank 0 checks every layer's sum against the closed form.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CUDA_CHECK(x)                                                                       \
  do {                                                                                      \
    cudaError_t e_ = (x);                                                                   \
    if (e_ != cudaSuccess) {                                                                \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));    \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                         \
    }                                                                                       \
  } while (0)
#define NCCL_CHECK(x)                                                                       \
  do {                                                                                      \
    ncclResult_t r_ = (x);                                                                  \
    if (r_ != ncclSuccess) {                                                                \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, ncclGetErrorString(r_));    \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                         \
    }                                                                                       \
  } while (0)

template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) { CUDA_CHECK(cudaMalloc(&ptr_, n * sizeof(T))); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), n_(o.n_) {
    o.ptr_ = nullptr;
    o.n_ = 0;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  T* data() { return ptr_; }
  size_t size() const { return n_; }

 private:
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

__global__ void fill_grads(float* g, size_t n, int layer, int rank) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    g[i] = (float)(rank + 1) * 0.5f + (float)((i + layer) % 7);
}

__global__ void fill_stats(__nv_bfloat16* s, size_t n, int rank) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    s[i] = __float2bfloat16((float)(rank + 1) + (float)(i % 4));
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
  int local_rank = 0;
  MPI_Comm_rank(local, &local_rank);
  CUDA_CHECK(cudaSetDevice(local_rank));

  ncclUniqueId id;
  if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  NCCL_CHECK(ncclCommInitRank(&comm, world, id, rank));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));

  // Layer shapes of a small MLP: the same on every rank.
  const std::vector<size_t> layer_sizes = {4096 * 1024, 1024 * 1024, 1024 * 256, 256};
  const size_t n_stats = 8192;
  int failures = 0;
  {
    std::vector<DeviceBuffer<float>> grads;
    grads.reserve(layer_sizes.size());
    for (size_t l = 0; l < layer_sizes.size(); ++l) grads.emplace_back(layer_sizes[l]);
    DeviceBuffer<__nv_bfloat16> stats(n_stats);

    for (int step = 0; step < 3; ++step) {
      for (size_t l = 0; l < grads.size(); ++l)
        fill_grads<<<256, 256, 0, stream>>>(grads[l].data(), grads[l].size(), (int)l, rank);
      fill_stats<<<32, 256, 0, stream>>>(stats.data(), stats.size(), rank);
      for (auto& g : grads) NCCL_CHECK(ncclAllReduce(g.data(), g.data(), g.size(), ncclFloat, ncclSum, comm, stream));
      NCCL_CHECK(ncclAllReduce(stats.data(), stats.data(), stats.size(), ncclBfloat16, ncclSum, comm, stream));
    }
    CUDA_CHECK(cudaStreamSynchronize(stream));

    // Every element of layer l is sum over ranks r of (r + 1) * 0.5 + (i + l) % 7.
    const float rank_part = 0.25f * (float)world * (float)(world + 1);
    for (size_t l = 0; l < grads.size(); ++l) {
      std::vector<float> host(grads[l].size());
      CUDA_CHECK(cudaMemcpy(host.data(), grads[l].data(), host.size() * sizeof(float), cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < host.size(); ++i) {
        const float want = rank_part + (float)world * (float)((i + l) % 7);
        if (std::fabs(host[i] - want) > 1e-3f * want) ++failures;
      }
      if (rank == 0) printf("layer %zu: %zu floats, g[1] = %.3f\n", l, host.size(), host.size() > 1 ? host[1] : 0.f);
    }
    std::vector<__nv_bfloat16> host_stats(n_stats);
    CUDA_CHECK(cudaMemcpy(host_stats.data(), stats.data(), n_stats * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n_stats; ++i) {
      const float want = 0.5f * (float)world * (float)(world + 1) + (float)world * (float)(i % 4);
      if (std::fabs(__bfloat162float(host_stats[i]) - want) > 0.02f * want) ++failures;
    }
    if (rank == 0) printf("stats[0] = %.2f\n", __bfloat162float(host_stats[0]));
  }
  int all_failures = 0;
  MPI_Allreduce(&failures, &all_failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("%s (%d mismatches)\n", all_failures == 0 ? "OK" : "FAILED", all_failures);

  CUDA_CHECK(cudaStreamDestroy(stream));
  ncclCommDestroy(comm);
  MPI_Comm_free(&local);
  MPI_Finalize();
  return all_failures == 0 ? 0 : 1;
}
