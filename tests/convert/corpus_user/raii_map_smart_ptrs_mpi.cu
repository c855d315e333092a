// A C++ trainer's gradient sync, written the way ML engineers write C++: parameters and their
// gradients are RAII tensors kept in a `std::map<std::string, Tensor>` (filled with
// `emplace(name, Tensor(n))` and `grads[name] = Tensor(n)`, moved, never copied), scratch memory is
// a `std::unique_ptr` with a deleter struct made by a helper, the loss a `std::shared_ptr` given its
// pointer later with a lambda deleter. Raw pointers go to a helper (`allreduce_mean(buf.get(), ..)`)
// and offsets into them to NCCL (`scratch.get() + offset`). MPI bootstrap.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>
#include <mpi.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define CUDA_CALL(x)                                                                          \
  do {                                                                                        \
    cudaError_t e = (x);                                                                      \
    if (e != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "CUDA %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__);  \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)
#define NCCL_CALL(x)                                                                          \
  do {                                                                                        \
    ncclResult_t r = (x);                                                                     \
    if (r != ncclSuccess) {                                                                   \
      std::fprintf(stderr, "NCCL %s at %s:%d\n", ncclGetErrorString(r), __FILE__, __LINE__);  \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(size_t numel) : numel_(numel) {
    CUDA_CALL(cudaMalloc(&data_, numel * sizeof(float)));
    CUDA_CALL(cudaMemset(data_, 0, numel * sizeof(float)));
  }
  Tensor(Tensor&& other) noexcept : data_(std::exchange(other.data_, nullptr)), numel_(other.numel_) {}
  Tensor& operator=(Tensor&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(numel_, other.numel_);
    return *this;
  }
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  ~Tensor() {
    if (data_ != nullptr) cudaFree(data_);
  }
  float* data() const { return data_; }
  size_t numel() const { return numel_; }

 private:
  float* data_ = nullptr;
  size_t numel_ = 0;
};

struct CudaDeleter {
  void operator()(void* p) const { cudaFree(p); }
};
template <typename T>
using DevicePtr = std::unique_ptr<T, CudaDeleter>;

template <typename T>
DevicePtr<T> make_device(size_t n) {
  T* raw = nullptr;
  CUDA_CALL(cudaMalloc(&raw, n * sizeof(T)));
  return DevicePtr<T>(raw);
}

static void allreduce_mean(float* buf, size_t n, ncclComm_t comm, cudaStream_t stream) {
  NCCL_CALL(ncclAllReduce(buf, buf, n, ncclFloat, ncclAvg, comm, stream));
}

__global__ void fake_backward(float* g, size_t n, int rank, int step) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    g[i] = 0.01f * (float)((i + 31 * rank + step) % 257);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1, devices = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  CUDA_CALL(cudaGetDeviceCount(&devices));
  CUDA_CALL(cudaSetDevice(rank % devices));
  ncclUniqueId id;
  if (rank == 0) NCCL_CALL(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  NCCL_CALL(ncclCommInitRank(&comm, world, id, rank));
  cudaStream_t stream;
  CUDA_CALL(cudaStreamCreate(&stream));

  const int steps = argc > 1 ? std::atoi(argv[1]) : 2;
  {
    std::map<std::string, Tensor> grads;
    grads.emplace("embedding", Tensor(50304 * 64));
    grads.emplace("block0.attn", Tensor(3 * 768 * 768));
    grads["block0.mlp"] = Tensor(4 * 768 * 768 + 5);
    auto scratch = make_device<float>(4096);
    DevicePtr<float> gathered = make_device<float>(1024 * (size_t)world);
    std::shared_ptr<float> loss;
    {
      float* raw = nullptr;
      CUDA_CALL(cudaMalloc(&raw, 64 * sizeof(float)));
      CUDA_CALL(cudaMemset(raw, 0, 64 * sizeof(float)));
      loss = std::shared_ptr<float>(raw, [](float* p) { cudaFree(p); });
    }
    for (int step = 0; step < steps; ++step) {
      for (auto& [name, g] : grads) {
        fake_backward<<<128, 256, 0, stream>>>(g.data(), g.numel(), rank, step);
        allreduce_mean(g.data(), g.numel(), comm, stream);
      }
      fake_backward<<<16, 256, 0, stream>>>(scratch.get(), 4096, rank, step);
      allreduce_mean(loss.get(), 64, comm, stream);
      NCCL_CALL(ncclAllGather(scratch.get() + 1024, gathered.get(), 1024, ncclFloat, comm, stream));
    }
    CUDA_CALL(cudaStreamSynchronize(stream));
    float first = 0.f;
    CUDA_CALL(cudaMemcpy(&first, grads.at("block0.mlp").data(), sizeof(float), cudaMemcpyDeviceToHost));
    std::printf("rank %d: %zu tensors, block0.mlp[0] = %f\n", rank, grads.size(), first);
  }
  NCCL_CALL(ncclCommDestroy(comm));
  MPI_Finalize();
  return 0;
}
