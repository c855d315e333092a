// A thread per GPU that is given its buffers: the main thread allocates every GPU's buffers up
// front (cudaSetDevice in a loop, as a data loader or a model loader would), then starts one
// std::thread per GPU with the buffers as arguments. Each thread makes its communicator, sums bf16
// gradients over the GPUs and reduce-scatters them into its shard; the main thread joins, checks
// every shard on the host and frees everything. Prints one line per GPU.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#define CHECK_CUDA(x)                                                                     \
  if ((x) != cudaSuccess) {                                                               \
    std::fprintf(stderr, "cuda error %s at %s:%d\n", cudaGetErrorString(x), __FILE__, __LINE__); \
    std::exit(1);                                                                         \
  }
#define CHECK_NCCL(x)                                                                     \
  if ((x) != ncclSuccess) {                                                               \
    std::fprintf(stderr, "nccl error at %s:%d\n", __FILE__, __LINE__);                   \
    std::exit(1);                                                                         \
  }

__global__ void init_grads(__nv_bfloat16* g, size_t n, int rank) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    g[i] = __float2bfloat16((float)((i * 3 + rank) % 8));
}

void train_step(int rank, int world, ncclUniqueId id, __nv_bfloat16* grads, __nv_bfloat16* shard, size_t n) {
  CHECK_CUDA(cudaSetDevice(rank));
  ncclComm_t comm;
  CHECK_NCCL(ncclCommInitRank(&comm, world, id, rank));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  init_grads<<<120, 256, 0, stream>>>(grads, n, rank);
  for (int micro = 0; micro < 2; ++micro)
    CHECK_NCCL(ncclAllReduce(grads, grads, n, ncclBfloat16, ncclSum, comm, stream));
  CHECK_NCCL(ncclReduceScatter(grads, shard, n / world, ncclBfloat16, ncclSum, comm, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  CHECK_CUDA(cudaStreamDestroy(stream));
  CHECK_NCCL(ncclCommDestroy(comm));
}

int main(int argc, char** argv) {
  int world = 0;
  CHECK_CUDA(cudaGetDeviceCount(&world));
  if (argc > 1) world = std::atoi(argv[1]);
  if (world < 1) return 1;
  const size_t n = (size_t)1 << 20;
  std::vector<__nv_bfloat16*> grads(world), shards(world);
  for (int r = 0; r < world; ++r) {
    CHECK_CUDA(cudaSetDevice(r));
    CHECK_CUDA(cudaMalloc(&grads[r], n * sizeof(__nv_bfloat16)));
    CHECK_CUDA(cudaMalloc(&shards[r], n / world * sizeof(__nv_bfloat16)));
  }
  ncclUniqueId id;
  CHECK_NCCL(ncclGetUniqueId(&id));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back(train_step, r, world, id, grads[r], shards[r], n);
  for (auto& t : threads) t.join();

  int bad = 0;
  for (int r = 0; r < world; ++r) {
    CHECK_CUDA(cudaSetDevice(r));
    std::vector<__nv_bfloat16> host(n / world);
    CHECK_CUDA(cudaMemcpy(host.data(), shards[r], host.size() * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost));
    size_t wrong = 0;
    for (size_t i = 0; i < host.size(); ++i) {
      const size_t g = (size_t)r * host.size() + i;
      float expect = 0.0f;
      for (int q = 0; q < world; ++q) expect += (float)((g * 3 + q) % 8);
      expect *= (float)world * (float)world;  // the second all-reduce and the reduce-scatter each sum world copies
      const float got = __bfloat162float(host[i]);
      if (got < expect * 0.99f - 0.5f || got > expect * 1.01f + 0.5f) ++wrong;
    }
    std::printf("gpu %d: shard[0] %.1f, %zu of %zu wrong\n", r, __bfloat162float(host[0]), wrong, host.size());
    bad += wrong == 0 ? 0 : 1;
    CHECK_CUDA(cudaFree(grads[r]));
    CHECK_CUDA(cudaFree(shards[r]));
  }
  return bad == 0 ? 0 : 2;
}
