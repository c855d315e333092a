// Ring attention: key/value blocks travel the ring, double-buffered (kv[0], kv[1]), each hop a
// grouped send/recv of fp16 blocks while the current block is consumed.
#include <cstdio>
#include <cstdlib>
#include <mpi.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define NCCLCHECK(cmd) do { ncclResult_t r = cmd; if (r != ncclSuccess) { printf("NCCL error %s:%d\n", __FILE__, __LINE__); exit(1); } } while (0)

constexpr size_t kBlockElems = 128 * 1024;

__global__ void attend(const half* kv, float* out, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] += __half2float(kv[i]);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  ncclUniqueId id;
  if (rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  cudaSetDevice(rank);
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, nranks, id, rank));
  cudaStream_t s;
  cudaStreamCreate(&s);
  half* kv[2];
  float* out;
  cudaMalloc(&kv[0], kBlockElems * sizeof(half));
  cudaMalloc(&kv[1], kBlockElems * sizeof(half));
  cudaMalloc(&out, kBlockElems * sizeof(float));
  cudaMemset(kv[0], 0, kBlockElems * sizeof(half));
  cudaMemset(out, 0, kBlockElems * sizeof(float));
  const int next = (rank + 1) % nranks, prev = (rank - 1 + nranks) % nranks;
  for (int hop = 0; hop < nranks; ++hop) {
    const int cur = hop % 2;
    if (hop + 1 < nranks) {
      NCCLCHECK(ncclGroupStart());
      NCCLCHECK(ncclSend(kv[cur], kBlockElems, ncclHalf, next, comm, s));
      NCCLCHECK(ncclRecv(kv[1 - cur], kBlockElems, ncclHalf, prev, comm, s));
      NCCLCHECK(ncclGroupEnd());
    }
    attend<<<128, 256, 0, s>>>(kv[cur], out, kBlockElems);
  }
  cudaStreamSynchronize(s);
  printf("rank %d attended %d blocks\n", rank, nranks);
  cudaFree(kv[0]);
  cudaFree(kv[1]);
  cudaFree(out);
  ncclCommDestroy(comm);
  MPI_Finalize();
  return 0;
}
