// ZeRO-1 style optimizer step: reduce-scatter of the flat gradient into this rank's shard
// (pointer arithmetic on the flat buffer), the shard's update, all-gather of the parameters.
// Buffers live in a std::vector<float*> of per-bucket pointers walked with a range-for.
#include <cstdio>
#include <vector>
#include <mpi.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define CK(x) do { if ((x) != 0) { std::printf("error at %s:%d\n", __FILE__, __LINE__); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)

struct Bucket {
  float* grad;
  float* param;
  size_t numel;  // divisible by the world size
};

__global__ void make_grad(float* g, size_t n, int rank, int bucket) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) g[i] = (float)((i + bucket * 3 + rank) % 11) * 0.01f;
}
__global__ void adam_like(float* p, const float* g, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) p[i] -= 0.01f * g[i];
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  ncclUniqueId uid;
  if (rank == 0) ncclGetUniqueId(&uid);
  MPI_Bcast(&uid, sizeof(uid), MPI_BYTE, 0, MPI_COMM_WORLD);
  CK(cudaSetDevice(rank));
  ncclComm_t comm;
  CK(ncclCommInitRank(&comm, world, uid, rank));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  std::vector<Bucket> buckets;
  for (size_t numel : {size_t(1) << 20, size_t(3) << 19, size_t(1) << 18}) {
    Bucket b;
    b.numel = numel;
    CK(cudaMalloc(&b.grad, numel * sizeof(float)));
    CK(cudaMalloc(&b.param, numel * sizeof(float)));
    CK(cudaMemset(b.param, 0, numel * sizeof(float)));
    buckets.push_back(b);
  }
  float* shard_grad = nullptr;
  CK(cudaMalloc(&shard_grad, (size_t(3) << 19) / world * sizeof(float)));  // the largest bucket's shard
  for (int step = 0; step < 2; ++step) {
    int bi = 0;
    for (auto& b : buckets) make_grad<<<128, 256, 0, s>>>(b.grad, b.numel, rank, bi++);
    for (auto& b : buckets) {
      const size_t shard = b.numel / world;
      CK(ncclReduceScatter(b.grad, shard_grad, shard, ncclFloat, ncclSum, comm, s));
      adam_like<<<128, 256, 0, s>>>(b.param + rank * shard, shard_grad, shard);
      CK(ncclAllGather(b.param + rank * shard, b.param, shard, ncclFloat, comm, s));
    }
  }
  CK(cudaStreamSynchronize(s));
  float h = 0;
  CK(cudaMemcpy(&h, buckets[1].param + 17, sizeof(float), cudaMemcpyDeviceToHost));
  std::printf("rank %d param %.5f\n", rank, h);
  for (auto& b : buckets) { CK(cudaFree(b.grad)); CK(cudaFree(b.param)); }
  CK(cudaFree(shard_grad));
  ncclCommDestroy(comm);
  MPI_Finalize();
  return 0;
}
