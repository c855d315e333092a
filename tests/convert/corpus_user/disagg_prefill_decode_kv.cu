// Disaggregated serving, one prefill worker and one decode worker (mpirun -np 2): rank 0 runs the
// prompts, writes their KV blocks into its paged pool and ships them block run by block run to
// rank 1, which takes blocks from its own free list, receives into them and decodes. The two roles
// run different code; each allocates its own scratch (sized for its role), the paged KV pool is
// the same size on both so block ids mean the same thing. Requests per batch vary; a batch may be
// empty. bf16 KV, int32 first tokens, a final int64 sum of generated tokens across the workers.
#include <mpi.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <vector>

#define CUDA_CHECK(cmd)                                                                  \
  do {                                                                                   \
    cudaError_t err_ = (cmd);                                                            \
    if (err_ != cudaSuccess) {                                                           \
      fprintf(stderr, "[%s:%d] CUDA error %s\n", __FILE__, __LINE__, cudaGetErrorString(err_)); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                      \
    }                                                                                    \
  } while (0)
#define NCCL_CHECK(cmd)                                                                  \
  do {                                                                                   \
    ncclResult_t res_ = (cmd);                                                           \
    if (res_ != ncclSuccess) {                                                           \
      fprintf(stderr, "[%s:%d] NCCL error %s\n", __FILE__, __LINE__, ncclGetErrorString(res_)); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                      \
    }                                                                                    \
  } while (0)

namespace {

enum class Role { Prefill = 0, Decode = 1 };

constexpr int kLayers = 4;
constexpr int kKvHeads = 8;
constexpr int kHeadDim = 128;
constexpr int kBlockTokens = 16;
constexpr int kPrefillBlocks = 256;   // prefill only holds the prompts in flight
constexpr int kDecodeBlocks = 1024;   // decode holds every running sequence
constexpr int kMaxPrompt = 1024;
constexpr int kBatches = 6;
// One block holds K and V of kBlockTokens tokens for one layer.
constexpr size_t kBlockElems = 2ull * kBlockTokens * kKvHeads * kHeadDim;

struct KvPool {
  __nv_bfloat16* blocks = nullptr;  // [kLayers][num_blocks][kBlockElems]
  int num_blocks = 0;
  std::deque<int> free_list;

  __nv_bfloat16* block(int layer, int id) const {
    return blocks + ((size_t)layer * num_blocks + id) * kBlockElems;
  }
};

struct Request {
  int id;
  int prompt_len;
  std::vector<int> block_ids;
};

struct Worker {
  Role role;
  int rank;
  int peer;
  ncclComm_t comm;
  cudaStream_t stream;
  KvPool pool;
  int* first_tokens = nullptr;  // device, one per request of the batch
  float* scratch = nullptr;     // role-specific workspace
};

__global__ void prefill_attention_kernel(__nv_bfloat16* kv, int tokens, int layer, int req) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  size_t n = (size_t)tokens * 2 * kKvHeads * kHeadDim;
  if (i < n) kv[i] = __float2bfloat16(0.001f * (float)((i + 7 * layer + 13 * req) % 97));
}

__global__ void sample_first_token_kernel(int* out, int req, int prompt_len) {
  if (threadIdx.x == 0) out[req] = (prompt_len * 31 + req) % 32000;
}

__global__ void decode_step_kernel(const __nv_bfloat16* kv, float* acc, int tokens) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < (size_t)tokens * kHeadDim) atomicAdd(acc + (i % 256), __bfloat162float(kv[i]));
}

int blocks_for(int tokens) { return (tokens + kBlockTokens - 1) / kBlockTokens; }

// Both workers draw the same prompt lengths (same seed): the decode side knows what arrives.
std::vector<Request> make_batch(int batch_idx) {
  srand(1234 + batch_idx);
  const int n = (batch_idx == 3) ? 0 : 1 + rand() % 4;  // batch 3 is empty
  std::vector<Request> reqs;
  for (int r = 0; r < n; ++r) reqs.push_back(Request{batch_idx * 16 + r, 32 + rand() % (kMaxPrompt - 32), {}});
  return reqs;
}

bool take_blocks(KvPool& pool, Request& req) {
  const int need = blocks_for(req.prompt_len);
  if ((int)pool.free_list.size() < need) return false;
  for (int b = 0; b < need; ++b) {
    req.block_ids.push_back(pool.free_list.front());
    pool.free_list.pop_front();
  }
  return true;
}

void give_back(KvPool& pool, Request& req) {
  for (int b : req.block_ids) pool.free_list.push_back(b);
  req.block_ids.clear();
}

// One message per block and layer: the two pools number their blocks independently, so only the
// block count of a request (from its prompt length) is known to both ends.
void send_kv(Worker& w, const Request& req) {
  NCCL_CHECK(ncclGroupStart());
  for (int layer = 0; layer < kLayers; ++layer)
    for (int id : req.block_ids)
      NCCL_CHECK(ncclSend(w.pool.block(layer, id), kBlockElems, ncclBfloat16, w.peer, w.comm, w.stream));
  NCCL_CHECK(ncclGroupEnd());
}

void recv_kv(Worker& w, const Request& req) {
  NCCL_CHECK(ncclGroupStart());
  for (int layer = 0; layer < kLayers; ++layer)
    for (int id : req.block_ids)
      NCCL_CHECK(ncclRecv(w.pool.block(layer, id), kBlockElems, ncclBfloat16, w.peer, w.comm, w.stream));
  NCCL_CHECK(ncclGroupEnd());
}

long long run_prefill(Worker& w) {
  long long prompt_tokens = 0;
  for (int b = 0; b < kBatches; ++b) {
    std::vector<Request> batch = make_batch(b);
    if (batch.empty()) continue;  // nothing scheduled: the decode worker skips it too
    for (size_t r = 0; r < batch.size(); ++r) {
      Request& req = batch[r];
      if (!take_blocks(w.pool, req)) {
        fprintf(stderr, "prefill: pool exhausted\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
      }
      for (int layer = 0; layer < kLayers; ++layer) {
        // The prompt's KV lands block by block (the last one partly filled).
        for (size_t k = 0; k < req.block_ids.size(); ++k) {
          const int tokens = std::min(kBlockTokens, req.prompt_len - (int)k * kBlockTokens);
          const size_t n = (size_t)tokens * 2 * kKvHeads * kHeadDim;
          prefill_attention_kernel<<<(unsigned)((n + 255) / 256), 256, 0, w.stream>>>(
              w.pool.block(layer, req.block_ids[k]), tokens, layer, req.id);
        }
      }
      sample_first_token_kernel<<<1, 32, 0, w.stream>>>(w.first_tokens, (int)r, req.prompt_len);
      send_kv(w, req);
      prompt_tokens += req.prompt_len;
    }
    NCCL_CHECK(ncclSend(w.first_tokens, batch.size(), ncclInt32, w.peer, w.comm, w.stream));
    CUDA_CHECK(cudaStreamSynchronize(w.stream));
    for (Request& req : batch) give_back(w.pool, req);
  }
  return prompt_tokens;
}

long long run_decode(Worker& w, int decode_steps) {
  long long generated = 0;
  std::vector<int> h_tokens(16);
  for (int b = 0; b < kBatches; ++b) {
    std::vector<Request> batch = make_batch(b);
    if (batch.empty()) continue;
    for (Request& req : batch) {
      if (!take_blocks(w.pool, req)) {
        fprintf(stderr, "decode: pool exhausted\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
      }
      recv_kv(w, req);
    }
    NCCL_CHECK(ncclRecv(w.first_tokens, batch.size(), ncclInt32, w.peer, w.comm, w.stream));
    CUDA_CHECK(cudaMemsetAsync(w.scratch, 0, 256 * sizeof(float), w.stream));
    for (int step = 0; step < decode_steps; ++step)
      for (const Request& req : batch)
        for (int layer = 0; layer < kLayers; ++layer) {
          const int tokens = std::min(req.prompt_len, kBlockTokens);
          decode_step_kernel<<<(tokens * kHeadDim + 255) / 256, 256, 0, w.stream>>>(
              w.pool.block(layer, req.block_ids[0]), w.scratch, tokens);
        }
    CUDA_CHECK(cudaMemcpyAsync(h_tokens.data(), w.first_tokens, batch.size() * sizeof(int), cudaMemcpyDeviceToHost,
                               w.stream));
    CUDA_CHECK(cudaStreamSynchronize(w.stream));
    printf("decode batch %d: %zu requests, first token of #0 = %d\n", b, batch.size(), h_tokens[0]);
    generated += (long long)batch.size() * (decode_steps + 1);
    for (Request& req : batch) give_back(w.pool, req);
  }
  return generated;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world != 2) {
    if (rank == 0) fprintf(stderr, "run with exactly 2 ranks (prefill, decode)\n");
    MPI_Finalize();
    return 1;
  }
  const int decode_steps = argc > 1 ? atoi(argv[1]) : 8;

  Worker w;
  w.role = rank == 0 ? Role::Prefill : Role::Decode;
  w.rank = rank;
  w.peer = 1 - rank;
  CUDA_CHECK(cudaSetDevice(rank));
  CUDA_CHECK(cudaStreamCreateWithFlags(&w.stream, cudaStreamNonBlocking));

  ncclUniqueId id;
  if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  NCCL_CHECK(ncclCommInitRank(&w.comm, world, id, rank));

  w.pool.num_blocks = w.role == Role::Prefill ? kPrefillBlocks : kDecodeBlocks;
  const size_t pool_bytes = (size_t)kLayers * w.pool.num_blocks * kBlockElems * sizeof(__nv_bfloat16);
  CUDA_CHECK(cudaMalloc(&w.pool.blocks, pool_bytes));
  for (int b = 0; b < w.pool.num_blocks; ++b) w.pool.free_list.push_back(b);
  CUDA_CHECK(cudaMalloc(&w.first_tokens, 16 * sizeof(int)));
  // Prefill keeps a larger activation scratch than decode.
  const size_t scratch_floats = w.role == Role::Prefill ? (size_t)kMaxPrompt * kHeadDim : 256;
  CUDA_CHECK(cudaMalloc(&w.scratch, scratch_floats * sizeof(float)));

  long long mine = 0;
  if (w.role == Role::Prefill)
    mine = run_prefill(w);
  else
    mine = run_decode(w, decode_steps);

  long long* d_total = nullptr;
  CUDA_CHECK(cudaMalloc(&d_total, sizeof(long long)));
  CUDA_CHECK(cudaMemcpy(d_total, &mine, sizeof(long long), cudaMemcpyHostToDevice));
  NCCL_CHECK(ncclAllReduce(d_total, d_total, 1, ncclInt64, ncclSum, w.comm, w.stream));
  long long total = 0;
  CUDA_CHECK(cudaMemcpyAsync(&total, d_total, sizeof(long long), cudaMemcpyDeviceToHost, w.stream));
  CUDA_CHECK(cudaStreamSynchronize(w.stream));
  printf("rank %d (%s): own %lld, prompt+generated tokens %lld\n", rank,
         w.role == Role::Prefill ? "prefill" : "decode", mine, total);

  CUDA_CHECK(cudaFree(d_total));
  CUDA_CHECK(cudaFree(w.scratch));
  CUDA_CHECK(cudaFree(w.first_tokens));
  CUDA_CHECK(cudaFree(w.pool.blocks));
  NCCL_CHECK(ncclCommDestroy(w.comm));
  CUDA_CHECK(cudaStreamDestroy(w.stream));
  MPI_Finalize();
  return 0;
}
