// Data-parallel step with the small wrappers a C++ trainer grows, MPI bootstrap, fp16 gradients:
// an RAII `DeviceArray<T>` that converts to its pointer (`operator T*()`), so it is handed straight
// to NCCL and to kernels; a `Tensor` struct made by a factory (`Tensor a = make_tensor(..), b =
// make_tensor(..);`); gradient hooks kept as `std::function`s that wrap a lambda capturing the
// communicator and stream, called per layer as backward produces each gradient. Every rank prints
// checksums of its averaged gradients, its loss statistics and its parameters.
#include <mpi.h>
#include <nccl.h>
#include <cuda_fp16.h>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#define CK(x)                                                                     \
  do {                                                                            \
    cudaError_t e = (x);                                                          \
    if (e != cudaSuccess) {                                                       \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)
#define NK(x)                                                                     \
  do {                                                                            \
    ncclResult_t r = (x);                                                         \
    if (r != ncclSuccess) {                                                       \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, ncclGetErrorString(r)); \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) { CK(cudaMalloc(&ptr_, n * sizeof(T))); }
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  operator T*() const { return ptr_; }
  size_t size() const { return n_; }

 private:
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

struct Tensor {
  void* data = nullptr;
  size_t numel = 0;
  ncclDataType_t dtype = ncclFloat32;
};

static size_t element_bytes(ncclDataType_t t) { return t == ncclFloat16 ? 2 : 4; }

static Tensor make_tensor(size_t numel, ncclDataType_t dtype) {
  Tensor t;
  t.numel = numel;
  t.dtype = dtype;
  CK(cudaMalloc(&t.data, numel * element_bytes(dtype)));
  return t;
}

__global__ void backward_layer(__half* grad, size_t n, int layer, int rank) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    grad[i] = __float2half(0.001f * (float)((i * 31 + layer * 7 + rank * 3) % 997) - 0.4f);
}

__global__ void loss_terms(float* stats, float* scale, int rank) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < 256) stats[i] = 0.25f * (float)((i * 13 + rank) % 29);
  if (i < 8) scale[i] = 1.0f + 0.5f * (float)(rank + i);
}

__global__ void sgd_update(float* param, const __half* grad, size_t n, float lr) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    param[i] -= lr * __half2float(grad[i]);
}

template <typename T>
static double checksum(const T* dev, size_t n) {
  std::vector<T> host(n);
  CK(cudaMemcpy(host.data(), dev, n * sizeof(T), cudaMemcpyDeviceToHost));
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += (double)(float)host[i] * (double)((i % 7) + 1);
  return s;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int ngpu = 1;
  CK(cudaGetDeviceCount(&ngpu));
  CK(cudaSetDevice(rank % ngpu));
  ncclUniqueId uid;
  if (rank == 0) NK(ncclGetUniqueId(&uid));
  MPI_Bcast(&uid, sizeof(uid), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  NK(ncclCommInitRank(&comm, world, uid, rank));
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  const int layers = 3;
  const size_t per_layer = 300000;
  DeviceArray<__half> grads(layers * per_layer);
  DeviceArray<float> params(layers * per_layer);
  CK(cudaMemset(params, 0, params.size() * sizeof(float)));
  Tensor stats = make_tensor(256, ncclFloat32), scale = make_tensor(8, ncclFloat32);

  // The hook a layer calls when its gradient is ready: average it over the data-parallel ranks.
  auto allreduce_grad = [&](__half* g, size_t n) {
    NK(ncclAllReduce(g, g, n, ncclFloat16, ncclAvg, comm, stream));
  };
  std::vector<std::function<void(__half*, size_t)>> hooks;
  std::function<void(__half*, size_t)> hook = allreduce_grad;
  for (int l = 0; l < layers; ++l) hooks.push_back(hook);

  for (int step = 0; step < 2; ++step) {
    for (int l = layers - 1; l >= 0; --l) {
      __half* g = grads + (size_t)l * per_layer;
      backward_layer<<<128, 256, 0, stream>>>(g, per_layer, l + step, rank);
      hooks[l](g, per_layer);
    }
    sgd_update<<<256, 256, 0, stream>>>(params, grads, params.size(), 0.1f);
  }
  loss_terms<<<1, 256, 0, stream>>>(static_cast<float*>(stats.data), static_cast<float*>(scale.data), rank);
  NK(ncclAllReduce(stats.data, stats.data, stats.numel, stats.dtype, ncclSum, comm, stream));
  NK(ncclAllReduce(scale.data, scale.data, scale.numel, scale.dtype, ncclMax, comm, stream));
  CK(cudaStreamSynchronize(stream));

  std::printf("rank %d: grads %.6e params %.6e stats %.6e scale %.6e (%zu hooks)\n", rank,
              checksum<__half>(grads, grads.size()), checksum<float>(params, params.size()),
              checksum(static_cast<float*>(stats.data), stats.numel), checksum(static_cast<float*>(scale.data), scale.numel),
              hooks.size());

  CK(cudaFree(stats.data));
  CK(cudaFree(scale.data));
  NK(ncclCommDestroy(comm));
  MPI_Finalize();
  return 0;
}
