// A tiny data-parallel trainer written the way framework code is: an abstract ProcessGroup with a
// NcclProcessGroup behind it (virtual allreduce/allgather/broadcast taking a Tensor), a Tensor that
// owns its device buffer and knows its shape and dtype, dtype traits mapping T to ncclDataType_t with
// if constexpr, layers in a std::vector<std::unique_ptr<Layer>> whose virtual backward fills the
// gradient, and an MPI bootstrap. Weights are broadcast from rank 0 at start-up, gradients averaged
// every step, and the per-rank loss gathered for logging.
#include <mpi.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#define CUDA_TRY(expr)                                                                           \
  do {                                                                                           \
    cudaError_t err__ = (expr);                                                                  \
    if (err__ != cudaSuccess)                                                                    \
      throw std::runtime_error(std::string(#expr) + ": " + cudaGetErrorString(err__));         \
  } while (0)
#define NCCL_TRY(expr)                                                                           \
  do {                                                                                           \
    ncclResult_t res__ = (expr);                                                                 \
    if (res__ != ncclSuccess)                                                                    \
      throw std::runtime_error(std::string(#expr) + ": " + ncclGetErrorString(res__));         \
  } while (0)

namespace tinyfw {

enum class DType { kFloat32, kFloat16, kBFloat16 };

template <typename T>
struct DTypeTraits;
template <>
struct DTypeTraits<float> {
  static constexpr DType kDType = DType::kFloat32;
  static constexpr ncclDataType_t kNccl = ncclFloat32;
};
template <>
struct DTypeTraits<half> {
  static constexpr DType kDType = DType::kFloat16;
  static constexpr ncclDataType_t kNccl = ncclFloat16;
};
template <>
struct DTypeTraits<__nv_bfloat16> {
  static constexpr DType kDType = DType::kBFloat16;
  static constexpr ncclDataType_t kNccl = ncclBfloat16;
};

inline size_t element_size(DType t) { return t == DType::kFloat32 ? 4 : 2; }

inline ncclDataType_t to_nccl(DType t) {
  switch (t) {
    case DType::kFloat32: return ncclFloat32;
    case DType::kFloat16: return ncclFloat16;
    case DType::kBFloat16: return ncclBfloat16;
  }
  return ncclFloat32;
}

// Owns one device allocation. Move-only, like the real thing.
class Tensor {
 public:
  Tensor() = default;
  Tensor(std::vector<int64_t> shape, DType dtype) : shape_(std::move(shape)), dtype_(dtype) {
    CUDA_TRY(cudaMalloc(&data_, nbytes()));
    CUDA_TRY(cudaMemset(data_, 0, nbytes()));
  }
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  ~Tensor() {
    if (data_) cudaFree(data_);
  }
  size_t numel() const {
    return std::accumulate(shape_.begin(), shape_.end(), int64_t{1}, std::multiplies<int64_t>());
  }
  size_t nbytes() const { return numel() * element_size(dtype_); }
  DType dtype() const { return dtype_; }
  void* data() const { return data_; }
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }

 private:
  std::vector<int64_t> shape_;
  DType dtype_ = DType::kFloat32;
  void* data_ = nullptr;
};

enum class ReduceOp { kSum, kAvg, kMax };

class ProcessGroup {
 public:
  ProcessGroup(int rank, int size) : rank_(rank), size_(size) {}
  virtual ~ProcessGroup() = default;
  virtual void allreduce(Tensor& t, ReduceOp op) = 0;
  virtual void allgather(Tensor& out, const Tensor& in) = 0;
  virtual void broadcast(Tensor& t, int root) = 0;
  virtual void synchronize() = 0;
  int rank() const { return rank_; }
  int size() const { return size_; }

 protected:
  int rank_, size_;
};

class NcclProcessGroup final : public ProcessGroup {
 public:
  NcclProcessGroup(ncclComm_t comm, cudaStream_t stream, int rank, int size)
      : ProcessGroup(rank, size), comm_(comm), stream_(stream) {}
  ~NcclProcessGroup() override { ncclCommDestroy(comm_); }

  void allreduce(Tensor& t, ReduceOp op) override {
    NCCL_TRY(ncclAllReduce(t.data(), t.data(), t.numel(), to_nccl(t.dtype()), nccl_op(op), comm_, stream_));
  }
  void allgather(Tensor& out, const Tensor& in) override {
    NCCL_TRY(ncclAllGather(in.data(), out.data(), in.numel(), to_nccl(in.dtype()), comm_, stream_));
  }
  void broadcast(Tensor& t, int root) override {
    NCCL_TRY(ncclBroadcast(t.data(), t.data(), t.numel(), to_nccl(t.dtype()), root, comm_, stream_));
  }
  void synchronize() override { CUDA_TRY(cudaStreamSynchronize(stream_)); }

 private:
  static ncclRedOp_t nccl_op(ReduceOp op) {
    switch (op) {
      case ReduceOp::kSum: return ncclSum;
      case ReduceOp::kAvg: return ncclAvg;
      case ReduceOp::kMax: return ncclMax;
    }
    return ncclSum;
  }
  ncclComm_t comm_;
  cudaStream_t stream_;
};

template <typename T>
__global__ void fake_backward(T* grad, size_t n, int rank, int layer) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float g = 0.001f * (float)((i * 7 + rank * 3 + layer) % 17);
    if constexpr (std::is_same_v<T, float>) grad[i] = g;
    else if constexpr (std::is_same_v<T, half>) grad[i] = __float2half(g);
    else grad[i] = __float2bfloat16(g);
  }
}

template <typename T>
__global__ void sgd_step(T* w, const T* g, size_t n, float lr) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    if constexpr (std::is_same_v<T, float>) w[i] -= lr * g[i];
    else if constexpr (std::is_same_v<T, half>) w[i] = __float2half(__half2float(w[i]) - lr * __half2float(g[i]));
    else w[i] = __float2bfloat16(__bfloat162float(w[i]) - lr * __bfloat162float(g[i]));
  }
}

class Layer {
 public:
  virtual ~Layer() = default;
  virtual void backward(cudaStream_t s, int rank) = 0;
  virtual void step(cudaStream_t s, float lr) = 0;
  virtual Tensor& weight() = 0;
  virtual Tensor& grad() = 0;
};

template <typename T>
class Linear : public Layer {
 public:
  Linear(int64_t in, int64_t out, int index)
      : w_({out, in}, DTypeTraits<T>::kDType), g_({out, in}, DTypeTraits<T>::kDType), index_(index) {}
  void backward(cudaStream_t s, int rank) override {
    fake_backward<T><<<128, 256, 0, s>>>(g_.template data_as<T>(), g_.numel(), rank, index_);
    CUDA_TRY(cudaGetLastError());
  }
  void step(cudaStream_t s, float lr) override {
    sgd_step<T><<<128, 256, 0, s>>>(w_.template data_as<T>(), g_.template data_as<T>(), w_.numel(), lr);
  }
  Tensor& weight() override { return w_; }
  Tensor& grad() override { return g_; }

 private:
  Tensor w_, g_;
  int index_;
};

std::vector<std::unique_ptr<Layer>> build_model() {
  std::vector<std::unique_ptr<Layer>> layers;
  layers.push_back(std::make_unique<Linear<__nv_bfloat16>>(1024, 4096, 0));
  layers.push_back(std::make_unique<Linear<__nv_bfloat16>>(4096, 1024, 1));
  layers.push_back(std::make_unique<Linear<half>>(1024, 1024, 2));
  layers.push_back(std::make_unique<Linear<float>>(1024, 256, 3));
  return layers;
}

}  // namespace tinyfw

namespace {

std::unique_ptr<tinyfw::ProcessGroup> init_process_group(int rank, int size, cudaStream_t stream) {
  ncclUniqueId id;
  if (rank == 0) NCCL_TRY(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  NCCL_TRY(ncclCommInitRank(&comm, size, id, rank));
  return std::make_unique<tinyfw::NcclProcessGroup>(comm, stream, rank, size);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int devices = 0;
  CUDA_TRY(cudaGetDeviceCount(&devices));
  CUDA_TRY(cudaSetDevice(rank % devices));
  cudaStream_t stream;
  CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  try {
    auto pg = init_process_group(rank, size, stream);
    auto model = tinyfw::build_model();
    for (auto& layer : model) pg->broadcast(layer->weight(), 0);

    tinyfw::Tensor loss({1}, tinyfw::DType::kFloat32);
    tinyfw::Tensor all_losses({size}, tinyfw::DType::kFloat32);
    const int steps = argc > 1 ? std::atoi(argv[1]) : 10;
    for (int step = 0; step < steps; ++step) {
      for (auto it = model.rbegin(); it != model.rend(); ++it) {
        (*it)->backward(stream, rank);
        pg->allreduce((*it)->grad(), tinyfw::ReduceOp::kAvg);
      }
      for (auto& layer : model) layer->step(stream, 0.01f);
      float host_loss = 1.0f / (1 + step + rank);
      CUDA_TRY(cudaMemcpyAsync(loss.data(), &host_loss, sizeof(float), cudaMemcpyHostToDevice, stream));
      pg->allgather(all_losses, loss);
      pg->synchronize();
      std::vector<float> h(size);
      CUDA_TRY(cudaMemcpy(h.data(), all_losses.data(), size * sizeof(float), cudaMemcpyDeviceToHost));
      if (rank == 0) std::printf("step %d loss[0] %.4f loss[last] %.4f\n", step, h[0], h[size - 1]);
    }
    model.clear();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  CUDA_TRY(cudaStreamDestroy(stream));
  MPI_Finalize();
  return 0;
}
