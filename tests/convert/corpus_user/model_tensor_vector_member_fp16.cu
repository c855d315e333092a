// Data-parallel step in a PyTorch-flavoured C++ style, MPI bootstrap, fp16: a move-only RAII
// `DistTensor<T>` (cudaMalloc in its constructor, cudaFree in its destructor, the dtype from a
// traits struct) whose `all_reduce` calls NCCL; a `Model` holding its gradients as a data member
// `std::vector<DistTensor<__half>>` filled by the model's constructor from a shape list, and the
// loss as a `std::unique_ptr<DistTensor<float>>`; the step all-reduces every gradient (ncclSum) and
// the loss, then prints one value of each.
#include <mpi.h>
#include <nccl.h>
#include <cuda_fp16.h>
#include <cstdio>
#include <memory>
#include <vector>

#define CUDA_OK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)
#define NCCL_OK(x) do { ncclResult_t r_ = (x); if (r_ != ncclSuccess) { std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, ncclGetErrorString(r_)); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)

template <typename T> struct NcclType;
template <> struct NcclType<__half> { static constexpr ncclDataType_t value = ncclHalf; };
template <> struct NcclType<float> { static constexpr ncclDataType_t value = ncclFloat; };

template <typename T>
class DistTensor {
 public:
  explicit DistTensor(size_t n) : numel_(n) { CUDA_OK(cudaMalloc(&data_, n * sizeof(T))); }
  ~DistTensor() {
    if (data_) cudaFree(data_);
  }
  DistTensor(DistTensor&& o) noexcept : data_(o.data_), numel_(o.numel_) { o.data_ = nullptr; }
  DistTensor(const DistTensor&) = delete;
  DistTensor& operator=(const DistTensor&) = delete;
  void all_reduce(ncclComm_t comm, cudaStream_t s) {
    NCCL_OK(ncclAllReduce(data_, data_, numel_, NcclType<T>::value, ncclSum, comm, s));
  }
  T* data() const { return data_; }
  size_t numel() const { return numel_; }

 private:
  T* data_ = nullptr;
  size_t numel_ = 0;
};

template <typename T>
__global__ void fill(T* x, size_t n, float base) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) x[i] = (T)(base + (float)(i % 9) * 0.25f);
}

struct Model {
  std::vector<DistTensor<__half>> grads;
  std::unique_ptr<DistTensor<float>> loss;
  explicit Model(const std::vector<size_t>& shapes) {
    grads.reserve(shapes.size());
    for (size_t n : shapes) grads.emplace_back(n);
    loss = std::make_unique<DistTensor<float>>(1);
  }
};

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int devices = 0;
  CUDA_OK(cudaGetDeviceCount(&devices));
  CUDA_OK(cudaSetDevice(rank % devices));
  ncclUniqueId id;
  if (rank == 0) NCCL_OK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  NCCL_OK(ncclCommInitRank(&comm, world, id, rank));
  cudaStream_t s;
  CUDA_OK(cudaStreamCreate(&s));
  {
    Model m({4096, 1 << 18, 1 << 16});
    for (auto& g : m.grads) fill<<<(g.numel() + 255) / 256, 256, 0, s>>>(g.data(), g.numel(), 0.5f * (rank + 1));
    fill<<<1, 32, 0, s>>>(m.loss->data(), 1, 2.0f + rank);
    for (auto& g : m.grads) g.all_reduce(comm, s);
    m.loss->all_reduce(comm, s);
    CUDA_OK(cudaStreamSynchronize(s));
    __half h;
    float loss = 0;
    CUDA_OK(cudaMemcpy(&h, m.grads[1].data() + 7, sizeof(h), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(&loss, m.loss->data(), sizeof(loss), cudaMemcpyDeviceToHost));
    std::printf("rank %d grad %.3f loss %.3f\n", rank, __half2float(h), loss);
  }
  CUDA_OK(cudaStreamDestroy(s));
  ncclCommDestroy(comm);
  MPI_Finalize();
  return 0;
}
