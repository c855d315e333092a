// A data-loader statistics pass as cluster tooling writes it: the world communicator made with
// ncclCommInitRankScalable from several unique ids (one per group of ranks, each broadcast by its
// creator over MPI), then a communicator of the even ranks only through ncclCommSplit, the odd
// ranks passing NCCL_SPLIT_NOCOLOR (their communicator stays NULL and every use is guarded).
// Types of every width: int64 token counts, uint8 "seen" masks (max), int8 clipped deltas,
// double loss sums.
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK_CUDA(x)                                                                   \
  do {                                                                                  \
    cudaError_t err_ = (x);                                                             \
    if (err_ != cudaSuccess) {                                                          \
      fprintf(stderr, "%s:%d CUDA: %s\n", __FILE__, __LINE__, cudaGetErrorString(err_)); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                     \
    }                                                                                   \
  } while (0)
#define CHECK_NCCL(x)                                                                   \
  do {                                                                                  \
    ncclResult_t res_ = (x);                                                            \
    if (res_ != ncclSuccess) {                                                          \
      fprintf(stderr, "%s:%d NCCL: %s\n", __FILE__, __LINE__, ncclGetErrorString(res_)); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                     \
    }                                                                                   \
  } while (0)

static const int kMaxIds = 4;
static const int kVocab = 32000;
static const int kShards = 64;

__global__ void count_tokens(long long* counts, unsigned char* seen, signed char* delta, int rank, int vocab) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < vocab; i += gridDim.x * blockDim.x) {
    counts[i] = (long long)((i * 7 + rank) % 11);
    seen[i] = (unsigned char)(counts[i] > 5 ? 1 : 0);
    delta[i] = (signed char)((i + rank) % 5 - 2);
  }
}

__global__ void shard_loss(double* loss, int shards, int rank) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < shards) loss[i] = 0.5 * (double)(i + 1) / (double)(rank + 1);
}

int main(int argc, char** argv) {
  int rank, nranks;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  int ndev = 0;
  CHECK_CUDA(cudaGetDeviceCount(&ndev));
  CHECK_CUDA(cudaSetDevice(rank % ndev));

  // One id per group of ranks: rank i * nranks / nIds creates id i and broadcasts it.
  int nIds = nranks < kMaxIds ? nranks : kMaxIds;
  ncclUniqueId ids[kMaxIds];
  for (int i = 0; i < nIds; i++) {
    int root = i * nranks / nIds;
    if (rank == root) CHECK_NCCL(ncclGetUniqueId(&ids[i]));
    MPI_Bcast(&ids[i], sizeof(ncclUniqueId), MPI_BYTE, root, MPI_COMM_WORLD);
  }
  // NCCL validates the CTA bounds as a pair (a minimum alone is compared with the still-unset
  // maximum, NCCL_CONFIG_UNDEF_INT, and rejected as an invalid argument): set both.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.minCTAs = 4;
  config.maxCTAs = 32;
  ncclComm_t world;
  CHECK_NCCL(ncclCommInitRankScalable(&world, nranks, rank, nIds, ids, &config));

  // The even ranks hold the evaluation shards; odd ranks are not part of that communicator.
  ncclComm_t evenComm = NULL;
  int color = (rank % 2 == 0) ? 0 : NCCL_SPLIT_NOCOLOR;
  CHECK_NCCL(ncclCommSplit(world, color, rank, &evenComm, NULL));

  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  long long* counts;
  unsigned char* seen;
  signed char* delta;
  double* loss;
  CHECK_CUDA(cudaMalloc(&counts, kVocab * sizeof(long long)));
  CHECK_CUDA(cudaMalloc(&seen, kVocab));
  CHECK_CUDA(cudaMalloc(&delta, kVocab));
  CHECK_CUDA(cudaMalloc(&loss, kShards * sizeof(double)));

  count_tokens<<<64, 256, 0, stream>>>(counts, seen, delta, rank, kVocab);
  CHECK_NCCL(ncclAllReduce(counts, counts, kVocab, ncclInt64, ncclSum, world, stream));
  CHECK_NCCL(ncclAllReduce(seen, seen, kVocab, ncclUint8, ncclMax, world, stream));
  CHECK_NCCL(ncclAllReduce(delta, delta, kVocab, ncclInt8, ncclMin, world, stream));

  if (evenComm != NULL) {
    shard_loss<<<1, kShards, 0, stream>>>(loss, kShards, rank);
    CHECK_NCCL(ncclAllReduce(loss, loss, kShards, ncclDouble, ncclSum, evenComm, stream));
  }
  CHECK_CUDA(cudaStreamSynchronize(stream));

  long long c0 = 0;
  CHECK_CUDA(cudaMemcpy(&c0, counts, sizeof(c0), cudaMemcpyDeviceToHost));
  printf("rank %d: count[0] = %lld\n", rank, c0);

  CHECK_CUDA(cudaFree(counts));
  CHECK_CUDA(cudaFree(seen));
  CHECK_CUDA(cudaFree(delta));
  CHECK_CUDA(cudaFree(loss));
  CHECK_CUDA(cudaStreamDestroy(stream));
  if (evenComm != NULL) CHECK_NCCL(ncclCommDestroy(evenComm));
  CHECK_NCCL(ncclCommDestroy(world));
  MPI_Finalize();
  return 0;
}
