// Model set-up and a training step as a C++ inference/training codebase writes them, MPI bootstrap,
// fp16: parameters in a `std::map<std::string, __half*>` allocated in place (`cudaMalloc(&params[name],
// ..)`) and broadcast from rank 0 by iterating the map (`for (auto& [name, p] : params)` and an
// iterator's `it->second`); gradient chunks kept as `std::vector<std::pair<__half*, size_t>>`,
// each all-reduced after `auto [ptr, count] = chunks[i];`; per-layer norms in a class's
// `std::array<float*, 4>` filled by a range-for in its constructor. Every rank prints checksums.
#include <mpi.h>
#include <nccl.h>
#include <cuda_fp16.h>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#define CUDA_CALL(x)                                                                 \
  do {                                                                               \
    cudaError_t err_ = (x);                                                          \
    if (err_ != cudaSuccess) {                                                       \
      std::fprintf(stderr, "cuda: %s (%s:%d)\n", cudaGetErrorString(err_), __FILE__, __LINE__); \
      std::abort();                                                                  \
    }                                                                                \
  } while (0)
#define NCCL_CALL(x)                                                                 \
  do {                                                                               \
    ncclResult_t res_ = (x);                                                         \
    if (res_ != ncclSuccess) {                                                       \
      std::fprintf(stderr, "nccl: %s (%s:%d)\n", ncclGetErrorString(res_), __FILE__, __LINE__); \
      std::abort();                                                                  \
    }                                                                                \
  } while (0)

__global__ void init_half(__half* x, size_t n, int seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    x[i] = __float2half(0.01f * (float)((i * 17 + seed * 5) % 101) - 0.5f);
}

__global__ void norms_kernel(float* out, const __half* x, size_t n) {
  __shared__ float part[256];
  float s = 0.f;
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = __half2float(x[i]);
    s += v * v;
  }
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = 128; w > 0; w >>= 1) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = part[0];
}

class LayerNorms {
 public:
  LayerNorms() {
    for (auto& p : norms_) CUDA_CALL(cudaMalloc(&p, sizeof(float)));
  }
  ~LayerNorms() {
    for (float* p : norms_) cudaFree(p);
  }
  float* layer(int l) { return norms_[l]; }

 private:
  std::array<float*, 4> norms_{};
};

static double checksum(const __half* dev, size_t n) {
  std::vector<__half> h(n);
  CUDA_CALL(cudaMemcpy(h.data(), dev, n * sizeof(__half), cudaMemcpyDeviceToHost));
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += (double)__half2float(h[i]) * (double)(i % 5 + 1);
  return s;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, nranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  int ndev = 1;
  CUDA_CALL(cudaGetDeviceCount(&ndev));
  CUDA_CALL(cudaSetDevice(rank % ndev));
  ncclUniqueId id;
  if (rank == 0) NCCL_CALL(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  NCCL_CALL(ncclCommInitRank(&comm, nranks, id, rank));
  cudaStream_t stream;
  CUDA_CALL(cudaStreamCreate(&stream));

  const size_t kParam = 65536;
  std::map<std::string, __half*> params;
  for (const char* name : {"embed", "wq", "wk", "wv", "wo"}) CUDA_CALL(cudaMalloc(&params[name], kParam * sizeof(__half)));
  int seed = rank * 10;
  for (auto& [name, p] : params) init_half<<<64, 256, 0, stream>>>(p, kParam, seed++);
  // Rank 0's weights everywhere: one broadcast per parameter, the embedding last through an iterator.
  for (auto& [name, p] : params)
    if (name != "embed") NCCL_CALL(ncclBroadcast(p, p, kParam, ncclHalf, 0, comm, stream));
  auto it = params.find("embed");
  NCCL_CALL(ncclBroadcast(it->second, it->second, kParam, ncclHalf, 0, comm, stream));

  std::vector<std::pair<__half*, size_t>> chunks;
  for (int c = 0; c < 3; ++c) {
    __half* g = nullptr;
    const size_t count = 40000 + 8000 * (size_t)c;
    CUDA_CALL(cudaMalloc(&g, count * sizeof(__half)));
    init_half<<<64, 256, 0, stream>>>(g, count, rank + c);
    chunks.emplace_back(g, count);
  }
  for (size_t i = 0; i < chunks.size(); ++i) {
    auto [ptr, count] = chunks[i];
    NCCL_CALL(ncclAllReduce(ptr, ptr, count, ncclHalf, ncclSum, comm, stream));
  }

  LayerNorms norms;
  for (int l = 0; l < 3; ++l) {
    norms_kernel<<<1, 256, 0, stream>>>(norms.layer(l), chunks[l].first, chunks[l].second);
    NCCL_CALL(ncclAllReduce(norms.layer(l), norms.layer(l), 1, ncclFloat32, ncclMax, comm, stream));
  }
  CUDA_CALL(cudaStreamSynchronize(stream));

  double params_sum = 0, grads_sum = 0;
  for (auto& [name, p] : params) params_sum += checksum(p, kParam);
  for (auto& [g, count] : chunks) grads_sum += checksum(g, count);
  float top = 0.f;
  CUDA_CALL(cudaMemcpy(&top, norms.layer(2), sizeof(float), cudaMemcpyDeviceToHost));
  std::printf("rank %d: params %.6e grads %.6e norm %.4f\n", rank, params_sum, grads_sum, top);

  for (auto& [name, p] : params) CUDA_CALL(cudaFree(p));
  for (auto& c : chunks) CUDA_CALL(cudaFree(c.first));
  NCCL_CALL(ncclCommDestroy(comm));
  MPI_Finalize();
  return 0;
}
