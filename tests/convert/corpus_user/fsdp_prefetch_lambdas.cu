// FSDP-style step written with lambdas: each layer's parameters live as a 1/world shard; forward
// all-gathers the next layer's shard into one of two reused scratch buffers on a comm stream
// (prefetch, ordered by events), backward reduce-scatters the full gradient into the shard's
// gradient. Scratch comes from cudaMallocAsync and goes back with cudaFreeAsync; the layers are a
// std::vector walked with range-for. torchrun-style environment bootstrap, id through a file.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <chrono>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>
#include <cuda_runtime.h>
#include <nccl.h>

#define CHECK_CUDA(expr)                                                                  \
  do {                                                                                    \
    cudaError_t _e = (expr);                                                              \
    if (_e != cudaSuccess) throw std::runtime_error(std::string(#expr) + ": " + cudaGetErrorString(_e)); \
  } while (0)
#define CHECK_NCCL(expr)                                                                  \
  do {                                                                                    \
    ncclResult_t _r = (expr);                                                             \
    if (_r != ncclSuccess) throw std::runtime_error(std::string(#expr) + ": " + ncclGetErrorString(_r)); \
  } while (0)

struct Layer {
  float* shard = nullptr;       // this rank's 1/world of the weights
  float* grad_shard = nullptr;  // and of their gradient
  size_t numel = 0;             // full (padded) parameter count
};

static int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

static ncclUniqueId exchange_id(int rank) {
  const std::string path = std::getenv("NCCL_ID_FILE") ? std::getenv("NCCL_ID_FILE") : "/tmp/fsdp_nccl_id";
  ncclUniqueId id{};
  if (rank == 0) {
    CHECK_NCCL(ncclGetUniqueId(&id));
    { std::ofstream(path + ".part", std::ios::binary).write(id.internal, sizeof(id.internal)); }
    std::rename((path + ".part").c_str(), path.c_str());
    return id;
  }
  while (!(std::ifstream(path, std::ios::binary).read(id.internal, sizeof(id.internal))))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return id;
}

__global__ void layer_fwd(const float* w, float* act, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    act[i] = act[i] * 0.99f + w[i % 4096] * 0.01f;
}
__global__ void layer_bwd(const float* w, const float* act, float* grad_full, size_t numel) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < numel; i += (size_t)gridDim.x * blockDim.x)
    grad_full[i] = act[i % 4096] * w[i];
}

int main() {
  const int rank = env_int("RANK", 0), world = env_int("WORLD_SIZE", 1);
  CHECK_CUDA(cudaSetDevice(env_int("LOCAL_RANK", 0)));
  ncclUniqueId id = exchange_id(rank);
  ncclComm_t comm;
  CHECK_NCCL(ncclCommInitRank(&comm, world, id, rank));

  cudaStream_t compute, comm_stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  CHECK_CUDA(cudaStreamCreateWithFlags(&comm_stream, cudaStreamNonBlocking));

  const int num_layers = 6;
  const size_t numel = (size_t)1 << 20;  // divisible by any world size up to 8
  std::vector<Layer> layers(num_layers);
  for (auto& L : layers) {
    L.numel = numel;
    CHECK_CUDA(cudaMalloc(&L.shard, numel / world * sizeof(float)));
    CHECK_CUDA(cudaMalloc(&L.grad_shard, numel / world * sizeof(float)));
    CHECK_CUDA(cudaMemset(L.shard, 0, numel / world * sizeof(float)));
  }
  float* scratch[2];
  float* grad_full;
  float* act;
  CHECK_CUDA(cudaMallocAsync(&scratch[0], numel * sizeof(float), comm_stream));
  CHECK_CUDA(cudaMallocAsync(&scratch[1], numel * sizeof(float), comm_stream));
  CHECK_CUDA(cudaMallocAsync(&grad_full, numel * sizeof(float), compute));
  CHECK_CUDA(cudaMalloc(&act, 4096 * sizeof(float)));
  CHECK_CUDA(cudaMemset(act, 0, 4096 * sizeof(float)));

  std::vector<cudaEvent_t> gathered(num_layers), consumed(2);
  for (auto& e : gathered) CHECK_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  for (auto& e : consumed) CHECK_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));

  auto all_gather_layer = [&](int l) {
    float* dst = scratch[l % 2];
    CHECK_CUDA(cudaStreamWaitEvent(comm_stream, consumed[l % 2]));
    CHECK_NCCL(ncclAllGather(layers[l].shard, dst, layers[l].numel / world, ncclFloat, comm, comm_stream));
    CHECK_CUDA(cudaEventRecord(gathered[l], comm_stream));
  };
  std::function<void(const Layer&, const float*)> reduce_scatter_grad = [&](const Layer& L, const float* full) {
    CHECK_NCCL(ncclReduceScatter(full, L.grad_shard, L.numel / world, ncclFloat, ncclAvg, comm, compute));
  };

  for (int step = 0; step < 2; ++step) {
    all_gather_layer(0);
    for (int l = 0; l < num_layers; ++l) {
      if (l + 1 < num_layers) all_gather_layer(l + 1);  // prefetch
      CHECK_CUDA(cudaStreamWaitEvent(compute, gathered[l]));
      layer_fwd<<<64, 256, 0, compute>>>(scratch[l % 2], act, 4096);
      CHECK_CUDA(cudaEventRecord(consumed[l % 2], compute));
    }
    for (int l = num_layers - 1; l >= 0; --l) {
      all_gather_layer(l);
      CHECK_CUDA(cudaStreamWaitEvent(compute, gathered[l]));
      layer_bwd<<<256, 256, 0, compute>>>(scratch[l % 2], act, grad_full, layers[l].numel);
      CHECK_CUDA(cudaEventRecord(consumed[l % 2], compute));
      reduce_scatter_grad(layers[l], grad_full);
    }
  }
  CHECK_CUDA(cudaStreamSynchronize(compute));
  CHECK_CUDA(cudaStreamSynchronize(comm_stream));
  float g0 = 0.f;
  CHECK_CUDA(cudaMemcpy(&g0, layers[0].grad_shard, sizeof(float), cudaMemcpyDeviceToHost));
  printf("rank %d grad_shard[0] of layer 0: %f\n", rank, g0);

  CHECK_CUDA(cudaFreeAsync(scratch[0], comm_stream));
  CHECK_CUDA(cudaFreeAsync(scratch[1], comm_stream));
  CHECK_CUDA(cudaFreeAsync(grad_full, compute));
  CHECK_CUDA(cudaStreamSynchronize(comm_stream));
  CHECK_CUDA(cudaStreamSynchronize(compute));
  for (auto& L : layers) {
    CHECK_CUDA(cudaFree(L.shard));
    CHECK_CUDA(cudaFree(L.grad_shard));
  }
  CHECK_CUDA(cudaFree(act));
  for (auto& e : gathered) cudaEventDestroy(e);
  for (auto& e : consumed) cudaEventDestroy(e);
  CHECK_NCCL(ncclCommDestroy(comm));
  return 0;
}
