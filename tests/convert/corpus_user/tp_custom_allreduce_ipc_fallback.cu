// Tensor-parallel decode loop of a serving engine (mpirun -np 2..8 on one node), fp16.
// All-reduces go through a one-shot custom all-reduce over CUDA IPC for small messages (decode
// batches) and through NCCL above a size threshold (prefill chunks), chosen per call at run time
// from the message size, as vLLM/TensorRT-LLM do. The activation workspace is one cudaMalloc
// arena whose base is exported to the peers with cudaIpcGetMemHandle, so the custom kernel reads
// the peers' inputs in place (no staging copy); the same arena views are what NCCL gets when the
// message is too large. The batch size changes every step (continuous batching) and is zero on
// idle steps; logits are vocab-parallel and all-gathered; the sampled ids are broadcast.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CUDACHECK(cmd)                                                                              \
  do {                                                                                              \
    cudaError_t e = cmd;                                                                            \
    if (e != cudaSuccess) {                                                                         \
      printf("Failed: Cuda error %s:%d '%s'\n", __FILE__, __LINE__, cudaGetErrorString(e));         \
      exit(EXIT_FAILURE);                                                                           \
    }                                                                                               \
  } while (0)
#define NCCLCHECK(cmd)                                                                              \
  do {                                                                                              \
    ncclResult_t r = cmd;                                                                           \
    if (r != ncclSuccess) {                                                                         \
      printf("Failed, NCCL error %s:%d '%s'\n", __FILE__, __LINE__, ncclGetErrorString(r));         \
      exit(EXIT_FAILURE);                                                                           \
    }                                                                                               \
  } while (0)

constexpr int kMaxRanks = 8;
constexpr size_t kCustomArMaxBytes = 512 * 1024;  // above this NCCL is faster

struct RankPtrs {
  half* ptrs[kMaxRanks];
};

// Flags for the custom kernel's barrier, one per (block, rank); also IPC-shared.
struct Signal {
  volatile int flag[64][kMaxRanks];
};

struct ModelDims {
  int hidden = 4096;
  int vocab = 32000;
  int layers = 8;
  int max_batch = 256;
};

struct Activations {
  half* hidden_states;  // [max_batch, hidden]
  half* attn_out;       // [max_batch, hidden]
  half* mlp_out;        // [max_batch, hidden]
  half* logits_shard;   // [max_batch, vocab / tp]
  half* logits;         // [tp, max_batch, vocab / tp]
};

__global__ void one_shot_allreduce(RankPtrs in, half* out, Signal** signals, int rank, int world, int n, int epoch) {
  // Barrier: tell every peer this rank's input is ready, wait for theirs.
  if (threadIdx.x < world) {
    signals[threadIdx.x]->flag[blockIdx.x][rank] = epoch;
    while (signals[rank]->flag[blockIdx.x][threadIdx.x] != epoch) {
    }
  }
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    float acc = 0.f;
    for (int r = 0; r < world; ++r) acc += __half2float(in.ptrs[r][i]);
    out[i] = __float2half(acc);
  }
}

__global__ void fake_attention(half* out, const half* x, int n, int layer) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2half(0.5f * __half2float(x[i]) + 0.01f * (layer + 1));
}
__global__ void fake_mlp(half* out, const half* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2half(__half2float(x[i]) * 0.25f);
}
__global__ void add_residual(half* h, const half* delta, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) h[i] = __hadd(h[i], delta[i]);
}
__global__ void lm_head_shard(half* logits, const half* h, int batch, int vocab_shard, int hidden, int rank) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < batch * vocab_shard) logits[i] = __float2half(__half2float(h[(i / vocab_shard) * hidden]) + 0.001f * ((i + rank) % 7));
}
__global__ void greedy_sample(int* ids, const half* logits, int batch, int vocab_shard, int tp, int max_batch) {
  int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  float best = -1e30f;
  int best_id = 0;
  for (int r = 0; r < tp; ++r)
    for (int v = 0; v < vocab_shard; ++v) {
      float x = __half2float(logits[((size_t)r * max_batch + b) * vocab_shard + v]);
      if (x > best) { best = x; best_id = r * vocab_shard + v; }
    }
  ids[b] = best_id;
}

class CustomAllreduce {
 public:
  CustomAllreduce(int rank, int world, char* arena, size_t arena_bytes) : rank_(rank), world_(world), arena_(arena) {
    // Export the arena and a signal block; map every peer's.
    cudaIpcMemHandle_t mine;
    CUDACHECK(cudaIpcGetMemHandle(&mine, arena));
    std::vector<cudaIpcMemHandle_t> all(world);
    MPI_Allgather(&mine, sizeof(mine), MPI_BYTE, all.data(), sizeof(mine), MPI_BYTE, MPI_COMM_WORLD);
    for (int r = 0; r < world; ++r) {
      if (r == rank) { peer_arena_[r] = arena; continue; }
      void* p = nullptr;
      CUDACHECK(cudaIpcOpenMemHandle(&p, all[r], cudaIpcMemLazyEnablePeerAccess));
      peer_arena_[r] = static_cast<char*>(p);
    }
    CUDACHECK(cudaMalloc(&signal_, sizeof(Signal)));
    CUDACHECK(cudaMemset(signal_, 0, sizeof(Signal)));
    cudaIpcMemHandle_t sig;
    CUDACHECK(cudaIpcGetMemHandle(&sig, signal_));
    MPI_Allgather(&sig, sizeof(sig), MPI_BYTE, all.data(), sizeof(sig), MPI_BYTE, MPI_COMM_WORLD);
    std::vector<Signal*> sigs(world);
    for (int r = 0; r < world; ++r) {
      if (r == rank) { sigs[r] = signal_; continue; }
      void* p = nullptr;
      CUDACHECK(cudaIpcOpenMemHandle(&p, all[r], cudaIpcMemLazyEnablePeerAccess));
      sigs[r] = static_cast<Signal*>(p);
    }
    CUDACHECK(cudaMalloc(&d_signals_, world * sizeof(Signal*)));
    CUDACHECK(cudaMemcpy(d_signals_, sigs.data(), world * sizeof(Signal*), cudaMemcpyHostToDevice));
    (void)arena_bytes;
  }
  ~CustomAllreduce() {
    for (int r = 0; r < world_; ++r)
      if (r != rank_) cudaIpcCloseMemHandle(peer_arena_[r]);
    cudaFree(d_signals_);
    cudaFree(signal_);
  }

  bool should_use(size_t bytes) const { return world_ <= kMaxRanks && bytes <= kCustomArMaxBytes && bytes % 16 == 0; }

  // `inp` lies in the arena: every peer reads it at the same offset in its mapping.
  void run(half* inp, half* out, int n, cudaStream_t stream) {
    RankPtrs in;
    const size_t offset = reinterpret_cast<char*>(inp) - arena_;
    for (int r = 0; r < world_; ++r) in.ptrs[r] = reinterpret_cast<half*>(peer_arena_[r] + offset);
    ++epoch_;
    one_shot_allreduce<<<16, 512, 0, stream>>>(in, out, d_signals_, rank_, world_, n, epoch_);
  }

 private:
  int rank_, world_;
  char* arena_;
  std::array<char*, kMaxRanks> peer_arena_{};
  Signal* signal_ = nullptr;
  Signal** d_signals_ = nullptr;
  int epoch_ = 0;
};

struct TpGroup {
  int rank, size;
  ncclComm_t nccl;
  CustomAllreduce* custom;
  cudaStream_t stream;
};

// The engine's all-reduce entry point: custom kernel for small messages, NCCL otherwise. Every
// rank sees the same batch, so every rank takes the same path.
void tensor_model_parallel_all_reduce(TpGroup& tp, half* x, half* scratch, size_t count) {
  if (count == 0) return;
  const size_t bytes = count * sizeof(half);
  if (tp.custom->should_use(bytes)) {
    tp.custom->run(x, scratch, (int)count, tp.stream);
    CUDACHECK(cudaMemcpyAsync(x, scratch, bytes, cudaMemcpyDeviceToDevice, tp.stream));
  } else {
    NCCLCHECK(ncclAllReduce(x, x, count, ncclFloat16, ncclSum, tp.nccl, tp.stream));
  }
}

int main(int argc, char* argv[]) {
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  CUDACHECK(cudaSetDevice(rank));
  const int steps = argc > 1 ? atoi(argv[1]) : 16;

  ModelDims dims;
  const int vocab_shard = dims.vocab / nranks;
  const size_t act = (size_t)dims.max_batch * dims.hidden;

  // One arena for every activation, carved by offsets.
  std::array<size_t, 6> sizes = {act, act, act, (size_t)dims.max_batch * vocab_shard,
                                 (size_t)nranks * dims.max_batch * vocab_shard, act};
  size_t arena_elems = 0;
  std::array<size_t, 6> offsets{};
  for (size_t i = 0; i < sizes.size(); ++i) {
    offsets[i] = arena_elems;
    arena_elems += (sizes[i] + 127) / 128 * 128;
  }
  half* arena = nullptr;
  CUDACHECK(cudaMalloc(&arena, arena_elems * sizeof(half)));
  CUDACHECK(cudaMemset(arena, 0, arena_elems * sizeof(half)));
  Activations a;
  a.hidden_states = arena + offsets[0];
  a.attn_out = arena + offsets[1];
  a.mlp_out = arena + offsets[2];
  a.logits_shard = arena + offsets[3];
  a.logits = arena + offsets[4];
  half* ar_scratch = arena + offsets[5];

  int* sampled = nullptr;
  CUDACHECK(cudaMalloc(&sampled, dims.max_batch * sizeof(int)));

  ncclUniqueId id;
  if (rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  TpGroup tp;
  tp.rank = rank;
  tp.size = nranks;
  NCCLCHECK(ncclCommInitRank(&tp.nccl, nranks, id, rank));
  CUDACHECK(cudaStreamCreate(&tp.stream));
  tp.custom = new CustomAllreduce(rank, nranks, reinterpret_cast<char*>(arena), arena_elems * sizeof(half));

  std::vector<int> host_ids(dims.max_batch);
  for (int step = 0; step < steps; ++step) {
    // The scheduler (rank 0) decides the batch; a prefill chunk every 5th step, idle every 7th.
    int batch = 0;
    if (rank == 0) batch = (step % 7 == 6) ? 0 : (step % 5 == 0 ? dims.max_batch : 1 + (step * 13) % 48);
    MPI_Bcast(&batch, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (batch == 0) continue;
    const int n = batch * dims.hidden;
    const int blocks = (n + 255) / 256;
    for (int l = 0; l < dims.layers; ++l) {
      fake_attention<<<blocks, 256, 0, tp.stream>>>(a.attn_out, a.hidden_states, n, l);
      tensor_model_parallel_all_reduce(tp, a.attn_out, ar_scratch, n);
      add_residual<<<blocks, 256, 0, tp.stream>>>(a.hidden_states, a.attn_out, n);
      fake_mlp<<<blocks, 256, 0, tp.stream>>>(a.mlp_out, a.hidden_states, n);
      tensor_model_parallel_all_reduce(tp, a.mlp_out, ar_scratch, n);
      add_residual<<<blocks, 256, 0, tp.stream>>>(a.hidden_states, a.mlp_out, n);
    }
    const int ln = batch * vocab_shard;
    lm_head_shard<<<(ln + 255) / 256, 256, 0, tp.stream>>>(a.logits_shard, a.hidden_states, batch, vocab_shard, dims.hidden, rank);
    // Gather with the max-batch stride so rank r's shard sits at a fixed place.
    NCCLCHECK(ncclAllGather(a.logits_shard, a.logits, (size_t)dims.max_batch * vocab_shard, ncclFloat16, tp.nccl, tp.stream));
    if (rank == 0) greedy_sample<<<(batch + 127) / 128, 128, 0, tp.stream>>>(sampled, a.logits, batch, vocab_shard, nranks, dims.max_batch);
    NCCLCHECK(ncclBroadcast(sampled, sampled, batch, ncclInt32, 0, tp.nccl, tp.stream));
    CUDACHECK(cudaMemcpyAsync(host_ids.data(), sampled, batch * sizeof(int), cudaMemcpyDeviceToHost, tp.stream));
    CUDACHECK(cudaStreamSynchronize(tp.stream));
    if (rank == nranks - 1) printf("step %d batch %d first id %d\n", step, batch, host_ids[0]);
  }

  delete tp.custom;
  CUDACHECK(cudaFree(sampled));
  CUDACHECK(cudaFree(arena));
  NCCLCHECK(ncclCommDestroy(tp.nccl));
  CUDACHECK(cudaStreamDestroy(tp.stream));
  MPI_Finalize();
  return 0;
}
