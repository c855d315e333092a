// Token ids (int64) and fp64 statistics gathered from every rank, an int32 counter all-reduced:
// integer and double types on the collectives, env bootstrap through a shared id file.
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <unistd.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define NCCL_TRY(x) do { ncclResult_t st = (x); if (st != ncclSuccess) { fprintf(stderr, "nccl: %s\n", ncclGetErrorString(st)); return 1; } } while (0)

int main() {
  int rank = atoi(getenv("RANK") ? getenv("RANK") : "0");
  int world = atoi(getenv("WORLD_SIZE") ? getenv("WORLD_SIZE") : "1");
  const char* path = getenv("NCCL_ID_FILE") ? getenv("NCCL_ID_FILE") : "nccl.id";
  ncclUniqueId id;
  if (rank == 0) {
    ncclGetUniqueId(&id);
    FILE* f = fopen(path, "wb");
    fwrite(&id, sizeof(id), 1, f);
    fclose(f);
  } else {
    FILE* f = nullptr;
    while (!(f = fopen(path, "rb")) || fread(&id, sizeof(id), 1, f) != 1) { if (f) fclose(f); usleep(10000); }
    fclose(f);
  }
  cudaSetDevice(rank);
  ncclComm_t comm;
  NCCL_TRY(ncclCommInitRank(&comm, world, id, rank));
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  const size_t ntok = 8192;
  int64_t *tok_local, *tok_all;
  double* stats;
  int32_t* counter;
  cudaMalloc(&tok_local, ntok * sizeof(int64_t));
  cudaMalloc(&tok_all, world * ntok * sizeof(int64_t));
  cudaMalloc(&stats, 64 * sizeof(double));
  cudaMalloc(&counter, 256 * sizeof(int32_t));
  NCCL_TRY(ncclAllGather(tok_local, tok_all, ntok, ncclInt64, comm, stream));
  NCCL_TRY(ncclAllReduce(stats, stats, 64, ncclDouble, ncclSum, comm, stream));
  NCCL_TRY(ncclAllReduce(counter, counter, 256, ncclInt32, ncclSum, comm, stream));
  cudaStreamSynchronize(stream);
  printf("rank %d gathered %zu tokens\n", rank, world * ntok);
  cudaFree(tok_local);
  cudaFree(tok_all);
  cudaFree(stats);
  cudaFree(counter);
  ncclCommDestroy(comm);
  return 0;
}
