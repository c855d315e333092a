// Ulysses-style context parallelism for attention, fp16: each rank holds a slice of the sequence
// for all heads; before attention an all-to-all re-partitions to all of the sequence for a slice of
// the heads, and after attention a second all-to-all goes back. The all-to-all is written the way
// many trainers do it, as ncclSend/ncclRecv to every peer inside one group (`for p < nranks`), on
// per-layer, per-peer chunk buffers kept in `std::vector<std::vector<half*>>`. MPI bootstrap.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <mpi.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define CHECK_CUDA(stmt)                                                                        \
  do {                                                                                          \
    cudaError_t err_ = (stmt);                                                                  \
    if (err_ != cudaSuccess) {                                                                  \
      fprintf(stderr, "[%s:%d] %s failed: %s\n", __FILE__, __LINE__, #stmt, cudaGetErrorString(err_)); \
      MPI_Abort(MPI_COMM_WORLD, 2);                                                             \
    }                                                                                           \
  } while (0)
#define CHECK_NCCL(stmt)                                                                        \
  do {                                                                                          \
    ncclResult_t err_ = (stmt);                                                                 \
    if (err_ != ncclSuccess) {                                                                  \
      fprintf(stderr, "[%s:%d] %s failed: %s\n", __FILE__, __LINE__, #stmt, ncclGetErrorString(err_)); \
      MPI_Abort(MPI_COMM_WORLD, 3);                                                             \
    }                                                                                           \
  } while (0)

using ChunkTable = std::vector<std::vector<half*>>;  // [layer][peer]

__global__ void pack_heads(const half* qkv, half* chunk, int seq_local, int heads_per_rank, int head_dim, int peer, int heads) {
  const int n = seq_local * heads_per_rank * head_dim;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const int d = i % head_dim, h = (i / head_dim) % heads_per_rank, s = i / (head_dim * heads_per_rank);
    chunk[i] = qkv[(s * heads + peer * heads_per_rank + h) * head_dim + d];
  }
}
__global__ void attend(half* chunks, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    chunks[i] = __float2half(__half2float(chunks[i]) * 0.5f + 0.25f);
}
__global__ void init_qkv(half* x, int n, int rank) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    x[i] = __float2half(0.01f * ((i + 31 * rank) % 57));
}

// Sequence-sharded -> head-sharded: chunk p of this rank goes to rank p, chunk p from rank p lands in recv[p].
void all_to_all(const std::vector<half*>& send, const std::vector<half*>& recv, size_t count, int nranks, ncclComm_t comm,
                cudaStream_t stream) {
  CHECK_NCCL(ncclGroupStart());
  for (int p = 0; p < nranks; ++p) {
    CHECK_NCCL(ncclSend(send[p], count, ncclHalf, p, comm, stream));
    CHECK_NCCL(ncclRecv(recv[p], count, ncclHalf, p, comm, stream));
  }
  CHECK_NCCL(ncclGroupEnd());
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  int ndev;
  CHECK_CUDA(cudaGetDeviceCount(&ndev));
  CHECK_CUDA(cudaSetDevice(rank % ndev));

  ncclUniqueId id;
  if (rank == 0) CHECK_NCCL(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t cp_comm;
  CHECK_NCCL(ncclCommInitRank(&cp_comm, nranks, id, rank));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));

  const int layers = 2, heads = 16, head_dim = 64;
  const int seq = argc > 1 ? atoi(argv[1]) : 2048;
  const int seq_local = seq / nranks, heads_per_rank = heads / nranks;
  const size_t chunk_elems = (size_t)seq_local * heads_per_rank * head_dim;
  const size_t qkv_elems = (size_t)seq_local * heads * head_dim;

  half* qkv;
  CHECK_CUDA(cudaMalloc(&qkv, qkv_elems * sizeof(half)));
  init_qkv<<<128, 256, 0, stream>>>(qkv, (int)qkv_elems, rank);

  ChunkTable send_chunks(layers, std::vector<half*>(nranks)), recv_chunks(layers, std::vector<half*>(nranks));
  for (int l = 0; l < layers; ++l)
    for (int p = 0; p < nranks; ++p) {
      CHECK_CUDA(cudaMalloc(&send_chunks[l][p], chunk_elems * sizeof(half)));
      CHECK_CUDA(cudaMalloc(&recv_chunks[l][p], chunk_elems * sizeof(half)));
    }

  for (int l = 0; l < layers; ++l) {
    for (int p = 0; p < nranks; ++p)
      pack_heads<<<64, 256, 0, stream>>>(qkv, send_chunks[l][p], seq_local, heads_per_rank, head_dim, p, heads);
    all_to_all(send_chunks[l], recv_chunks[l], chunk_elems, nranks, cp_comm, stream);
    for (int p = 0; p < nranks; ++p) attend<<<64, 256, 0, stream>>>(recv_chunks[l][p], (int)chunk_elems);
    // Back to sequence-sharded: the received (now attended) chunks return to their owners.
    all_to_all(recv_chunks[l], send_chunks[l], chunk_elems, nranks, cp_comm, stream);
  }
  CHECK_CUDA(cudaStreamSynchronize(stream));

  half h;
  CHECK_CUDA(cudaMemcpy(&h, send_chunks[layers - 1][0], sizeof(h), cudaMemcpyDeviceToHost));
  printf("rank %d/%d: seq %d, %d heads per rank, out[0] = %f\n", rank, nranks, seq, heads_per_rank, __half2float(h));

  for (int l = 0; l < layers; ++l)
    for (int p = 0; p < nranks; ++p) {
      CHECK_CUDA(cudaFree(send_chunks[l][p]));
      CHECK_CUDA(cudaFree(recv_chunks[l][p]));
    }
  CHECK_CUDA(cudaFree(qkv));
  CHECK_NCCL(ncclCommDestroy(cp_comm));
  MPI_Finalize();
  return 0;
}
