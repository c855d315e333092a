// nccl-tests' shape, one thread driving every local GPU: one unique id, the communicators created
// together in one group (`-g N`), per-GPU state in an array of structs, fp16 gradients summed and a
// ring of halo exchanges (send to the next GPU, receive from the previous) in helpers, each issued
// for every GPU inside one group. Checks the result on the host and prints one line per GPU.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CUDA_OK(x)                                                                          \
  do {                                                                                      \
    cudaError_t e_ = (x);                                                                   \
    if (e_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s:%d cuda: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)
#define NCCL_OK(x)                                                                          \
  do {                                                                                      \
    ncclResult_t r_ = (x);                                                                  \
    if (r_ != ncclSuccess) {                                                                \
      std::fprintf(stderr, "%s:%d nccl: %s\n", __FILE__, __LINE__, ncclGetErrorString(r_)); \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

struct Gpu {
  int dev = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  __half* grads = nullptr;    // summed over the GPUs
  float* halo_out = nullptr;  // this GPU's edge, sent to the next
  float* halo_in = nullptr;   // the previous GPU's edge
};

__global__ void fill_grads(__half* g, size_t n, int rank) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    g[i] = __float2half((float)((i + rank) % 7) * 0.25f);
}

__global__ void fill_halo(float* h, size_t n, int rank) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    h[i] = (float)(rank * 1000) + (float)(i % 97);
}

static void sum_gradients(std::vector<Gpu>& gpus, size_t n) {
  NCCL_OK(ncclGroupStart());
  for (Gpu& g : gpus) NCCL_OK(ncclAllReduce(g.grads, g.grads, n, ncclFloat16, ncclSum, g.comm, g.stream));
  NCCL_OK(ncclGroupEnd());
}

static void exchange_halos(std::vector<Gpu>& gpus, size_t n) {
  const int world = (int)gpus.size();
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < world; ++r) {
    NCCL_OK(ncclSend(gpus[r].halo_out, n, ncclFloat32, (r + 1) % world, gpus[r].comm, gpus[r].stream));
    NCCL_OK(ncclRecv(gpus[r].halo_in, n, ncclFloat32, (r + world - 1) % world, gpus[r].comm, gpus[r].stream));
  }
  NCCL_OK(ncclGroupEnd());
}

int main(int argc, char** argv) {
  int ndev = 0;
  CUDA_OK(cudaGetDeviceCount(&ndev));
  if (argc > 1) ndev = std::min(ndev, std::atoi(argv[1]));
  if (ndev < 1) return 1;
  const size_t n_grads = (size_t)3 << 20, n_halo = (size_t)1 << 16;

  std::vector<Gpu> gpus(ndev);
  ncclUniqueId id;
  NCCL_OK(ncclGetUniqueId(&id));
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < ndev; ++r) {
    gpus[r].dev = r;
    CUDA_OK(cudaSetDevice(r));
    NCCL_OK(ncclCommInitRank(&gpus[r].comm, ndev, id, r));
  }
  NCCL_OK(ncclGroupEnd());

  for (int r = 0; r < ndev; ++r) {
    Gpu& g = gpus[r];
    CUDA_OK(cudaSetDevice(g.dev));
    CUDA_OK(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking));
    CUDA_OK(cudaMalloc(&g.grads, n_grads * sizeof(__half)));
    CUDA_OK(cudaMalloc(&g.halo_out, n_halo * sizeof(float)));
    CUDA_OK(cudaMalloc(&g.halo_in, n_halo * sizeof(float)));
    fill_grads<<<256, 256, 0, g.stream>>>(g.grads, n_grads, r);
    fill_halo<<<64, 256, 0, g.stream>>>(g.halo_out, n_halo, r);
    CUDA_OK(cudaMemsetAsync(g.halo_in, 0, n_halo * sizeof(float), g.stream));
  }

  for (int step = 0; step < 3; ++step) {
    sum_gradients(gpus, n_grads);
    exchange_halos(gpus, n_halo);
  }

  int bad = 0;
  for (int r = 0; r < ndev; ++r) {
    Gpu& g = gpus[r];
    CUDA_OK(cudaSetDevice(g.dev));
    CUDA_OK(cudaStreamSynchronize(g.stream));
    std::vector<float> halo(n_halo);
    CUDA_OK(cudaMemcpy(halo.data(), g.halo_in, n_halo * sizeof(float), cudaMemcpyDeviceToHost));
    const int prev = (r + ndev - 1) % ndev;
    bool ok = true;
    for (size_t i = 0; i < n_halo && ok; ++i) ok = halo[i] == (float)(prev * 1000) + (float)(i % 97);
    __half first;
    CUDA_OK(cudaMemcpy(&first, g.grads, sizeof(first), cudaMemcpyDeviceToHost));
    std::printf("gpu %d: halo from %d %s, grads[0] %.3f\n", r, prev, ok ? "ok" : "WRONG", __half2float(first));
    bad += ok ? 0 : 1;
  }
  for (Gpu& g : gpus) {
    CUDA_OK(cudaSetDevice(g.dev));
    CUDA_OK(cudaFree(g.grads));
    CUDA_OK(cudaFree(g.halo_out));
    CUDA_OK(cudaFree(g.halo_in));
    CUDA_OK(cudaStreamDestroy(g.stream));
    NCCL_OK(ncclCommDestroy(g.comm));
  }
  return bad == 0 ? 0 : 2;
}
