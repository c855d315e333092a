// Data-parallel attention with a tensor-parallel MLP (SGLang-style "DP attention"), one process per
// GPU, NCCL id through a shared file (no MPI). Every rank schedules its own decode batch (uneven,
// sometimes empty); before the MLP the ranks agree on the largest batch (int32 all-gather of the
// local counts, copied back to the host), pad to it, all-gather the hidden states, run their MLP
// shard and reduce-scatter back to their own tokens (bf16, sequence-parallel style). The MLP step
// is captured in a CUDA graph per padded batch size (1, 2, 4, ... 64) after a warm-up run and
// replayed; larger batches run eagerly. Buffers are views of one workspace allocation.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#define CK(expr)                                                                                       \
  do {                                                                                                 \
    auto _r = (expr);                                                                                  \
    if (!check_ok(_r, #expr, __LINE__)) std::exit(1);                                                  \
  } while (0)

static bool check_ok(cudaError_t e, const char* what, int line) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "line %d: %s -> %s\n", line, what, cudaGetErrorString(e));
  return false;
}
static bool check_ok(ncclResult_t e, const char* what, int line) {
  if (e == ncclSuccess) return true;
  std::fprintf(stderr, "line %d: %s -> %s\n", line, what, ncclGetErrorString(e));
  return false;
}

using bf16 = __nv_bfloat16;

constexpr int kHidden = 2048;
constexpr int kMaxLocalTokens = 128;
constexpr int kCaptureSizes[] = {1, 2, 4, 8, 16, 32, 64};

struct Workspace {
  bf16* base = nullptr;
  bf16* local_hidden;   // [kMaxLocalTokens, kHidden] this rank's tokens
  bf16* gathered;       // [world * kMaxLocalTokens, kHidden] everyone's, padded
  bf16* mlp_partial;    // [world * kMaxLocalTokens, kHidden] this rank's MLP shard output
  bf16* mlp_out;        // [kMaxLocalTokens, kHidden] reduced, this rank's tokens
  int* local_count;     // [1]
  int* all_counts;      // [world]
};

struct Ctx {
  int rank = 0, world = 1;
  ncclComm_t comm;
  cudaStream_t stream;
  Workspace ws;
  std::map<int, cudaGraphExec_t> graphs;
};

__global__ void attention_local(bf16* h, int tokens, int step, int rank) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < tokens * kHidden) h[i] = __float2bfloat16(0.001f * ((i + step + 3 * rank) % 512));
}
__global__ void zero_tail(bf16* h, int from_tokens, int to_tokens) {
  int i = from_tokens * kHidden + blockIdx.x * blockDim.x + threadIdx.x;
  if (i < to_tokens * kHidden) h[i] = __float2bfloat16(0.f);
}
__global__ void mlp_shard(bf16* out, const bf16* in, int n, int rank) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16(__bfloat162float(in[i]) * (0.5f + 0.125f * rank));
}

static int capture_bucket(int tokens) {
  for (int s : kCaptureSizes)
    if (tokens <= s) return s;
  return -1;  // too large: eager
}

// The MLP for `padded` tokens per rank: gather, shard, reduce-scatter. Graph-captured or eager.
static void mlp_step(Ctx& c, int padded) {
  const size_t per_rank = (size_t)padded * kHidden;
  CK(ncclAllGather(c.ws.local_hidden, c.ws.gathered, per_rank, ncclBfloat16, c.comm, c.stream));
  const int n = (int)(per_rank * c.world);
  mlp_shard<<<(n + 255) / 256, 256, 0, c.stream>>>(c.ws.mlp_partial, c.ws.gathered, n, c.rank);
  CK(ncclReduceScatter(c.ws.mlp_partial, c.ws.mlp_out, per_rank, ncclBfloat16, ncclSum, c.comm, c.stream));
}

static void capture_graphs(Ctx& c) {
  for (int bs : kCaptureSizes) {
    mlp_step(c, bs);  // warm-up outside the capture (lazy NCCL and kernel setup)
    CK(cudaStreamSynchronize(c.stream));
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(c.stream, cudaStreamCaptureModeThreadLocal));
    mlp_step(c, bs);
    CK(cudaStreamEndCapture(c.stream, &g));
    cudaGraphExec_t exec;
    CK(cudaGraphInstantiate(&exec, g, 0));
    CK(cudaGraphDestroy(g));
    c.graphs[bs] = exec;
  }
}

static ncclUniqueId exchange_id(int rank, const std::string& path) {
  ncclUniqueId id;
  if (rank == 0) {
    CK(ncclGetUniqueId(&id));
    std::ofstream tmp(path + ".tmp", std::ios::binary);
    tmp.write(reinterpret_cast<const char*>(&id), sizeof(id));
    tmp.close();
    std::rename((path + ".tmp").c_str(), path.c_str());
  } else {
    for (;;) {
      std::ifstream in(path, std::ios::binary);
      if (in && in.read(reinterpret_cast<char*>(&id), sizeof(id))) break;
      usleep(10000);
    }
  }
  return id;
}

int main(int argc, char** argv) {
  Ctx c;
  c.rank = std::atoi(std::getenv("RANK") ? std::getenv("RANK") : "0");
  c.world = std::atoi(std::getenv("WORLD_SIZE") ? std::getenv("WORLD_SIZE") : "1");
  const int steps = argc > 1 ? std::atoi(argv[1]) : 20;
  // The launcher names a fresh id file per job; a fixed path could hold a stale id.
  const char* env_id_file = std::getenv("NCCL_ID_FILE");
  const std::string id_file = env_id_file ? env_id_file : (argc > 2 ? argv[2] : "/tmp/dp_attn_nccl_id");
  CK(cudaSetDevice(c.rank));
  CK(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking));

  ncclUniqueId id = exchange_id(c.rank, id_file);
  CK(ncclCommInitRank(&c.comm, c.world, id, c.rank));

  // One allocation, carved in place.
  const size_t local = (size_t)kMaxLocalTokens * kHidden;
  const size_t total_elems = local + 2 * c.world * local + local;
  const size_t bytes = total_elems * sizeof(bf16) + 256 + c.world * sizeof(int) + 256;
  CK(cudaMalloc(reinterpret_cast<void**>(&c.ws.base), bytes));
  c.ws.local_hidden = c.ws.base;
  c.ws.gathered = c.ws.local_hidden + local;
  c.ws.mlp_partial = c.ws.gathered + c.world * local;
  c.ws.mlp_out = c.ws.mlp_partial + c.world * local;
  c.ws.local_count = reinterpret_cast<int*>(c.ws.mlp_out + local + 128);
  c.ws.all_counts = c.ws.local_count + 64;
  CK(cudaMemset(c.ws.base, 0, bytes));

  capture_graphs(c);

  std::vector<int> counts(c.world);
  float checksum = 0.f;
  for (int step = 0; step < steps; ++step) {
    // Each DP rank's own scheduler: uneven, and idle on some steps.
    const int mine = ((step + c.rank) % 6 == 0) ? 0 : (step * 17 + c.rank * 29) % kMaxLocalTokens;
    if (mine > 0) attention_local<<<(mine * kHidden + 255) / 256, 256, 0, c.stream>>>(c.ws.local_hidden, mine, step, c.rank);
    CK(cudaMemcpyAsync(c.ws.local_count, &mine, sizeof(int), cudaMemcpyHostToDevice, c.stream));
    CK(ncclAllGather(c.ws.local_count, c.ws.all_counts, 1, ncclInt32, c.comm, c.stream));
    CK(cudaMemcpyAsync(counts.data(), c.ws.all_counts, c.world * sizeof(int), cudaMemcpyDeviceToHost, c.stream));
    CK(cudaStreamSynchronize(c.stream));
    int max_tokens = 0;
    for (int n : counts) max_tokens = std::max(max_tokens, n);
    if (max_tokens == 0) continue;  // every rank idle: skip the MLP everywhere

    const int bucket = capture_bucket(max_tokens);
    const int padded = bucket > 0 ? bucket : max_tokens;
    if (padded > mine)
      zero_tail<<<((padded - mine) * kHidden + 255) / 256, 256, 0, c.stream>>>(c.ws.local_hidden, mine, padded);
    if (bucket > 0)
      CK(cudaGraphLaunch(c.graphs.at(bucket), c.stream));
    else
      mlp_step(c, padded);
    if (mine > 0) {
      bf16 v;
      CK(cudaMemcpyAsync(&v, c.ws.mlp_out, sizeof(v), cudaMemcpyDeviceToHost, c.stream));
      CK(cudaStreamSynchronize(c.stream));
      checksum += __bfloat162float(v);
    }
  }
  CK(cudaStreamSynchronize(c.stream));
  std::printf("rank %d checksum %.4f\n", c.rank, checksum);

  for (auto& [bs, exec] : c.graphs) CK(cudaGraphExecDestroy(exec));
  CK(cudaFree(c.ws.base));
  CK(ncclCommDestroy(c.comm));
  CK(cudaStreamDestroy(c.stream));
  return 0;
}
