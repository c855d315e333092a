// Sequence-parallel transformer block, fp16, MPI bootstrap, the way a hand-written trainer manages its
// communication buffers: a helper allocates each (shard, full) pair and returns it as a std::pair;
// the caller unpacks it with std::tie into members declared earlier (`std::tie(ln_shard, ln_full) =
// alloc_pair(...)`), and one pair keeps only its full buffer (`std::tie(std::ignore, grad_full)`).
// Forward: all-gather the layer-norm output's sequence shards; backward: reduce-scatter the
// gradient back to shards; a loss all-reduced as float at the end.
#include <cstdio>
#include <cstdlib>
#include <tuple>
#include <utility>
#include <mpi.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("CUDA %s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)
#define NK(x) do { ncclResult_t r_ = (x); if (r_ != ncclSuccess) { printf("NCCL %s:%d %s\n", __FILE__, __LINE__, ncclGetErrorString(r_)); exit(1); } } while (0)

static std::pair<__half*, __half*> alloc_pair(size_t shard_elems, int world) {
  __half* shard = nullptr;
  __half* full = nullptr;
  CK(cudaMalloc(&shard, shard_elems * sizeof(__half)));
  CK(cudaMalloc(&full, shard_elems * world * sizeof(__half)));
  return std::make_pair(shard, full);
}

__global__ void layernorm_like(__half* out, size_t n, int rank, int step) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2half(0.01f * (float)((i * 31 + rank * 17 + step) % 200) - 1.0f);
}
__global__ void mlp_backward_like(const __half* full, __half* grad, size_t n, float scale) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) grad[i] = __float2half(__half2float(full[i]) * scale);
}
__global__ void loss_of(const __half* g, size_t n, float* loss) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    float s = 0.f;
    for (size_t i = 0; i < n; i += 97) s += __half2float(g[i]);
    *loss = s;
  }
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int ndev = 0;
  CK(cudaGetDeviceCount(&ndev));
  CK(cudaSetDevice(rank % ndev));
  ncclUniqueId id;
  if (rank == 0) NK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  NK(ncclCommInitRank(&comm, world, id, rank));
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  const size_t seq_shard = 512, hidden = 4096, shard_elems = seq_shard * hidden;
  __half *ln_shard = nullptr, *ln_full = nullptr, *grad_shard = nullptr, *grad_full = nullptr;
  std::tie(ln_shard, ln_full) = alloc_pair(shard_elems, world);
  std::tie(grad_shard, grad_full) = alloc_pair(shard_elems, world);
  __half* scratch_full = nullptr;
  std::tie(std::ignore, scratch_full) = alloc_pair(shard_elems, world);
  float* loss = nullptr;
  CK(cudaMalloc(&loss, sizeof(float)));

  const int threads = 256;
  const unsigned shard_blocks = (unsigned)((shard_elems + threads - 1) / threads);
  const unsigned full_blocks = (unsigned)((shard_elems * world + threads - 1) / threads);
  for (int step = 0; step < 3; ++step) {
    layernorm_like<<<shard_blocks, threads, 0, stream>>>(ln_shard, shard_elems, rank, step);
    NK(ncclAllGather(ln_shard, ln_full, shard_elems, ncclHalf, comm, stream));
    mlp_backward_like<<<full_blocks, threads, 0, stream>>>(ln_full, grad_full, shard_elems * world, 0.5f + rank);
    NK(ncclReduceScatter(grad_full, grad_shard, shard_elems, ncclHalf, ncclSum, comm, stream));
    NK(ncclAllGather(grad_shard, scratch_full, shard_elems, ncclHalf, comm, stream));
  }
  loss_of<<<1, 1, 0, stream>>>(scratch_full, shard_elems * world, loss);
  NK(ncclAllReduce(loss, loss, 1, ncclFloat, ncclSum, comm, stream));
  float h_loss = 0.f;
  CK(cudaMemcpyAsync(&h_loss, loss, sizeof(float), cudaMemcpyDeviceToHost, stream));
  CK(cudaStreamSynchronize(stream));
  if (rank == 0) printf("loss %.4f\n", h_loss);

  CK(cudaFree(ln_shard));
  CK(cudaFree(ln_full));
  CK(cudaFree(grad_shard));
  CK(cudaFree(grad_full));
  CK(cudaFree(scratch_full));
  CK(cudaFree(loss));
  NK(ncclCommDestroy(comm));
  MPI_Finalize();
  return 0;
}
