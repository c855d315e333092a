// Data-parallel fp16 step written with C++17 vocabulary types: an allocation helper returns a
// std::tuple of (send, recv) buffers unpacked with a structured binding, a gradient store hands
// out its buffers through operator[], and the communicator lives in a std::optional that is
// engaged after MPI bootstraps it. MPI bootstrap, one GPU per rank.
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <tuple>
#include <vector>
#include <mpi.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define CUDA_OK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { std::fprintf(stderr, "cuda %s at %d\n", cudaGetErrorString(e_), __LINE__); std::exit(1); } } while (0)
#define NCCL_OK(x) do { ncclResult_t r_ = (x); if (r_ != ncclSuccess) { std::fprintf(stderr, "nccl %s at %d\n", ncclGetErrorString(r_), __LINE__); std::exit(1); } } while (0)

__global__ void fill(__half* x, size_t n, float base) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    x[i] = __float2half(base + (float)(i % 97) * 0.01f);
}

static std::tuple<__half*, __half*> make_pair_buffers(size_t n) {
  __half* send = nullptr;
  __half* recv = nullptr;
  CUDA_OK(cudaMalloc(&send, n * sizeof(__half)));
  CUDA_OK(cudaMalloc(&recv, n * sizeof(__half)));
  return {send, recv};
}

class GradStore {
 public:
  GradStore(int layers, size_t n) : n_(n) {
    for (int l = 0; l < layers; ++l) {
      __half* p = nullptr;
      CUDA_OK(cudaMalloc(&p, n * sizeof(__half)));
      bufs_.push_back(p);
    }
  }
  ~GradStore() {
    for (__half* p : bufs_) cudaFree(p);
  }
  __half* operator[](size_t i) const { return bufs_[i]; }
  size_t size() const { return bufs_.size(); }
  size_t count() const { return n_; }

 private:
  std::vector<__half*> bufs_;
  size_t n_;
};

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1, ndev = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  CUDA_OK(cudaGetDeviceCount(&ndev));
  CUDA_OK(cudaSetDevice(rank % ndev));

  const size_t n = argc > 1 ? (size_t)std::atol(argv[1]) : (size_t)(1 << 18);
  auto [act_send, act_recv] = make_pair_buffers(n / 4);
  {
    GradStore grads(3, n);
    std::optional<ncclComm_t> comm;
    ncclUniqueId id;
    if (rank == 0) NCCL_OK(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t c;
    NCCL_OK(ncclCommInitRank(&c, world, id, rank));
    comm = c;
    cudaStream_t stream;
    CUDA_OK(cudaStreamCreate(&stream));

    for (int step = 0; step < 3; ++step) {
      fill<<<32, 256, 0, stream>>>(act_send, n / 4, (float)(rank + step));
      NCCL_OK(ncclAllGather(act_send, act_recv, n / 4 / world, ncclHalf, *comm, stream));
      for (size_t l = 0; l < grads.size(); ++l) {
        fill<<<64, 256, 0, stream>>>(grads[l], grads.count(), 0.5f * (float)(rank + 1) + (float)l);
        NCCL_OK(ncclAllReduce(grads[l], grads[l], grads.count(), ncclHalf, ncclSum, comm.value(), stream));
      }
    }
    CUDA_OK(cudaStreamSynchronize(stream));
    __half h;
    CUDA_OK(cudaMemcpy(&h, grads[0], sizeof(h), cudaMemcpyDeviceToHost));
    std::printf("rank %d: grads[0][0] = %f\n", rank, __half2float(h));
    NCCL_OK(ncclCommDestroy(*comm));
    CUDA_OK(cudaStreamDestroy(stream));
  }
  CUDA_OK(cudaFree(act_send));
  CUDA_OK(cudaFree(act_recv));
  MPI_Finalize();
  return 0;
}
