// Data-parallel fp16 step of a small C++ trainer, MPI bootstrap. Its device memory lives in
// classes, as such code keeps it: a DeviceBuffer initialised from an allocation helper in its
// member-initialiser list, a Model whose constructor allocates one gradient per layer into a member
// vector, a gradient bucket owning a type-erased unique_ptr read back through a cast, and a KV
// cache keeping one shared_ptr per layer.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#define CUDA_CHECK(x)                                                                        \
  do {                                                                                       \
    cudaError_t err_ = (x);                                                                  \
    if (err_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(err_));      \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                          \
    }                                                                                        \
  } while (0)
#define NCCL_CHECK(x)                                                                        \
  do {                                                                                       \
    ncclResult_t res_ = (x);                                                                 \
    if (res_ != ncclSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, ncclGetErrorString(res_));      \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                          \
    }                                                                                        \
  } while (0)

template <typename T>
T* device_alloc(size_t n) {
  T* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, n * sizeof(T)));
  return p;
}

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : ptr_(device_alloc<__half>(n)), n_(n) {}
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  __half* data() const { return ptr_; }
  size_t size() const { return n_; }

 private:
  __half* ptr_;
  size_t n_;
};

struct ModelConfig {
  int layers = 3;
  size_t hidden = 4096;
};

class Model {
 public:
  explicit Model(const ModelConfig& cfg) : cfg_(cfg) {
    for (int l = 0; l < cfg_.layers; ++l) {
      __half* g = nullptr;
      CUDA_CHECK(cudaMalloc(&g, cfg_.hidden * sizeof(__half)));
      grads_.push_back(g);
    }
  }
  ~Model() {
    for (__half* g : grads_) cudaFree(g);
  }
  std::vector<__half*>& grads() { return grads_; }
  size_t layer_numel() const { return cfg_.hidden; }

 private:
  ModelConfig cfg_;
  std::vector<__half*> grads_;
};

struct CudaDeleter {
  void operator()(void* p) const { cudaFree(p); }
};
using DevicePtr = std::unique_ptr<void, CudaDeleter>;

DevicePtr owned_alloc(size_t bytes) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, bytes));
  return DevicePtr(p);
}

struct Bucket {
  DevicePtr flat;
  size_t numel = 0;
  __half* data() { return static_cast<__half*>(flat.get()); }
};

class KvLayers {
 public:
  KvLayers(int layers, size_t n) : n_(n) {
    for (int l = 0; l < layers; ++l) {
      __half* p = nullptr;
      CUDA_CHECK(cudaMalloc(&p, n * sizeof(__half)));
      layers_.emplace_back(p, [](__half* q) { cudaFree(q); });
    }
  }
  __half* layer(int l) { return layers_[l].get(); }
  size_t numel() const { return n_; }

 private:
  size_t n_;
  std::vector<std::shared_ptr<__half>> layers_;
};

__global__ void fill(__half* x, size_t n, int rank, int salt) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    x[i] = __float2half((float)((i * 31 + (size_t)salt * 7 + (size_t)rank * 13) % 61) / 61.0f - 0.5f);
}

static void fill_async(__half* x, size_t n, int rank, int salt, cudaStream_t s) {
  fill<<<64, 256, 0, s>>>(x, n, rank, salt);
  CUDA_CHECK(cudaGetLastError());
}

static double checksum(const __half* x, size_t n) {
  std::vector<__half> h(n);
  CUDA_CHECK(cudaMemcpy(h.data(), x, n * sizeof(__half), cudaMemcpyDeviceToHost));
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += __half2float(h[i]) * (double)(1 + i % 7);
  return s;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int devices = 0;
  CUDA_CHECK(cudaGetDeviceCount(&devices));
  CUDA_CHECK(cudaSetDevice(rank % devices));
  ncclUniqueId id;
  if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  NCCL_CHECK(ncclCommInitRank(&comm, world, id, rank));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));

  const size_t shard = 8192;
  DeviceBuffer local(shard), gathered(shard * (size_t)world);
  ModelConfig cfg;
  Model model(cfg);
  Bucket bucket;
  bucket.numel = 16384;
  bucket.flat = owned_alloc(bucket.numel * sizeof(__half));
  KvLayers kv(2, 4096);

  for (int step = 0; step < 3; ++step) {
    fill_async(local.data(), local.size(), rank, step, stream);
    NCCL_CHECK(ncclAllGather(local.data(), gathered.data(), local.size(), ncclFloat16, comm, stream));
    int salt = 10 * step;
    for (__half* g : model.grads()) {
      fill_async(g, model.layer_numel(), rank, ++salt, stream);
      NCCL_CHECK(ncclAllReduce(g, g, model.layer_numel(), ncclFloat16, ncclSum, comm, stream));
    }
    fill_async(bucket.data(), bucket.numel, rank, 100 + step, stream);
    NCCL_CHECK(ncclAllReduce(bucket.data(), bucket.data(), bucket.numel, ncclFloat16, ncclAvg, comm, stream));
    for (int l = 0; l < 2; ++l) {
      if (rank == 0) fill_async(kv.layer(l), kv.numel(), rank, 200 + l + step, stream);
      NCCL_CHECK(ncclBroadcast(kv.layer(l), kv.layer(l), kv.numel(), ncclFloat16, 0, comm, stream));
    }
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  double sum = checksum(gathered.data(), gathered.size()) + checksum(bucket.data(), bucket.numel) +
               checksum(kv.layer(1), kv.numel());
  for (__half* g : model.grads()) sum += checksum(g, model.layer_numel());
  std::printf("rank %d checksum %.6f\n", rank, sum);

  NCCL_CHECK(ncclCommDestroy(comm));
  CUDA_CHECK(cudaStreamDestroy(stream));
  MPI_Finalize();
  return 0;
}
