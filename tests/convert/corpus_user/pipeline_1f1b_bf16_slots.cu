// Pipeline parallelism with a one-forward-one-backward (1F1B) schedule: each stage runs
// `stages - stage - 1` warm-up forwards, then alternates one forward and one backward, then drains
// the remaining backwards. Activations are bf16 and live in a fixed ring of micro-batch slots
// (`std::array<__nv_bfloat16*, kSlots>`); the exchange helpers take the peer as `int peer` and pair
// a send with a receive in one NCCL group, as the steady state sends its output forward while it
// receives a gradient from the next stage. The first stage never receives activations and the
// last never sends them, so what a stage posts depends on its rank. MPI bootstrap.
#include <array>
#include <cstdio>
#include <cstdlib>
#include <mpi.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <nccl.h>

#define CK_CUDA(call)                                                                         \
  do {                                                                                        \
    cudaError_t err = (call);                                                                 \
    if (err != cudaSuccess) {                                                                 \
      fprintf(stderr, "%s:%d cuda: %s\n", __FILE__, __LINE__, cudaGetErrorString(err));       \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                           \
    }                                                                                         \
  } while (0)
#define CK_NCCL(call)                                                                         \
  do {                                                                                        \
    ncclResult_t res = (call);                                                                \
    if (res != ncclSuccess) {                                                                 \
      fprintf(stderr, "%s:%d nccl: %s\n", __FILE__, __LINE__, ncclGetErrorString(res));       \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                           \
    }                                                                                         \
  } while (0)

constexpr int kSlots = 4;  // in-flight micro-batches a stage keeps (>= the number of stages)
constexpr size_t kTokens = 256, kHidden = 1024;
constexpr size_t kActElems = kTokens * kHidden;

using Slots = std::array<__nv_bfloat16*, kSlots>;

__global__ void forward_block(const __nv_bfloat16* x, __nv_bfloat16* y, size_t n, float w) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    y[i] = __float2bfloat16(__bfloat162float(x[i]) * w + 0.01f);
}
__global__ void backward_block(const __nv_bfloat16* gy, __nv_bfloat16* gx, size_t n, float w) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    gx[i] = __float2bfloat16(__bfloat162float(gy[i]) * w);
}
__global__ void fill_input(__nv_bfloat16* x, size_t n, int mb) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    x[i] = __float2bfloat16(0.001f * (float)((i + mb) % 97));
}

struct Stage {
  int rank = 0, size = 1;
  ncclComm_t comm;
  cudaStream_t stream;
  Slots in{}, out{};             // activations received / produced, per slot
  Slots grad_in{}, grad_out{};   // gradients sent back / received, per slot
  bool is_first() const { return rank == 0; }
  bool is_last() const { return rank == size - 1; }
};

void recv_activation(Stage& s, __nv_bfloat16* buf, int peer) {
  CK_NCCL(ncclRecv(buf, kActElems, ncclBfloat16, peer, s.comm, s.stream));
}

void send_activation(Stage& s, __nv_bfloat16* buf, int peer) {
  CK_NCCL(ncclSend(buf, kActElems, ncclBfloat16, peer, s.comm, s.stream));
}

// One group: this stage's output goes forward while the gradient of an earlier micro-batch comes back.
void send_forward_recv_backward(Stage& s, __nv_bfloat16* act, __nv_bfloat16* grad, int peer) {
  CK_NCCL(ncclGroupStart());
  CK_NCCL(ncclSend(act, kActElems, ncclBfloat16, peer, s.comm, s.stream));
  CK_NCCL(ncclRecv(grad, kActElems, ncclBfloat16, peer, s.comm, s.stream));
  CK_NCCL(ncclGroupEnd());
}

// One group: the input gradient goes back while the next micro-batch's activation arrives.
void send_backward_recv_forward(Stage& s, __nv_bfloat16* grad, __nv_bfloat16* act, int peer) {
  CK_NCCL(ncclGroupStart());
  CK_NCCL(ncclSend(grad, kActElems, ncclBfloat16, peer, s.comm, s.stream));
  CK_NCCL(ncclRecv(act, kActElems, ncclBfloat16, peer, s.comm, s.stream));
  CK_NCCL(ncclGroupEnd());
}

void forward_step(Stage& s, int mb) {
  const int slot = mb % kSlots;
  if (s.is_first()) fill_input<<<64, 256, 0, s.stream>>>(s.in[slot], kActElems, mb);
  forward_block<<<128, 256, 0, s.stream>>>(s.in[slot], s.out[slot], kActElems, 0.5f + 0.1f * s.rank);
}

void backward_step(Stage& s, int mb) {
  const int slot = mb % kSlots;
  // The last stage's loss gradient is its own output.
  const __nv_bfloat16* gy = s.is_last() ? s.out[slot] : s.grad_out[slot];
  backward_block<<<128, 256, 0, s.stream>>>(gy, s.grad_in[slot], kActElems, 0.5f + 0.1f * s.rank);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Stage s;
  MPI_Comm_rank(MPI_COMM_WORLD, &s.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &s.size);
  int ndev = 0;
  CK_CUDA(cudaGetDeviceCount(&ndev));
  CK_CUDA(cudaSetDevice(s.rank % ndev));
  const int micro_batches = argc > 1 ? atoi(argv[1]) : 8;

  ncclUniqueId uid;
  if (s.rank == 0) CK_NCCL(ncclGetUniqueId(&uid));
  MPI_Bcast(&uid, sizeof(uid), MPI_BYTE, 0, MPI_COMM_WORLD);
  CK_NCCL(ncclCommInitRank(&s.comm, s.size, uid, s.rank));
  CK_CUDA(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));

  for (int i = 0; i < kSlots; ++i) {
    CK_CUDA(cudaMalloc(&s.in[i], kActElems * sizeof(__nv_bfloat16)));
    CK_CUDA(cudaMalloc(&s.out[i], kActElems * sizeof(__nv_bfloat16)));
    CK_CUDA(cudaMalloc(&s.grad_in[i], kActElems * sizeof(__nv_bfloat16)));
    CK_CUDA(cudaMalloc(&s.grad_out[i], kActElems * sizeof(__nv_bfloat16)));
  }

  const int prev = s.rank - 1, next = s.rank + 1;
  int warmup = s.size - s.rank - 1;
  if (warmup > micro_batches) warmup = micro_batches;
  const int steady = micro_batches - warmup;

  // Warm-up forwards.
  for (int mb = 0; mb < warmup; ++mb) {
    if (!s.is_first()) recv_activation(s, s.in[mb % kSlots], prev);
    forward_step(s, mb);
    if (!s.is_last()) send_activation(s, s.out[mb % kSlots], next);
  }
  // The first steady forward's input.
  if (steady > 0 && !s.is_first()) recv_activation(s, s.in[warmup % kSlots], prev);

  // Steady state: forward micro-batch f, backward micro-batch b.
  for (int i = 0; i < steady; ++i) {
    const int f = warmup + i, b = i;
    forward_step(s, f);
    if (!s.is_last())
      send_forward_recv_backward(s, s.out[f % kSlots], s.grad_out[b % kSlots], next);
    backward_step(s, b);
    const bool more = i + 1 < steady;
    if (!s.is_first()) {
      if (more)
        send_backward_recv_forward(s, s.grad_in[b % kSlots], s.in[(f + 1) % kSlots], prev);
      else
        CK_NCCL(ncclSend(s.grad_in[b % kSlots], kActElems, ncclBfloat16, prev, s.comm, s.stream));
    }
  }

  // Cool-down backwards.
  for (int b = steady; b < micro_batches; ++b) {
    if (!s.is_last()) CK_NCCL(ncclRecv(s.grad_out[b % kSlots], kActElems, ncclBfloat16, next, s.comm, s.stream));
    backward_step(s, b);
    if (!s.is_first()) CK_NCCL(ncclSend(s.grad_in[b % kSlots], kActElems, ncclBfloat16, prev, s.comm, s.stream));
  }
  CK_CUDA(cudaStreamSynchronize(s.stream));

  __nv_bfloat16 probe;
  CK_CUDA(cudaMemcpy(&probe, s.grad_in[(micro_batches - 1) % kSlots], sizeof(probe), cudaMemcpyDeviceToHost));
  printf("stage %d of %d: %d micro-batches (%d warm-up), grad_in[0] = %f\n", s.rank, s.size, micro_batches, warmup,
         __bfloat162float(probe));

  for (int i = 0; i < kSlots; ++i) {
    CK_CUDA(cudaFree(s.in[i]));
    CK_CUDA(cudaFree(s.out[i]));
    CK_CUDA(cudaFree(s.grad_in[i]));
    CK_CUDA(cudaFree(s.grad_out[i]));
  }
  CK_CUDA(cudaStreamDestroy(s.stream));
  CK_NCCL(ncclCommDestroy(s.comm));
  MPI_Finalize();
  return 0;
}
