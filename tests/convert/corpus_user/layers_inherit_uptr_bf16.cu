// A layered model as a small C++ training framework writes it, MPI bootstrap, bf16 gradients: a
// `Layer` base class owns the gradient pointer and its size, each derived layer (`Linear`, `Norm`)
// allocates it in its constructor with its own shape; the model keeps them in a
// std::vector<std::unique_ptr<Layer>> built with std::make_unique, and the data-parallel step
// all-reduces each layer's gradient through the base class's virtual accessor. Optimizer moments
// live in a std::unordered_map keyed by layer name and are broadcast from rank 0 at start-up.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>
#include <mpi.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define CHECK_CUDA(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)
#define CHECK_NCCL(x) do { ncclResult_t r_ = (x); if (r_ != ncclSuccess) { std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, ncclGetErrorString(r_)); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)

__global__ void init_grad(__nv_bfloat16* g, size_t n, float v) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    g[i] = __float2bfloat16(v + (float)(i % 13) * 0.125f);
}

class Layer {
 public:
  explicit Layer(std::string name) : name_(std::move(name)) {}
  virtual ~Layer() { cudaFree(grad_); }
  virtual __nv_bfloat16* grad() { return grad_; }
  size_t numel() const { return numel_; }
  const std::string& name() const { return name_; }

 protected:
  __nv_bfloat16* grad_ = nullptr;
  size_t numel_ = 0;
  std::string name_;
};

class Linear : public Layer {
 public:
  Linear(std::string name, size_t in, size_t out) : Layer(std::move(name)) {
    numel_ = in * out;
    CHECK_CUDA(cudaMalloc(&grad_, numel_ * sizeof(__nv_bfloat16)));
  }
};

class Norm : public Layer {
 public:
  Norm(std::string name, size_t dim) : Layer(std::move(name)) {
    numel_ = dim;
    CHECK_CUDA(cudaMalloc(&grad_, numel_ * sizeof(__nv_bfloat16)));
  }
};

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1, ndev = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  CHECK_CUDA(cudaGetDeviceCount(&ndev));
  CHECK_CUDA(cudaSetDevice(rank % ndev));
  ncclUniqueId id;
  if (rank == 0) CHECK_NCCL(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  CHECK_NCCL(ncclCommInitRank(&comm, world, id, rank));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  const size_t hidden = argc > 1 ? (size_t)std::atol(argv[1]) : 512;
  std::vector<std::unique_ptr<Layer>> layers;
  for (int l = 0; l < 2; ++l) {
    layers.push_back(std::make_unique<Linear>("fc" + std::to_string(l), hidden, 4 * hidden));
    layers.push_back(std::make_unique<Norm>("norm" + std::to_string(l), hidden));
  }
  std::unordered_map<std::string, float*> moments;
  for (const auto& layer : layers) {
    float* m = nullptr;
    CHECK_CUDA(cudaMalloc(&m, layer->numel() * sizeof(float)));
    CHECK_CUDA(cudaMemset(m, rank == 0 ? 0 : 0xff, layer->numel() * sizeof(float)));
    moments[layer->name()] = m;
  }
  for (auto& [name, m] : moments)
    CHECK_NCCL(ncclBroadcast(m, m, hidden, ncclFloat, 0, comm, stream));

  for (int step = 0; step < 4; ++step) {
    for (auto& layer : layers) {
      init_grad<<<64, 256, 0, stream>>>(layer->grad(), layer->numel(), 0.25f * (float)(rank + 1 + step));
      CHECK_NCCL(ncclAllReduce(layer->grad(), layer->grad(), layer->numel(), ncclBfloat16, ncclSum, comm, stream));
    }
  }
  CHECK_CUDA(cudaStreamSynchronize(stream));
  __nv_bfloat16 first;
  CHECK_CUDA(cudaMemcpy(&first, layers[0]->grad(), sizeof(first), cudaMemcpyDeviceToHost));
  std::printf("rank %d: fc0 grad[0] = %f\n", rank, __bfloat162float(first));
  for (auto& [name, m] : moments) CHECK_CUDA(cudaFree(m));
  layers.clear();
  CHECK_NCCL(ncclCommDestroy(comm));
  CHECK_CUDA(cudaStreamDestroy(stream));
  MPI_Finalize();
  return 0;
}
