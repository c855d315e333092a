// Expert-parallel MoE layer of an inference engine (one expert group per GPU, mpirun -np N):
// the router counts tokens per destination rank on the device, the counts go through an int32
// all-to-all and are copied back with cudaMemcpy, the host computes offsets, and the tokens travel
// as fp8 (e4m3) with one float scale each through grouped ncclSend/ncclRecv with per-peer counts
// (zero for some peers, and a rank may have no tokens at all in a step). The expert outputs come
// back in bf16 the same way. Every buffer is a view into one preallocated workspace arena carved
// with aligned offsets at start-up (sized for the worst case), as serving engines do to keep
// allocations out of the step.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <nccl.h>
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <vector>

#define CHECK_CUDA(x)                                                                            \
  do {                                                                                           \
    cudaError_t status = (x);                                                                    \
    if (status != cudaSuccess) {                                                                 \
      std::fprintf(stderr, "CUDA failure %s at %s:%d\n", cudaGetErrorString(status), __FILE__, __LINE__); \
      std::abort();                                                                              \
    }                                                                                            \
  } while (false)

#define CHECK_NCCL(x)                                                                            \
  do {                                                                                           \
    ncclResult_t status = (x);                                                                   \
    if (status != ncclSuccess) {                                                                 \
      std::fprintf(stderr, "NCCL failure %s at %s:%d\n", ncclGetErrorString(status), __FILE__, __LINE__); \
      std::abort();                                                                              \
    }                                                                                            \
  } while (false)

using fp8_t = __nv_fp8_e4m3;
using bf16_t = __nv_bfloat16;

struct MoeConfig {
  int hidden = 2048;
  int max_tokens_per_rank = 512;  // largest decode batch a rank schedules
  int top_k = 2;
  int steps = 12;
};

// Views into the arena; offsets are fixed at start-up, so the pointers never change.
struct MoeBuffers {
  int32_t* send_counts;      // [world] tokens this rank sends to each rank
  int32_t* recv_counts;      // [world] tokens each rank sends here
  int32_t* route;            // [max_tokens * top_k] destination rank of each (token, slot)
  fp8_t* dispatch_send;      // [max_tokens * top_k * hidden]
  fp8_t* dispatch_recv;      // [world * max_tokens * top_k * hidden]
  float* scale_send;         // [max_tokens * top_k]
  float* scale_recv;         // [world * max_tokens * top_k]
  bf16_t* expert_out;        // [world * max_tokens * top_k * hidden]
  bf16_t* combine_recv;      // [max_tokens * top_k * hidden]
  int64_t* expert_load;      // [world] tokens served per rank, summed over steps
};

class Arena {
 public:
  explicit Arena(size_t bytes) : capacity_(bytes) { CHECK_CUDA(cudaMalloc(&base_, bytes)); }
  ~Arena() { cudaFree(base_); }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  size_t reserve(size_t bytes) {
    const size_t at = (used_ + 255) & ~size_t(255);
    if (at + bytes > capacity_) {
      std::fprintf(stderr, "arena too small: %zu + %zu > %zu\n", at, bytes, capacity_);
      std::abort();
    }
    used_ = at + bytes;
    return at;
  }
  char* base() const { return base_; }
  size_t used() const { return used_; }

 private:
  char* base_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;
};

__global__ void route_tokens(int32_t* route, int32_t* send_counts, int tokens, int top_k, int world, int step, int rank) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= tokens * top_k) return;
  int dst = (t * 7 + step * 3 + rank) % world;
  if (step % 4 == 1) dst = 0;  // a hot expert: every token goes to rank 0 this step
  route[t] = dst;
  atomicAdd(&send_counts[dst], 1);
}

__global__ void quantize_permute(fp8_t* out, float* scales, const int32_t* route, const int32_t* offsets, int32_t* cursor,
                                 int tokens, int top_k, int hidden, int rank) {
  int slot = blockIdx.x;
  if (slot >= tokens * top_k) return;
  __shared__ int pos;
  if (threadIdx.x == 0) pos = offsets[route[slot]] + atomicAdd(&cursor[route[slot]], 1);
  __syncthreads();
  const float amax = 4.0f;
  for (int h = threadIdx.x; h < hidden; h += blockDim.x) {
    float v = 0.01f * (float)((slot * 13 + h + rank) % 200) - 1.0f;
    out[(size_t)pos * hidden + h] = fp8_t(v * (448.0f / amax));
  }
  if (threadIdx.x == 0) scales[pos] = amax / 448.0f;
}

__global__ void expert_ffn(bf16_t* out, const fp8_t* in, const float* scales, int rows, int hidden) {
  int r = blockIdx.x;
  if (r >= rows) return;
  for (int h = threadIdx.x; h < hidden; h += blockDim.x)
    out[(size_t)r * hidden + h] = __float2bfloat16(2.0f * float(in[(size_t)r * hidden + h]) * scales[r]);
}

__global__ void count_load(int64_t* load, const int32_t* recv_counts, int world) {
  int p = threadIdx.x;
  if (p < world) atomicAdd(reinterpret_cast<unsigned long long*>(&load[0]), (unsigned long long)recv_counts[p]);
}

static std::vector<int> exclusive_scan(const std::vector<int>& counts) {
  std::vector<int> offs(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) offs[i] = offs[i - 1] + counts[i - 1];
  return offs;
}

int main(int argc, char* argv[]) {
  MPI_Init(&argc, &argv);
  int rank, world;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int local_rank = 0;
  if (const char* lr = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK")) local_rank = std::atoi(lr);
  CHECK_CUDA(cudaSetDevice(local_rank));

  MoeConfig cfg;
  if (argc > 1) cfg.steps = std::atoi(argv[1]);
  const size_t slots = (size_t)cfg.max_tokens_per_rank * cfg.top_k;
  const size_t h = cfg.hidden;

  ncclUniqueId uid;
  if (rank == 0) CHECK_NCCL(ncclGetUniqueId(&uid));
  MPI_Bcast(&uid, sizeof(uid), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t ep_comm;
  CHECK_NCCL(ncclCommInitRank(&ep_comm, world, uid, rank));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  // Carve the arena: offsets first, pointers once the base exists.
  Arena arena(256ull << 20);
  const size_t o_send_counts = arena.reserve(world * sizeof(int32_t));
  const size_t o_recv_counts = arena.reserve(world * sizeof(int32_t));
  const size_t o_route = arena.reserve(slots * sizeof(int32_t));
  const size_t o_disp_send = arena.reserve(slots * h * sizeof(fp8_t));
  const size_t o_disp_recv = arena.reserve(world * slots * h * sizeof(fp8_t));
  const size_t o_scale_send = arena.reserve(slots * sizeof(float));
  const size_t o_scale_recv = arena.reserve(world * slots * sizeof(float));
  const size_t o_expert_out = arena.reserve(world * slots * h * sizeof(bf16_t));
  const size_t o_combine = arena.reserve(slots * h * sizeof(bf16_t));
  const size_t o_load = arena.reserve(world * sizeof(int64_t));
  MoeBuffers buf;
  buf.send_counts = reinterpret_cast<int32_t*>(arena.base() + o_send_counts);
  buf.recv_counts = reinterpret_cast<int32_t*>(arena.base() + o_recv_counts);
  buf.route = reinterpret_cast<int32_t*>(arena.base() + o_route);
  buf.dispatch_send = reinterpret_cast<fp8_t*>(arena.base() + o_disp_send);
  buf.dispatch_recv = reinterpret_cast<fp8_t*>(arena.base() + o_disp_recv);
  buf.scale_send = reinterpret_cast<float*>(arena.base() + o_scale_send);
  buf.scale_recv = reinterpret_cast<float*>(arena.base() + o_scale_recv);
  buf.expert_out = reinterpret_cast<bf16_t*>(arena.base() + o_expert_out);
  buf.combine_recv = reinterpret_cast<bf16_t*>(arena.base() + o_combine);
  buf.expert_load = reinterpret_cast<int64_t*>(arena.base() + o_load);
  CHECK_CUDA(cudaMemset(buf.expert_load, 0, world * sizeof(int64_t)));

  int32_t* d_offsets = nullptr;  // small scratch outside the arena
  CHECK_CUDA(cudaMalloc(&d_offsets, 2 * world * sizeof(int32_t)));
  int32_t* d_cursor = d_offsets + world;

  std::vector<int> h_send(world), h_recv(world);
  for (int step = 0; step < cfg.steps; ++step) {
    // Continuous batching: the number of tokens differs per rank and per step, sometimes zero.
    const int tokens = (step % 5 == 3 && rank == world - 1) ? 0 : (37 * (rank + 1) + 11 * step) % cfg.max_tokens_per_rank;
    const int routed = tokens * cfg.top_k;

    CHECK_CUDA(cudaMemsetAsync(buf.send_counts, 0, world * sizeof(int32_t), stream));
    if (routed > 0)
      route_tokens<<<(routed + 127) / 128, 128, 0, stream>>>(buf.route, buf.send_counts, tokens, cfg.top_k, world, step, rank);
    CHECK_NCCL(ncclAlltoAll(buf.send_counts, buf.recv_counts, 1, ncclInt32, ep_comm, stream));
    CHECK_CUDA(cudaMemcpyAsync(h_send.data(), buf.send_counts, world * sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
    CHECK_CUDA(cudaMemcpyAsync(h_recv.data(), buf.recv_counts, world * sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));

    const std::vector<int> send_off = exclusive_scan(h_send);
    const std::vector<int> recv_off = exclusive_scan(h_recv);
    const int recv_total = std::accumulate(h_recv.begin(), h_recv.end(), 0);

    CHECK_CUDA(cudaMemcpyAsync(d_offsets, send_off.data(), world * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
    CHECK_CUDA(cudaMemsetAsync(d_cursor, 0, world * sizeof(int32_t), stream));
    if (routed > 0)
      quantize_permute<<<routed, 256, 0, stream>>>(buf.dispatch_send, buf.scale_send, buf.route, d_offsets, d_cursor, tokens,
                                                  cfg.top_k, cfg.hidden, rank);

    // Dispatch: fp8 payload and its scales, skipping empty pairs on both sides.
    CHECK_NCCL(ncclGroupStart());
    for (int peer = 0; peer < world; ++peer) {
      if (h_send[peer] > 0) {
        CHECK_NCCL(ncclSend(buf.dispatch_send + (size_t)send_off[peer] * h, (size_t)h_send[peer] * h, ncclFloat8e4m3, peer,
                            ep_comm, stream));
        CHECK_NCCL(ncclSend(buf.scale_send + send_off[peer], h_send[peer], ncclFloat32, peer, ep_comm, stream));
      }
      if (h_recv[peer] > 0) {
        CHECK_NCCL(ncclRecv(buf.dispatch_recv + (size_t)recv_off[peer] * h, (size_t)h_recv[peer] * h, ncclFloat8e4m3, peer,
                            ep_comm, stream));
        CHECK_NCCL(ncclRecv(buf.scale_recv + recv_off[peer], h_recv[peer], ncclFloat32, peer, ep_comm, stream));
      }
    }
    CHECK_NCCL(ncclGroupEnd());

    if (recv_total > 0)
      expert_ffn<<<recv_total, 256, 0, stream>>>(buf.expert_out, buf.dispatch_recv, buf.scale_recv, recv_total, cfg.hidden);
    count_load<<<1, 32, 0, stream>>>(buf.expert_load + rank, buf.recv_counts, world);

    // Combine: the reverse exchange, bf16, counts swapped.
    CHECK_NCCL(ncclGroupStart());
    for (int peer = 0; peer < world; ++peer) {
      if (h_recv[peer] > 0)
        CHECK_NCCL(ncclSend(buf.expert_out + (size_t)recv_off[peer] * h, (size_t)h_recv[peer] * h, ncclBfloat16, peer, ep_comm,
                            stream));
      if (h_send[peer] > 0)
        CHECK_NCCL(ncclRecv(buf.combine_recv + (size_t)send_off[peer] * h, (size_t)h_send[peer] * h, ncclBfloat16, peer, ep_comm,
                            stream));
    }
    CHECK_NCCL(ncclGroupEnd());
  }

  // Expert load of every rank, for the balancer: each rank wrote its own slot.
  CHECK_NCCL(ncclAllReduce(buf.expert_load, buf.expert_load, world, ncclInt64, ncclSum, ep_comm, stream));
  std::vector<int64_t> load(world);
  CHECK_CUDA(cudaMemcpyAsync(load.data(), buf.expert_load, world * sizeof(int64_t), cudaMemcpyDeviceToHost, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  if (rank == 0)
    for (int r = 0; r < world; ++r) std::printf("expert rank %d served %lld tokens\n", r, (long long)load[r]);
  bf16_t probe;
  CHECK_CUDA(cudaMemcpy(&probe, buf.combine_recv, sizeof(bf16_t), cudaMemcpyDeviceToHost));
  std::printf("rank %d combine[0] = %f (arena used %zu MiB)\n", rank, __bfloat162float(probe), arena.used() >> 20);

  CHECK_CUDA(cudaFree(d_offsets));
  CHECK_NCCL(ncclCommDestroy(ep_comm));
  CHECK_CUDA(cudaStreamDestroy(stream));
  MPI_Finalize();
  return 0;
}
