// Interleaved pipeline-parallel training step, as users write it with a stream per direction:
// activations flow forward on `fwd_stream`, gradients flow back on `bwd_stream`, so a rank can
// still be sending activations while it receives its first gradients. One pair of p2p helpers
// (`send_tensor`, `recv_tensor`, each its own NCCL group) serves both directions and is called with
// either stream. MPI bootstrap, fp16 activations, events order compute against communication.
// Each rank prints a checksum of its last outputs and gradients.
#include <mpi.h>
#include <nccl.h>
#include <cuda_fp16.h>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CUDA_OK(x)                                                                         \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      fprintf(stderr, "CUDA %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__);   \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                        \
    }                                                                                      \
  } while (0)
#define NCCL_OK(x)                                                                         \
  do {                                                                                     \
    ncclResult_t r_ = (x);                                                                 \
    if (r_ != ncclSuccess) {                                                               \
      fprintf(stderr, "NCCL %s at %s:%d\n", ncclGetErrorString(r_), __FILE__, __LINE__);   \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                        \
    }                                                                                      \
  } while (0)

static const int kMicroBatches = 6;
static const int kChunks = 2;  // model chunks per rank (interleaved pipeline)
static const size_t kActElems = 256 * 1024;

__global__ void forward_layer(const __half* x, __half* y, size_t n, float scale) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    y[i] = __float2half(tanhf(__half2float(x[i]) * scale + 0.05f));
}

__global__ void backward_layer(const __half* gy, const __half* y, __half* gx, size_t n, float scale) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float t = __half2float(y[i]);
    gx[i] = __float2half(__half2float(gy[i]) * (1.f - t * t) * scale);
  }
}

__global__ void fill_input(__half* x, size_t n, int micro, int rank) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    x[i] = __float2half(0.001f * (float)((i * 7 + micro * 13 + rank) % 1000) - 0.5f);
}

// The helpers every pipeline code base grows: one NCCL group per transfer, the caller's stream.
static void send_tensor(const __half* buf, size_t n, int peer, ncclComm_t comm, cudaStream_t stream) {
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclSend(buf, n, ncclHalf, peer, comm, stream));
  NCCL_OK(ncclGroupEnd());
}

static void recv_tensor(__half* buf, size_t n, int peer, ncclComm_t comm, cudaStream_t stream) {
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclRecv(buf, n, ncclHalf, peer, comm, stream));
  NCCL_OK(ncclGroupEnd());
}

struct StageBuffers {
  std::vector<__half*> act_in, act_out, grad_in, grad_out;
};

static void alloc_stage(StageBuffers& b) {
  for (int m = 0; m < kMicroBatches; ++m) {
    __half* p;
    CUDA_OK(cudaMalloc(&p, kActElems * sizeof(__half)));
    b.act_in.push_back(p);
    CUDA_OK(cudaMalloc(&p, kActElems * sizeof(__half)));
    b.act_out.push_back(p);
    CUDA_OK(cudaMalloc(&p, kActElems * sizeof(__half)));
    b.grad_in.push_back(p);
    CUDA_OK(cudaMalloc(&p, kActElems * sizeof(__half)));
    b.grad_out.push_back(p);
  }
}

static void free_stage(StageBuffers& b) {
  for (int m = 0; m < kMicroBatches; ++m) {
    CUDA_OK(cudaFree(b.act_in[m]));
    CUDA_OK(cudaFree(b.act_out[m]));
    CUDA_OK(cudaFree(b.grad_in[m]));
    CUDA_OK(cudaFree(b.grad_out[m]));
  }
}

static double checksum(const __half* dev, size_t n) {
  std::vector<__half> h(n);
  CUDA_OK(cudaMemcpy(h.data(), dev, n * sizeof(__half), cudaMemcpyDeviceToHost));
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += (double)__half2float(h[i]) * (double)((i % 17) + 1);
  return s;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world < 2) {  // a one-rank "pipeline" would send to itself across two NCCL groups
    if (rank == 0) fprintf(stderr, "run with at least 2 ranks\n");
    MPI_Finalize();
    return 1;
  }
  int devices = 0;
  CUDA_OK(cudaGetDeviceCount(&devices));
  CUDA_OK(cudaSetDevice(rank % devices));

  ncclUniqueId id;
  if (rank == 0) NCCL_OK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  NCCL_OK(ncclCommInitRank(&comm, world, id, rank));

  cudaStream_t compute, fwd_stream, bwd_stream;
  CUDA_OK(cudaStreamCreate(&compute));
  CUDA_OK(cudaStreamCreate(&fwd_stream));
  CUDA_OK(cudaStreamCreate(&bwd_stream));
  std::vector<cudaEvent_t> act_ready(kMicroBatches), grad_ready(kMicroBatches), received(kMicroBatches),
      grad_received(kMicroBatches);
  for (int m = 0; m < kMicroBatches; ++m) {
    CUDA_OK(cudaEventCreateWithFlags(&act_ready[m], cudaEventDisableTiming));
    CUDA_OK(cudaEventCreateWithFlags(&grad_ready[m], cudaEventDisableTiming));
    CUDA_OK(cudaEventCreateWithFlags(&received[m], cudaEventDisableTiming));
    CUDA_OK(cudaEventCreateWithFlags(&grad_received[m], cudaEventDisableTiming));
  }

  // Interleaved schedule: this rank holds model chunks c = 0..kChunks-1, virtual stage
  // v = c * world + rank; stage v receives from v - 1 (the previous rank) and sends to v + 1.
  StageBuffers b[kChunks];
  for (int c = 0; c < kChunks; ++c) alloc_stage(b[c]);
  const int prev = (rank - 1 + world) % world, next = (rank + 1) % world;
  const int stages = kChunks * world;

  // Forward of every micro-batch through this rank's chunks, transfers on the forward stream.
  for (int m = 0; m < kMicroBatches; ++m)
    for (int c = 0; c < kChunks; ++c) {
      const int v = c * world + rank;
      const float scale = 0.9f + 0.01f * v;
      if (v == 0) {
        fill_input<<<256, 256, 0, compute>>>(b[c].act_in[m], kActElems, m, rank);
      } else {
        recv_tensor(b[c].act_in[m], kActElems, prev, comm, fwd_stream);
        CUDA_OK(cudaEventRecord(received[m], fwd_stream));
        CUDA_OK(cudaStreamWaitEvent(compute, received[m], 0));
      }
      forward_layer<<<256, 256, 0, compute>>>(b[c].act_in[m], b[c].act_out[m], kActElems, scale);
      CUDA_OK(cudaEventRecord(act_ready[m], compute));
      if (v != stages - 1) {
        CUDA_OK(cudaStreamWaitEvent(fwd_stream, act_ready[m], 0));
        send_tensor(b[c].act_out[m], kActElems, next, comm, fwd_stream);
      }
    }
  // Backward in reverse order; gradients flow to the previous stage on the backward stream (the
  // same helpers, the other stream), while the forward stream may still be sending.
  for (int m = kMicroBatches - 1; m >= 0; --m)
    for (int c = kChunks - 1; c >= 0; --c) {
      const int v = c * world + rank;
      const float scale = 0.9f + 0.01f * v;
      if (v == stages - 1) {
        CUDA_OK(cudaMemcpyAsync(b[c].grad_in[m], b[c].act_out[m], kActElems * sizeof(__half), cudaMemcpyDeviceToDevice,
                                compute));
      } else {
        recv_tensor(b[c].grad_in[m], kActElems, next, comm, bwd_stream);
        CUDA_OK(cudaEventRecord(grad_received[m], bwd_stream));
        CUDA_OK(cudaStreamWaitEvent(compute, grad_received[m], 0));
      }
      backward_layer<<<256, 256, 0, compute>>>(b[c].grad_in[m], b[c].act_out[m], b[c].grad_out[m], kActElems, scale);
      CUDA_OK(cudaEventRecord(grad_ready[m], compute));
      if (v != 0) {
        CUDA_OK(cudaStreamWaitEvent(bwd_stream, grad_ready[m], 0));
        send_tensor(b[c].grad_out[m], kActElems, prev, comm, bwd_stream);
      }
    }
  CUDA_OK(cudaStreamSynchronize(fwd_stream));
  CUDA_OK(cudaStreamSynchronize(bwd_stream));
  CUDA_OK(cudaStreamSynchronize(compute));

  double out_sum = 0, grad_sum = 0;
  for (int c = 0; c < kChunks; ++c)
    for (int m = 0; m < kMicroBatches; ++m) {
      out_sum += checksum(b[c].act_out[m], kActElems);
      grad_sum += checksum(b[c].grad_out[m], kActElems);
    }
  printf("rank %d: forward checksum %.6e, gradient checksum %.6e\n", rank, out_sum, grad_sum);

  for (int c = 0; c < kChunks; ++c) free_stage(b[c]);
  for (int m = 0; m < kMicroBatches; ++m) {
    cudaEventDestroy(act_ready[m]);
    cudaEventDestroy(grad_ready[m]);
    cudaEventDestroy(received[m]);
    cudaEventDestroy(grad_received[m]);
  }
  cudaStreamDestroy(compute);
  cudaStreamDestroy(fwd_stream);
  cudaStreamDestroy(bwd_stream);
  ncclCommDestroy(comm);
  MPI_Finalize();
  return 0;
}
