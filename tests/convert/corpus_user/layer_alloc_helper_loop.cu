// Data-parallel training of a stack of layers, written the way a course project or a small
// research code base does it: the layers are an array of structs, each filled by a helper that
// takes the layer by pointer (`alloc_layer(&layers[l], ...)`, called in a loop over the layers),
// gradients are averaged per layer after backward, and a free helper releases them the same way.
// The NCCL id travels through a file on a shared filesystem (rank 0 writes it, the others poll),
// so there is no MPI: rank and world size come from the environment the launcher sets.
#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define CUDA_CHECK(cmd) do { cudaError_t e = (cmd); if (e != cudaSuccess) { std::fprintf(stderr, "CUDA %s:%d '%s'\n", __FILE__, __LINE__, cudaGetErrorString(e)); std::exit(1); } } while (0)
#define NCCL_CHECK(cmd) do { ncclResult_t r = (cmd); if (r != ncclSuccess) { std::fprintf(stderr, "NCCL %s:%d '%s'\n", __FILE__, __LINE__, ncclGetErrorString(r)); std::exit(1); } } while (0)

constexpr int kLayers = 4;

struct Layer {
  float* weight;
  float* grad;
  float* act;  // activations stay local: never communicated
  size_t n;
};

static int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

// Rank 0 writes the id to a file; the others wait for it to appear with the full size.
static ncclUniqueId exchange_id(int rank, const char* path) {
  ncclUniqueId id;
  if (rank == 0) {
    NCCL_CHECK(ncclGetUniqueId(&id));
    FILE* f = std::fopen(path, "wb");
    std::fwrite(&id, sizeof(id), 1, f);
    std::fclose(f);
    return id;
  }
  for (;;) {
    FILE* f = std::fopen(path, "rb");
    if (f) {
      const size_t got = std::fread(&id, sizeof(id), 1, f);
      std::fclose(f);
      if (got == 1) return id;
    }
    usleep(10000);
  }
}

static void alloc_layer(Layer* layer, size_t n) {
  layer->n = n;
  CUDA_CHECK(cudaMalloc(&layer->weight, n * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&layer->grad, n * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&layer->act, n * sizeof(float)));
  CUDA_CHECK(cudaMemset(layer->weight, 0, n * sizeof(float)));
}

static void free_layer(Layer* layer) {
  CUDA_CHECK(cudaFree(layer->weight));
  CUDA_CHECK(cudaFree(layer->grad));
  CUDA_CHECK(cudaFree(layer->act));
}

__global__ void backward(float* g, const float* w, size_t n, int rank) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    g[i] = w[i] * 0.5f + 0.001f * (float)((i + rank) % 13);
}
__global__ void sgd(float* w, const float* g, size_t n, float lr) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) w[i] -= lr * g[i];
}

int main() {
  const int rank = env_int("RANK", 0), world = env_int("WORLD_SIZE", 1);
  const char* id_file = std::getenv("NCCL_ID_FILE") ? std::getenv("NCCL_ID_FILE") : "/tmp/nccl_id.bin";
  CUDA_CHECK(cudaSetDevice(env_int("LOCAL_RANK", rank)));
  ncclUniqueId id = exchange_id(rank, id_file);
  ncclComm_t comm;
  NCCL_CHECK(ncclCommInitRank(&comm, world, id, rank));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));

  Layer layers[kLayers];
  for (int l = 0; l < kLayers; ++l) alloc_layer(&layers[l], (size_t)(l + 1) * 4096);

  for (int step = 0; step < 5; ++step) {
    for (int l = kLayers - 1; l >= 0; --l) {
      backward<<<64, 256, 0, stream>>>(layers[l].grad, layers[l].weight, layers[l].n, rank);
      NCCL_CHECK(ncclAllReduce(layers[l].grad, layers[l].grad, layers[l].n, ncclFloat, ncclAvg, comm, stream));
    }
    for (int l = 0; l < kLayers; ++l) sgd<<<64, 256, 0, stream>>>(layers[l].weight, layers[l].grad, layers[l].n, 0.1f);
  }
  // Rank 0's weights go to everyone once at the end (a consistency check a user would add).
  NCCL_CHECK(ncclBroadcast(layers[0].weight, layers[0].weight, layers[0].n, ncclFloat, 0, comm, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  float first = 0.f;
  CUDA_CHECK(cudaMemcpy(&first, layers[0].weight, sizeof(float), cudaMemcpyDeviceToHost));
  std::printf("rank %d: weight[0] of layer 0 = %f\n", rank, first);

  for (int l = 0; l < kLayers; ++l) free_layer(&layers[l]);
  NCCL_CHECK(ncclCommDestroy(comm));
  return 0;
}
