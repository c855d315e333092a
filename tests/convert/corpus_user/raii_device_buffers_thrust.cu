// C++ utility code around NCCL the way library authors write it: an RAII device buffer template
// (cudaMalloc in the constructor, cudaFree in the destructor, data()/size() accessors), a
// std::unique_ptr with a cudaFree deleter, a std::shared_ptr given cudaFree itself as its deleter,
// and thrust::device_vector for the labels, the raw pointer taken with thrust::raw_pointer_cast.
// One data-parallel step: gradients all-reduced and averaged, the per-rank metrics gathered, the
// loss and the label histogram summed.
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <thrust/device_vector.h>
#include <thrust/fill.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace util {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
inline void check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw std::runtime_error(std::string(what) + ": " + ncclGetErrorString(r));
}

template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : size_(n) { check(cudaMalloc(&ptr_, n * sizeof(T)), "cudaMalloc"); }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(T); }

 private:
  T* ptr_ = nullptr;
  size_t size_ = 0;
};

struct CudaFree {
  void operator()(void* p) const { cudaFree(p); }
};
template <class T>
using device_ptr = std::unique_ptr<T, CudaFree>;

template <class T>
device_ptr<T> make_device(size_t n) {
  T* p = nullptr;
  check(cudaMalloc(&p, n * sizeof(T)), "cudaMalloc");
  return device_ptr<T>(p);
}

}  // namespace util

__global__ void local_grads(float* g, size_t n, int rank) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) g[i] = (float)((i + rank) % 13) * 0.25f;
}

__global__ void local_metrics(float* m, int rank, int step) {
  if (threadIdx.x == 0) m[0] = 1.0f / (float)(step + 1) + (float)rank, m[1] = (float)step;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int devices = 1;
  util::check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  util::check(cudaSetDevice(rank % devices), "cudaSetDevice");

  ncclUniqueId id;
  if (rank == 0) util::check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  util::check(ncclCommInitRank(&comm, world, id, rank), "ncclCommInitRank");
  cudaStream_t stream;
  util::check(cudaStreamCreate(&stream), "cudaStreamCreate");

  const size_t n_params = 1 << 20;
  const int n_classes = 1000;
  {
    util::DeviceBuffer<float> grads(n_params);
    util::device_ptr<float> metrics = util::make_device<float>(2);
    util::device_ptr<float> all_metrics = util::make_device<float>(2 * (size_t)world);
    thrust::device_vector<int> histogram(n_classes, rank + 1);
    float* loss_raw = nullptr;
    util::check(cudaMalloc(&loss_raw, sizeof(float)), "cudaMalloc");
    std::shared_ptr<float> loss(loss_raw, cudaFree);  // shared with the logger, freed by cudaFree
    util::check(cudaMemset(loss.get(), 0, sizeof(float)), "cudaMemset");

    for (int step = 0; step < 4; ++step) {
      local_grads<<<(unsigned)((n_params + 255) / 256), 256, 0, stream>>>(grads.data(), grads.size(), rank);
      util::check(ncclAllReduce(grads.data(), grads.data(), grads.size(), ncclFloat, ncclAvg, comm, stream), "grads");
      local_metrics<<<1, 32, 0, stream>>>(metrics.get(), rank, step);
      util::check(ncclAllGather(metrics.get(), all_metrics.get(), 2, ncclFloat, comm, stream), "metrics");
      util::check(ncclAllReduce(loss.get(), loss.get(), 1, ncclFloat, ncclSum, comm, stream), "loss");
    }
    int* hist = thrust::raw_pointer_cast(histogram.data());
    util::check(ncclAllReduce(hist, hist, n_classes, ncclInt32, ncclSum, comm, stream), "histogram");
    util::check(cudaStreamSynchronize(stream), "sync");

    std::vector<float> host(2 * (size_t)world);
    util::check(cudaMemcpy(host.data(), all_metrics.get(), host.size() * sizeof(float), cudaMemcpyDeviceToHost), "copy");
    int first_bin = histogram[0];
    if (rank == 0) printf("loss of rank %d: %f, bin 0: %d\n", world - 1, host[2 * (size_t)(world - 1)], first_bin);
  }

  util::check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  ncclCommDestroy(comm);
  MPI_Finalize();
  return 0;
}
