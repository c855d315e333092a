// FSDP / ZeRO-3 with one flat parameter buffer: every layer's weights are a view into it by pointer
// arithmetic (`float* w = flat + offsets[l]`; the gradient views are kept in a `std::vector<float*>`
// filled with `push_back(flat_grads + offsets[l])`), each layer's size padded to a multiple of the
// world size so its shard has equal length on every rank. A rank keeps only its shard of each layer
// in one flat shard buffer (`shard + shard_offsets[l]`): before a layer's forward the layer is
// all-gathered into the flat buffer; after its backward the layer's gradient view is
// reduce-scattered into the rank's gradient shard at the computed offset, and the optimizer updates
// the shard. MPI bootstrap.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <mpi.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define CUDA_OK(x)                                                                          \
  do {                                                                                      \
    cudaError_t e = (x);                                                                    \
    if (e != cudaSuccess) {                                                                 \
      fprintf(stderr, "CUDA error %s (%s:%d)\n", cudaGetErrorString(e), __FILE__, __LINE__); \
      exit(1);                                                                              \
    }                                                                                       \
  } while (0)
#define NCCL_OK(x)                                                                          \
  do {                                                                                      \
    ncclResult_t r = (x);                                                                   \
    if (r != ncclSuccess) {                                                                 \
      fprintf(stderr, "NCCL error %s (%s:%d)\n", ncclGetErrorString(r), __FILE__, __LINE__); \
      exit(1);                                                                              \
    }                                                                                       \
  } while (0)

__global__ void layer_forward(const float* w, float* act, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    act[i] = act[i] * 0.5f + w[i % 4096];
}
__global__ void layer_backward(const float* w, const float* act, float* gw, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    gw[i] = act[i % 8192] * 0.01f + w[i] * 1e-4f;
}
__global__ void sgd(float* w, const float* g, size_t n, float lr) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) w[i] -= lr * g[i];
}
__global__ void init_shard(float* w, size_t n, int rank) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    w[i] = 0.001f * (float)((i * 7 + rank) % 113);
}

static size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int devices = 1;
  CUDA_OK(cudaGetDeviceCount(&devices));
  CUDA_OK(cudaSetDevice(rank % devices));

  ncclUniqueId id;
  if (rank == 0) NCCL_OK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  NCCL_OK(ncclCommInitRank(&comm, world, id, rank));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));

  // Layer sizes as a model would declare them, padded so each splits evenly across ranks.
  const std::vector<size_t> layer_numel = {4096 * 1024, 1024 * 1024 + 3, 4096 * 1024, 1024 * 1024 + 3, 50257};
  const int num_layers = (int)layer_numel.size();
  std::vector<size_t> offsets(num_layers), shard_offsets(num_layers), padded(num_layers);
  size_t total = 0;
  for (int l = 0; l < num_layers; ++l) {
    padded[l] = round_up(layer_numel[l], (size_t)world);
    offsets[l] = total;
    shard_offsets[l] = total / world;
    total += padded[l];
  }
  const size_t shard_total = total / world;

  float *flat_params, *flat_grads, *param_shard, *grad_shard, *act;
  const size_t act_numel = 8192;
  CUDA_OK(cudaMalloc(&flat_params, total * sizeof(float)));
  CUDA_OK(cudaMalloc(&flat_grads, total * sizeof(float)));
  CUDA_OK(cudaMalloc(&param_shard, shard_total * sizeof(float)));
  CUDA_OK(cudaMalloc(&grad_shard, shard_total * sizeof(float)));
  CUDA_OK(cudaMalloc(&act, act_numel * sizeof(float)));
  CUDA_OK(cudaMemset(act, 0, act_numel * sizeof(float)));
  init_shard<<<256, 256, 0, stream>>>(param_shard, shard_total, rank);
  // Each layer's gradient, a view into the flat gradient buffer, kept per layer as autograd would hand it over.
  std::vector<float*> layer_grads;
  for (int l = 0; l < num_layers; ++l) layer_grads.push_back(flat_grads + offsets[l]);

  const int steps = argc > 1 ? atoi(argv[1]) : 3;
  for (int step = 0; step < steps; ++step) {
    // Forward: materialise each layer just before it runs.
    for (int l = 0; l < num_layers; ++l) {
      const size_t chunk = padded[l] / world;
      float* w = flat_params + offsets[l];
      NCCL_OK(ncclAllGather(param_shard + shard_offsets[l], w, chunk, ncclFloat, comm, stream));
      layer_forward<<<64, 256, 0, stream>>>(w, act, act_numel);
    }
    // Backward in reverse: each layer's gradient view is reduce-scattered into this rank's shard.
    for (int l = num_layers - 1; l >= 0; --l) {
      const size_t chunk = padded[l] / world;
      const float* w = flat_params + offsets[l];
      layer_backward<<<256, 256, 0, stream>>>(w, act, layer_grads[l], padded[l]);
      NCCL_OK(ncclReduceScatter(layer_grads[l], grad_shard + shard_offsets[l], chunk, ncclFloat, ncclAvg, comm, stream));
    }
    sgd<<<256, 256, 0, stream>>>(param_shard, grad_shard, shard_total, 1e-3f);
  }
  CUDA_OK(cudaStreamSynchronize(stream));

  float first = 0.f;
  CUDA_OK(cudaMemcpy(&first, param_shard, sizeof(float), cudaMemcpyDeviceToHost));
  printf("rank %d: %d layers, %zu parameters (%zu per shard), shard[0] = %f\n", rank, num_layers, total, shard_total, first);

  CUDA_OK(cudaFree(flat_params));
  CUDA_OK(cudaFree(flat_grads));
  CUDA_OK(cudaFree(param_shard));
  CUDA_OK(cudaFree(grad_shard));
  CUDA_OK(cudaFree(act));
  NCCL_OK(ncclCommDestroy(comm));
  MPI_Finalize();
  return 0;
}
