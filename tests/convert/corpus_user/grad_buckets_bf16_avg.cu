// DDP-style gradient buckets: a std::vector of Bucket structs, each a bf16 slab averaged with
// ncclAvg as soon as its backward part is done (a loop over buckets, one stream).
#include <cstdio>
#include <vector>
#include <mpi.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define CHECK(x) do { int e_ = (int)(x); if (e_) { fprintf(stderr, "%s failed (%d)\n", #x, e_); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)

struct Bucket {
  __nv_bfloat16* data;
  size_t numel;
};

__global__ void fill_grad(__nv_bfloat16* p, size_t n, float v) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = __float2bfloat16(v);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, world;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  ncclUniqueId id;
  if (rank == 0) CHECK(ncclGetUniqueId(&id));
  CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD));
  CHECK(cudaSetDevice(rank));
  ncclComm_t comm;
  CHECK(ncclCommInitRank(&comm, world, id, rank));
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  std::vector<Bucket> buckets(3);
  const size_t numels[3] = {1 << 20, 1 << 19, 1 << 18};
  for (size_t b = 0; b < buckets.size(); ++b) {
    buckets[b].numel = numels[b];
    CHECK(cudaMalloc(&buckets[b].data, numels[b] * sizeof(__nv_bfloat16)));
  }
  for (size_t b = 0; b < buckets.size(); ++b) {
    fill_grad<<<64, 256, 0, stream>>>(buckets[b].data, buckets[b].numel, (float)(rank + 1));
    CHECK(ncclAllReduce(buckets[b].data, buckets[b].data, buckets[b].numel, ncclBfloat16, ncclAvg, comm, stream));
  }
  CHECK(cudaStreamSynchronize(stream));
  printf("rank %d buckets reduced\n", rank);
  for (auto& bk : buckets) CHECK(cudaFree(bk.data));
  CHECK(ncclCommDestroy(comm));
  MPI_Finalize();
  return 0;
}
