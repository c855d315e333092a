// Pipeline-parallel decode (one stage per GPU, mpirun -np N) with the per-stage step captured in a
// CUDA graph per padded batch size, send/recv included, as engines that graph the whole decode step
// do: stage 0 embeds the last tokens and sends the hidden states on, middle stages receive, run
// their layers and send, the last stage samples and sends the token ids back to stage 0. Batch
// sizes change every step (requests join and finish) and are padded to the captured sizes; a step
// with no running request is skipped by every stage (the scheduler's decision is broadcast).
// fp16 activations, int32 token ids, a final float max of the per-stage step time.
//
// The ring of token ids: stage 0's step k receives the ids the last stage sent at the end of step
// k - 1, so the last stage sends once before the first step (the prime, which stage 0's first step
// receives) and stage 0 receives once after the last step (the drain). The ids always travel as
// kMaxBatch ints: a send and its receive need the same count, and consecutive steps have
// different batches. One eager step runs before the capture: NCCL connects peers on the host at a
// rank's first send/recv to each, pairing it with the peer's first, which inside the capture would
// pair stage 0's receive with the last stage's receive; and the capture is thread-local, since
// NCCL's own threads make CUDA calls (buffer registration for the graph) while it runs.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unordered_map>
#include <utility>

#define CUDA_TRY(call)                                                                     \
  do {                                                                                     \
    const cudaError_t st = call;                                                           \
    if (st != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(st)); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                        \
    }                                                                                      \
  } while (0)
#define NCCL_TRY(call)                                                                     \
  do {                                                                                     \
    const ncclResult_t st = call;                                                          \
    if (st != ncclSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, ncclGetErrorString(st)); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                        \
    }                                                                                      \
  } while (0)

namespace pp {

constexpr int kHidden = 4096;
constexpr int kLayersPerStage = 4;
constexpr int kMaxBatch = 64;
constexpr int kGraphBatchSizes[] = {1, 2, 4, 8, 16, 32, 64};

struct StageBuffers {
  half* hidden_in = nullptr;   // received from the previous stage (or embedded on stage 0)
  half* hidden_out = nullptr;  // sent to the next stage
  int* token_ids = nullptr;    // last stage -> stage 0
};

struct Stage {
  int index = 0, count = 1;
  ncclComm_t comm;
  cudaStream_t stream;
  StageBuffers buf;
  std::unordered_map<int, cudaGraphExec_t> graphs;

  bool first() const { return index == 0; }
  bool last() const { return index == count - 1; }
};

__global__ void embed(half* h, const int* ids, int batch) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < batch * kHidden) h[i] = __float2half(0.001f * ((ids[i / kHidden] + i) % 1000));
}
__global__ void decoder_layer(half* out, const half* in, int n, int layer) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2half(__half2float(in[i]) * 0.9f + 0.001f * layer);
}
__global__ void sample(int* ids, const half* h, int batch) {
  int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b < batch) ids[b] = (int)(__half2float(h[(size_t)b * kHidden]) * 1000.f) % 32000;
}

// One decode step of this stage for `batch` (padded) sequences.
void stage_step(Stage& s, int batch) {
  const int n = batch * kHidden;
  const int grid = (n + 255) / 256;
  if (s.first()) {
    NCCL_TRY(ncclRecv(s.buf.token_ids, kMaxBatch, ncclInt32, s.count - 1, s.comm, s.stream));
    embed<<<grid, 256, 0, s.stream>>>(s.buf.hidden_in, s.buf.token_ids, batch);
  } else {
    NCCL_TRY(ncclRecv(s.buf.hidden_in, n, ncclFloat16, s.index - 1, s.comm, s.stream));
  }
  // Ping-pong between the two buffers; an even layer count leaves the result in hidden_in.
  static_assert(kLayersPerStage % 2 == 0, "result must land in hidden_in");
  half* x = s.buf.hidden_in;
  half* y = s.buf.hidden_out;
  for (int l = 0; l < kLayersPerStage; ++l) {
    decoder_layer<<<grid, 256, 0, s.stream>>>(y, x, n, l);
    std::swap(x, y);
  }
  if (s.last()) {
    sample<<<(batch + 63) / 64, 64, 0, s.stream>>>(s.buf.token_ids, s.buf.hidden_in, batch);
    NCCL_TRY(ncclSend(s.buf.token_ids, kMaxBatch, ncclInt32, 0, s.comm, s.stream));
  } else {
    NCCL_TRY(ncclSend(s.buf.hidden_in, n, ncclFloat16, s.index + 1, s.comm, s.stream));
  }
}

int padded_batch(int batch) {
  for (int bs : kGraphBatchSizes)
    if (batch <= bs) return bs;
  return kMaxBatch;
}

void capture_all(Stage& s) {
  for (int bs : kGraphBatchSizes) {
    cudaGraph_t graph;
    CUDA_TRY(cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeThreadLocal));
    stage_step(s, bs);
    CUDA_TRY(cudaStreamEndCapture(s.stream, &graph));
    CUDA_TRY(cudaGraphInstantiate(&s.graphs[bs], graph, 0));
    CUDA_TRY(cudaGraphDestroy(graph));
  }
}

}  // namespace pp

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  pp::Stage s;
  MPI_Comm_rank(MPI_COMM_WORLD, &s.index);
  MPI_Comm_size(MPI_COMM_WORLD, &s.count);
  if (s.count < 2) {
    std::fprintf(stderr, "needs at least 2 stages\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  const int steps = argc > 1 ? std::atoi(argv[1]) : 32;
  const bool use_graphs = !(argc > 2 && std::string(argv[2]) == "--eager");
  CUDA_TRY(cudaSetDevice(s.index));
  CUDA_TRY(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));

  ncclUniqueId id;
  if (s.index == 0) NCCL_TRY(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  NCCL_TRY(ncclCommInitRank(&s.comm, s.count, id, s.index));

  const size_t act_bytes = (size_t)pp::kMaxBatch * pp::kHidden * sizeof(half);
  CUDA_TRY(cudaMalloc(&s.buf.hidden_in, act_bytes));
  CUDA_TRY(cudaMalloc(&s.buf.hidden_out, act_bytes));
  CUDA_TRY(cudaMalloc(&s.buf.token_ids, pp::kMaxBatch * sizeof(int)));
  CUDA_TRY(cudaMemset(s.buf.token_ids, 0, pp::kMaxBatch * sizeof(int)));

  // The last stage primes the ring: stage 0's first step receives these "previous" token ids.
  if (s.last()) NCCL_TRY(ncclSend(s.buf.token_ids, pp::kMaxBatch, ncclInt32, 0, s.comm, s.stream));
  // Warm-up: one eager step connects every stage to its peers before anything is captured.
  pp::stage_step(s, pp::kGraphBatchSizes[0]);
  CUDA_TRY(cudaStreamSynchronize(s.stream));
  if (use_graphs) pp::capture_all(s);

  float slowest_ms = 0.f;
  for (int step = 0; step < steps; ++step) {
    int running = 0;
    if (s.index == 0) running = (step % 9 == 8) ? 0 : 1 + (step * 11) % pp::kMaxBatch;
    MPI_Bcast(&running, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (running == 0) continue;
    const int batch = pp::padded_batch(running);
    const auto t0 = std::chrono::steady_clock::now();
    if (use_graphs)
      CUDA_TRY(cudaGraphLaunch(s.graphs.at(batch), s.stream));
    else
      pp::stage_step(s, batch);
    CUDA_TRY(cudaStreamSynchronize(s.stream));
    const float ms = std::chrono::duration<float, std::milli>(std::chrono::steady_clock::now() - t0).count();
    slowest_ms = std::max(slowest_ms, ms);
  }
  // Drain the ids the last stage sent at the end of the final step.
  if (s.first()) NCCL_TRY(ncclRecv(s.buf.token_ids, pp::kMaxBatch, ncclInt32, s.count - 1, s.comm, s.stream));

  float* d_ms = nullptr;
  CUDA_TRY(cudaMalloc(&d_ms, sizeof(float)));
  CUDA_TRY(cudaMemcpy(d_ms, &slowest_ms, sizeof(float), cudaMemcpyHostToDevice));
  NCCL_TRY(ncclAllReduce(d_ms, d_ms, 1, ncclFloat32, ncclMax, s.comm, s.stream));
  CUDA_TRY(cudaMemcpy(&slowest_ms, d_ms, sizeof(float), cudaMemcpyDeviceToHost));
  if (s.index == 0) std::printf("slowest stage step: %.3f ms\n", slowest_ms);

  for (auto& [bs, exec] : s.graphs) CUDA_TRY(cudaGraphExecDestroy(exec));
  CUDA_TRY(cudaFree(d_ms));
  CUDA_TRY(cudaFree(s.buf.token_ids));
  CUDA_TRY(cudaFree(s.buf.hidden_out));
  CUDA_TRY(cudaFree(s.buf.hidden_in));
  NCCL_TRY(ncclCommDestroy(s.comm));
  MPI_Finalize();
  return 0;
}
