// Tensor-parallel MLP in fp16: each rank holds a column/row shard of every layer; the row-parallel
// output is summed across ranks. Layers live in an array of structs.
#include <cstdio>
#include <cstdlib>
#include <mpi.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define CHECK_CUDA(x) do { if ((x) != cudaSuccess) { fprintf(stderr, "cuda failure line %d\n", __LINE__); abort(); } } while (0)
#define CHECK_NCCL(x) do { if ((x) != ncclSuccess) { fprintf(stderr, "nccl failure line %d\n", __LINE__); abort(); } } while (0)

struct Layer {
  half* w;
  half* out;
};

constexpr int kLayers = 3;
constexpr int kTokens = 256;
constexpr int kHidden = 1024;

__global__ void matmul_shard(const half* in, const half* w, half* out, int tokens, int hidden) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < tokens * hidden) out[i] = __hmul(in[i], w[i % hidden]);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  ncclUniqueId uid;
  if (rank == 0) ncclGetUniqueId(&uid);
  MPI_Bcast((void*)&uid, sizeof(uid), MPI_BYTE, 0, MPI_COMM_WORLD);
  CHECK_CUDA(cudaSetDevice(rank % 8));
  ncclComm_t tp;
  CHECK_NCCL(ncclCommInitRank(&tp, world, uid, rank));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  Layer layers[kLayers];
  half* x;
  CHECK_CUDA(cudaMalloc((void**)&x, kTokens * kHidden * sizeof(half)));
  CHECK_CUDA(cudaMemset(x, 0, kTokens * kHidden * sizeof(half)));
  for (int l = 0; l < kLayers; ++l) {
    CHECK_CUDA(cudaMalloc((void**)&layers[l].w, kHidden * sizeof(half)));
    CHECK_CUDA(cudaMalloc((void**)&layers[l].out, kTokens * kHidden * sizeof(half)));
    CHECK_CUDA(cudaMemset(layers[l].w, 0, kHidden * sizeof(half)));
  }
  const half* in = x;
  for (int l = 0; l < kLayers; ++l) {
    matmul_shard<<<(kTokens * kHidden + 255) / 256, 256, 0, stream>>>(in, layers[l].w, layers[l].out, kTokens, kHidden);
    CHECK_NCCL(ncclAllReduce(layers[l].out, layers[l].out, kTokens * kHidden, ncclHalf, ncclSum, tp, stream));
    in = layers[l].out;
  }
  CHECK_CUDA(cudaStreamSynchronize(stream));
  printf("rank %d done\n", rank);
  for (int l = 0; l < kLayers; ++l) {
    cudaFree(layers[l].w);
    cudaFree(layers[l].out);
  }
  cudaFree(x);
  ncclCommDestroy(tp);
  MPI_Finalize();
  return 0;
}
