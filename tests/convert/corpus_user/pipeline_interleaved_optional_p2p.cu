// Interleaved (virtual-stage) pipeline parallelism, bf16: each rank holds `kChunks` model chunks,
// and activations travel around the ring of ranks, chunk v of the last rank feeding chunk v + 1 of
// rank 0. Every exchange goes through one helper in the style of Megatron's p2p_communicate: it
// takes optional buffers (a null pointer means "nothing to send / receive") and posts what it is
// given in one NCCL group; callers pass `cond ? nullptr : buffer` where the ring ends. The chunks'
// micro-batch slots are `std::array<__nv_bfloat16*, kSlots>` members of a struct kept in a
// std::vector, allocated through range-for references. MPI bootstrap.
#include <array>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <mpi.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define CUDA_ASSERT(expr)                                                                   \
  do {                                                                                      \
    const cudaError_t status = (expr);                                                      \
    if (status != cudaSuccess) {                                                            \
      fprintf(stderr, "%s failed at %s:%d: %s\n", #expr, __FILE__, __LINE__, cudaGetErrorString(status)); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                         \
    }                                                                                       \
  } while (0)
#define NCCL_ASSERT(expr)                                                                   \
  do {                                                                                      \
    const ncclResult_t status = (expr);                                                     \
    if (status != ncclSuccess) {                                                            \
      fprintf(stderr, "%s failed at %s:%d: %s\n", #expr, __FILE__, __LINE__, ncclGetErrorString(status)); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                         \
    }                                                                                       \
  } while (0)

constexpr int kChunks = 2;  // virtual stages per rank
constexpr int kSlots = 3;   // activation slots per chunk

struct ModelChunk {
  std::array<__nv_bfloat16*, kSlots> input{};   // activation received for this chunk
  std::array<__nv_bfloat16*, kSlots> output{};  // activation this chunk produced
  std::array<__nv_bfloat16*, kSlots> grad{};    // gradient of the output, received from downstream
};

__global__ void chunk_forward(const __nv_bfloat16* in, __nv_bfloat16* out, size_t n, float scale) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    out[i] = __float2bfloat16(__bfloat162float(in[i]) * scale + 0.125f);
}
__global__ void chunk_backward(const __nv_bfloat16* gout, __nv_bfloat16* gin, size_t n, float scale) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    gin[i] = __float2bfloat16(__bfloat162float(gout[i]) * scale);
}

// Megatron-style: any of the two may be null; what is given is exchanged in one group.
void p2p_communicate(__nv_bfloat16* send_buf, int send_peer, __nv_bfloat16* recv_buf, int recv_peer, size_t count,
                     ncclComm_t comm, cudaStream_t stream) {
  NCCL_ASSERT(ncclGroupStart());
  if (send_buf != nullptr) NCCL_ASSERT(ncclSend(send_buf, count, ncclBfloat16, send_peer, comm, stream));
  if (recv_buf != nullptr) NCCL_ASSERT(ncclRecv(recv_buf, count, ncclBfloat16, recv_peer, comm, stream));
  NCCL_ASSERT(ncclGroupEnd());
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int gpus = 1;
  CUDA_ASSERT(cudaGetDeviceCount(&gpus));
  CUDA_ASSERT(cudaSetDevice(rank % gpus));

  ncclUniqueId id;
  if (rank == 0) NCCL_ASSERT(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t pp;
  NCCL_ASSERT(ncclCommInitRank(&pp, world, id, rank));
  cudaStream_t stream;
  CUDA_ASSERT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  const size_t seq = 512, hidden = 2048, count = seq * hidden;
  std::vector<ModelChunk> chunks(kChunks);
  for (auto& chunk : chunks) {
    for (auto& p : chunk.input) CUDA_ASSERT(cudaMalloc(&p, count * sizeof(__nv_bfloat16)));
    for (auto& p : chunk.output) CUDA_ASSERT(cudaMalloc(&p, count * sizeof(__nv_bfloat16)));
    for (auto& p : chunk.grad) CUDA_ASSERT(cudaMalloc(&p, count * sizeof(__nv_bfloat16)));
    for (auto* p : chunk.input) CUDA_ASSERT(cudaMemset(p, 0, count * sizeof(__nv_bfloat16)));
  }

  const int next = (rank + 1) % world, prev = (rank + world - 1) % world;
  const int micro_batches = argc > 1 ? atoi(argv[1]) : 6;

  // Forward: at each step every rank runs chunk v; its output goes to the next rank, where it feeds
  // chunk v (or chunk v + 1 on rank 0). The very last chunk of the model sends nothing, and rank 0
  // receives nothing after it.
  for (int mb = 0; mb < micro_batches; ++mb)
    for (int v = 0; v < kChunks; ++v) {
      const int slot = mb % kSlots;
      ModelChunk& c = chunks[v];
      chunk_forward<<<128, 256, 0, stream>>>(c.input[slot], c.output[slot], count, 0.5f + 0.25f * v);
      const bool model_end = rank == world - 1 && v == kChunks - 1;
      const bool ring_end = rank == 0 && v == kChunks - 1;
      ModelChunk& fed = chunks[rank == 0 ? (v + 1) % kChunks : v];
      p2p_communicate(model_end ? nullptr : c.output[slot], next, ring_end ? nullptr : fed.input[(slot + 1) % kSlots], prev,
                      count, pp, stream);
    }

  // Backward, in reverse: gradients travel the ring the other way.
  for (int mb = micro_batches - 1; mb >= 0; --mb)
    for (int v = kChunks - 1; v >= 0; --v) {
      const int slot = mb % kSlots;
      ModelChunk& c = chunks[v];
      chunk_backward<<<128, 256, 0, stream>>>(c.grad[slot], c.input[slot], count, 0.5f + 0.25f * v);
      const bool model_start = rank == 0 && v == 0;
      const bool ring_start = rank == world - 1 && v == 0;
      ModelChunk& fed = chunks[rank == world - 1 ? (v + kChunks - 1) % kChunks : v];
      p2p_communicate(model_start ? nullptr : c.input[slot], prev, ring_start ? nullptr : fed.grad[(slot + 1) % kSlots], next,
                      count, pp, stream);
    }
  CUDA_ASSERT(cudaStreamSynchronize(stream));

  __nv_bfloat16 first;
  CUDA_ASSERT(cudaMemcpy(&first, chunks[0].input[0], sizeof(first), cudaMemcpyDeviceToHost));
  printf("rank %d/%d: %d micro-batches over %d chunks, input grad[0] = %f\n", rank, world, micro_batches, kChunks,
         __bfloat162float(first));

  for (auto& chunk : chunks) {
    for (auto* p : chunk.input) CUDA_ASSERT(cudaFree(p));
    for (auto* p : chunk.output) CUDA_ASSERT(cudaFree(p));
    for (auto* p : chunk.grad) CUDA_ASSERT(cudaFree(p));
  }
  CUDA_ASSERT(cudaStreamDestroy(stream));
  NCCL_ASSERT(ncclCommDestroy(pp));
  MPI_Finalize();
  return 0;
}
