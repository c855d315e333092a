// moe.cuh -- the frozen MoE workload (expert parallelism: dispatch, expert compute, combine),
// shared by seed.cu and gen0.cu.
//
// CONTRACT (shown to the LLM as documentation)
//   Shape from the size (moe_routing.hpp): size = T*10000 + E*10 + skew. P ranks, E routed experts
//   spread evenly (rank r holds experts [r*El, (r+1)*El), El = E/P), top-8 routing, hidden
//   H = 7168, intermediate I = 2048 per expert, SwiGLU. DeepSeek-V3's layer is E = 256.
//   Buffers (row-major; all symmetric NCCL windows, so peers may read or write them over LSA):
//     "x"           Input  T x H bf16: this rank's tokens.
//     "route_seed"  Input  kSeedWords u32: this rank's routing bits (fresh every trial).
//     "w13"         Input  El x 2I x H bf16: per local expert, gate rows [0, I) then up rows [I, 2I).
//     "w2"          Input  El x H x I bf16: per local expert, the down projection.
//     "y"           Output T x H bf16: this rank's combined tokens. Verified on every rank.
//     "topk_ids"    Intermediate T x 8 i32, "topk_weights" T x 8 f32: written by route().
//   Every run() starts by routing its tokens: route(ctx, stream) (one small kernel; it reads rank
//   0's seed words for the trial's hot rank), or the same moe::route_token() inside its own kernel.
//   The math, per token t of this rank and pick k (expert e = topk_ids[t][k], gate g):
//     h  = kAlphaUp * x[t] . w13_e^T          (2I values: gate part h_g, up part h_u)
//     a  = bf16( silu(h_g) * h_u )            (I values; the down GEMM's input is bf16)
//     o  = kAlphaDown * a . w2_e^T            (H values)
//     y[t] = bf16( sum_k g * o )              (fp32 sum)
//   The alphas keep every stage at unit scale (inputs are uniform in [-1, 1)). Rounding h or o to
//   bf16 on the way is allowed (expert_forward does); the reference keeps them in fp32, so correct
//   programs differ from it by a bf16 rounding error carried through the down GEMM: on 2 x H200 the
//   worst of ~30 M outputs was 0.024 off (every program, the seed included), so atol = 0.05 (twice
//   that tail) with rtol = 0.02. One pick's share of y is g * o ~ 0.3, so a dropped expert, a wrong
//   gate or a stale output still fails by far.
//   Expert compute: expert_forward(ExpertGemm&, stream, blocks, ...) runs the SwiGLU expert on
//   row blocks of an expert-major buffer: cuBLAS grouped GEMM (cublasGemmGroupedBatchedEx, one
//   group per block) when this cuBLAS supports it for bf16, else one cublasGemmEx per block.
//   Reference: no expert parallelism and no exchange: each rank routes its own tokens on the host
//   (all ranks' seed words all-gathered), and multiplies them by every expert they picked, reading
//   that expert's weights where they lie (a peer's window over NVLink), fp32 out; y summed in fp32.
//   Baseline (host-driven, the seed's strategy): route, pack by expert, ncclAlltoAll of counts,
//   counts to the host, grouped ncclSend/ncclRecv of the rows, permute to expert-major, expert
//   GEMMs, permute back, grouped ncclSend/ncclRecv back, weighted sum.
//   Compute alone: the expert compute of the rows this rank receives in one fixed draw of the
//   trial's routing distribution (moe::bound_draw_picks: same T, E, skew; counted on the host at
//   set-up), replayed as a CUDA graph, so neither routing, the count exchange, a host round trip
//   nor cuBLAS's host-side launch cost is in it (a program hides those behind its exchange; a
//   bound that carried them measured above the whole seed at T = 128 on 4 ranks). Communication
//   alone: both exchanges of that draw (rows there and back), no GEMM. The harness times every
//   phase as the slowest rank, so bound = max(expert compute of the most loaded rank, its exchange).
//   At 1 rank everything is local: the exchanges are NCCL copies to self, the skew has no rank
//   to favour, and the figure is the expert compute plus local data movement.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "braid/harness.cuh"
#include "moe_routing.hpp"

namespace moe {

using braid::dev::Buffer;
using braid::dev::BufferSpec;
using braid::dev::Context;
using braid::dev::DeviceError;
using braid::dev::DType;
using braid::dev::Problem;
using braid::dev::Role;
using bf16 = __nv_bfloat16;

inline void check_cublas(cublasStatus_t st, const char* what, const char* file, int line) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw DeviceError(braid::dev::format_location(file, line) + ": " + what + ": " + cublasGetStatusString(st));
}
#define MOE_CUBLAS(call) ::moe::check_cublas((call), #call, __FILE__, __LINE__)

// E[(silu(h) * u)^2] for h, u ~ N(0, 1): 0.356 (Monte Carlo), so the down projection's alpha
// brings o back to unit variance.
inline float alpha_up(int64_t H) { return 3.0f / std::sqrt((float)H); }
inline float alpha_down(int64_t I) { return std::sqrt(3.0f / (0.356f * (float)I)); }

inline Shape shape_of(const Problem& p) {
  Shape s;
  const std::string why = decode_size(p.size, p.world, &s);
  if (!why.empty()) throw DeviceError("moe: " + why);
  return s;
}
inline Shape shape_of(const Context& c) { return shape_of(c.problem); }

// ---------------------------------------------------------------------------------------------
// Kernels shared by the programs (templates so every translation unit gets its own copy)
// ---------------------------------------------------------------------------------------------

// One thread per token: topk ids and gate weights. Rank 0's words give the trial's hot rank.
template <int kUnused = 0>
__global__ void route_kernel(ncclWindow_t seed_win, Shape s, int32_t* ids, float* gates) {
  __shared__ uint32_t mine[kSeedWords], first[kSeedWords];
  if (threadIdx.x < kSeedWords) {
    mine[threadIdx.x] = static_cast<const uint32_t*>(ncclGetLocalPointer(seed_win, 0))[threadIdx.x];
    first[threadIdx.x] = static_cast<const volatile uint32_t*>(ncclGetLsaPointer(seed_win, 0, 0))[threadIdx.x];
  }
  __syncthreads();
  const int hot = hot_rank(first, s.world);
  for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < s.tokens; t += (int64_t)gridDim.x * blockDim.x)
    route_token(mine, hot, t, s, ids + t * kTopK, gates + t * kTopK);
}

// Plan of a pack by global expert (expert-major = destination-major): counts[e], offsets[e]
// (exclusive prefix) and slot[p] of every pick p = t*8+k. One CTA; cursors in shared memory.
template <int kUnused = 0>
__global__ void __launch_bounds__(1024) plan_kernel(const int32_t* ids, int64_t pairs, int experts, int32_t* counts, int32_t* offsets,
                                                    int32_t* slot) {
  extern __shared__ int32_t sm[];  // counts[experts], cursor[experts]
  int32_t* cnt = sm;
  int32_t* cur = sm + experts;
  for (int e = threadIdx.x; e < experts; e += blockDim.x) cnt[e] = 0;
  __syncthreads();
  for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) atomicAdd(&cnt[ids[p]], 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t run = 0;
    for (int e = 0; e < experts; ++e) {
      cur[e] = run;
      run += cnt[e];
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < experts; e += blockDim.x) {
    counts[e] = cnt[e];
    offsets[e] = cur[e];
  }
  __syncthreads();
  for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) slot[p] = atomicAdd(&cur[ids[p]], 1);
}
inline void launch_plan(cudaStream_t s, const int32_t* ids, int64_t pairs, int experts, int32_t* counts, int32_t* offsets, int32_t* slot) {
  plan_kernel<><<<1, 1024, 2 * experts * sizeof(int32_t), s>>>(ids, pairs, experts, counts, offsets, slot);
  BRAID_LAUNCHED();
}

// dst[slot[p]] = x[p / 8] for every pick: one warp per pick, 16-byte accesses.
template <int kUnused = 0>
__global__ void pack_rows_kernel(const bf16* x, const int32_t* slot, int64_t pairs, int64_t H, bf16* dst) {
  const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
  const int lane = threadIdx.x % 32;
  const int64_t vec = H / 8;  // int4 = 8 bf16
  for (int64_t p = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32; p < pairs; p += warps) {
    const int4* src = reinterpret_cast<const int4*>(x + (p / kTopK) * H);
    int4* d = reinterpret_cast<int4*>(dst + (int64_t)slot[p] * H);
    for (int64_t v = lane; v < vec; v += 32) d[v] = src[v];
  }
}
inline void launch_pack_rows(cudaStream_t s, const bf16* x, const int32_t* slot, int64_t pairs, int64_t H, bf16* dst) {
  if (pairs <= 0) return;
  pack_rows_kernel<><<<(unsigned)std::min<int64_t>((pairs + 7) / 8, 4096), 256, 0, s>>>(x, slot, pairs, H, dst);
  BRAID_LAUNCHED();
}

// A contiguous run of rows moved from one buffer position to another (permutes between
// source-major and expert-major layouts).
struct RowMove {
  int64_t src_row, dst_row, rows;
};
template <int kUnused = 0>
__global__ void move_rows_kernel(const RowMove* moves, const bf16* src, bf16* dst, int64_t H) {
  const RowMove m = moves[blockIdx.y];
  const int64_t vec = m.rows * H / 8;
  const int4* s = reinterpret_cast<const int4*>(src + m.src_row * H);
  int4* d = reinterpret_cast<int4*>(dst + m.dst_row * H);
  for (int64_t v = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; v < vec; v += (int64_t)gridDim.x * blockDim.x) d[v] = s[v];
}

// y[t] = bf16(sum_k g[t,k] * ret[slot[t*8+k]]), fp32 sum in k order. One CTA per token.
template <int kUnused = 0>
__global__ void combine_kernel(const bf16* ret, const int32_t* slot, const float* gates, int64_t T, int64_t H, bf16* y) {
  for (int64_t t = blockIdx.x; t < T; t += gridDim.x) {
    int32_t rows[kTopK];
    float g[kTopK];
#pragma unroll
    for (int k = 0; k < kTopK; ++k) {
      rows[k] = slot[t * kTopK + k];
      g[k] = gates[t * kTopK + k];
    }
    for (int64_t h = threadIdx.x * 2; h < H; h += blockDim.x * 2) {
      float2 acc = make_float2(0.f, 0.f);
#pragma unroll
      for (int k = 0; k < kTopK; ++k) {
        const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(ret + (int64_t)rows[k] * H + h));
        acc.x += g[k] * v.x;
        acc.y += g[k] * v.y;
      }
      *reinterpret_cast<__nv_bfloat162*>(y + t * H + h) = __floats2bfloat162_rn(acc.x, acc.y);
    }
  }
}
inline void launch_combine(cudaStream_t s, const bf16* ret, const int32_t* slot, const float* gates, int64_t T, int64_t H, bf16* y) {
  combine_kernel<><<<(unsigned)std::min<int64_t>(T, 8192), 256, 0, s>>>(ret, slot, gates, T, H, y);
  BRAID_LAUNCHED();
}

// a[r, i] = bf16(silu(h[r, i]) * h[r, I + i]) for the rows of each block (blockIdx.y).
struct RowBlock {
  int64_t row0, rows;
};
__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(bf16 v) { return __bfloat162float(v); }
template <typename In>
__global__ void swiglu_kernel(const RowBlock* blocks, const In* h, bf16* a, int64_t I) {
  const RowBlock b = blocks[blockIdx.y];
  const int64_t n = b.rows * I;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = b.row0 + i / I, c = i % I;
    const float g = to_f32(h[r * 2 * I + c]), u = to_f32(h[r * 2 * I + I + c]);
    a[r * I + c] = __float2bfloat16(g / (1.0f + __expf(-g)) * u);
  }
}

// ---------------------------------------------------------------------------------------------
// Expert compute: SwiGLU experts on row blocks of expert-major buffers
// ---------------------------------------------------------------------------------------------

// One block of rows that all go through local expert `expert`; rows [row0, row0 + rows) of the
// input, the h (rows x 2I), a (rows x I) and output (rows x H) scratch.
struct ExpertBlock {
  int expert;
  int64_t row0, rows;
};

// cuBLAS handle, the grouped-GEMM pointer arrays (device + pinned staging) and the SwiGLU block
// table. One per stream that computes experts (a ring of staging slots: a run() may issue up to
// kSlots expert_forward calls before the host waits on the stream).
class ExpertGemm {
 public:
  static constexpr int kSlots = 16;
  // Auto: the grouped call below kAutoGroupedBelowRows rows per block, one cublasGemmEx per block
  // from there (one H200, H 7168, I 2048: grouped 141 / 150 / 152 TFLOP/s at 64 / 256 / 512 rows
  // per block, per block 90 / 251 / 312).
  enum class Path { Grouped, PerBlock, Auto };
  static constexpr int64_t kAutoGroupedBelowRows = 128;

  void create(int max_blocks, Path wanted, int sm_target = 0) {
    max_blocks_ = std::max(1, max_blocks);
    MOE_CUBLAS(cublasCreate(&handle_));
    if (sm_target > 0) MOE_CUBLAS(cublasSetSmCountTarget(handle_, sm_target));
    const size_t slot_bytes = slot_bytes_for(max_blocks_);
    BRAID_CUDA(cudaMalloc(&dev_, slot_bytes * kSlots));
    BRAID_CUDA(cudaMallocHost(&host_, slot_bytes * kSlots));
    path_ = wanted == Path::PerBlock || !grouped_supported() ? Path::PerBlock : wanted;
  }
  void destroy() {
    if (handle_ != nullptr) cublasDestroy(handle_);
    if (dev_ != nullptr) cudaFree(dev_);
    if (host_ != nullptr) cudaFreeHost(host_);
    handle_ = nullptr;
    dev_ = nullptr;
    host_ = nullptr;
  }
  cublasHandle_t handle() const { return handle_; }
  Path path() const { return path_; }

  // out = expert(in) for every block; h and a are scratch laid out like in (row-aligned).
  void forward(cudaStream_t s, const std::vector<ExpertBlock>& blocks, const bf16* in, const bf16* w13, const bf16* w2, bf16* h, bf16* a,
               bf16* out, int64_t H, int64_t I) {
    std::vector<ExpertBlock> live;
    for (const ExpertBlock& b : blocks)
      if (b.rows > 0) live.push_back(b);
    if (live.empty()) return;
    if ((int)live.size() > max_blocks_) throw DeviceError("moe: expert_forward: more blocks than ExpertGemm was created for");
    MOE_CUBLAS(cublasSetStream(handle_, s));
    const int n = (int)live.size();
    char* hslot = host_ + slot_bytes_for(max_blocks_) * (size_t)slot_;
    char* dslot = dev_ + slot_bytes_for(max_blocks_) * (size_t)slot_;
    slot_ = (slot_ + 1) % kSlots;
    // Staging layout: 6 pointer arrays (A1, B1, C1, A2, B2, C2) then the SwiGLU blocks.
    const void** ptrs = reinterpret_cast<const void**>(hslot);
    RowBlock* rb = reinterpret_cast<RowBlock*>(hslot + 6 * sizeof(void*) * (size_t)max_blocks_);
    for (int i = 0; i < n; ++i) {
      const ExpertBlock& b = live[(size_t)i];
      ptrs[0 * max_blocks_ + i] = w13 + (int64_t)b.expert * 2 * I * H;
      ptrs[1 * max_blocks_ + i] = in + b.row0 * H;
      ptrs[2 * max_blocks_ + i] = h + b.row0 * 2 * I;
      ptrs[3 * max_blocks_ + i] = w2 + (int64_t)b.expert * H * I;
      ptrs[4 * max_blocks_ + i] = a + b.row0 * I;
      ptrs[5 * max_blocks_ + i] = out + b.row0 * H;
      rb[i] = RowBlock{b.row0, b.rows};
    }
    BRAID_CUDA(cudaMemcpyAsync(dslot, hslot, slot_bytes_for(max_blocks_), cudaMemcpyHostToDevice, s));
    auto dptr = [&](int which) { return reinterpret_cast<void**>(dslot) + (size_t)which * max_blocks_; };
    const float a1 = alpha_up(H), a2 = alpha_down(I);
    gemm(s, live, 2 * I, H, a1, ptrs, dptr(0), dptr(1), dptr(2), 0);
    swiglu_kernel<bf16><<<dim3(64, (unsigned)n), 256, 0, s>>>(reinterpret_cast<const RowBlock*>(dslot + 6 * sizeof(void*) * (size_t)max_blocks_), h,
                                                              a, I);
    BRAID_LAUNCHED();
    gemm(s, live, H, I, a2, ptrs, dptr(3), dptr(4), dptr(5), 3);
  }

 private:
  static size_t slot_bytes_for(int blocks) { return (6 * sizeof(void*) + sizeof(RowBlock)) * (size_t)blocks; }

  // C_b (rows x N, row-major) = alpha * In_b (rows x K) * W_b^T (W_b: N x K) for every block.
  void gemm(cudaStream_t, const std::vector<ExpertBlock>& live, int64_t N, int64_t K, float alpha, const void** host_ptrs, void** A, void** B,
            void** C, int base) {
    const int n = (int)live.size();
    const float zero = 0.0f;
    int64_t rows = 0;
    for (const ExpertBlock& b : live) rows += b.rows;
    if (path_ == Path::Grouped || (path_ == Path::Auto && rows < kAutoGroupedBelowRows * n)) {
      std::vector<cublasOperation_t> ta((size_t)n, CUBLAS_OP_T), tb((size_t)n, CUBLAS_OP_N);
      std::vector<int> m((size_t)n, (int)N), nn((size_t)n), k((size_t)n, (int)K), lda((size_t)n, (int)K), ldb((size_t)n, (int)K),
          ldc((size_t)n, (int)N), size((size_t)n, 1);
      std::vector<float> al((size_t)n, alpha), be((size_t)n, zero);
      for (int i = 0; i < n; ++i) nn[(size_t)i] = (int)live[(size_t)i].rows;
      MOE_CUBLAS(cublasGemmGroupedBatchedEx(handle_, ta.data(), tb.data(), m.data(), nn.data(), k.data(), al.data(), A, CUDA_R_16BF, lda.data(), B,
                                            CUDA_R_16BF, ldb.data(), be.data(), C, CUDA_R_16BF, ldc.data(), n, size.data(),
                                            CUBLAS_COMPUTE_32F));
    } else {
      for (int i = 0; i < n; ++i)
        MOE_CUBLAS(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)live[(size_t)i].rows, (int)K, &alpha,
                                host_ptrs[(size_t)(base + 0) * max_blocks_ + i], CUDA_R_16BF, (int)K, host_ptrs[(size_t)(base + 1) * max_blocks_ + i],
                                CUDA_R_16BF, (int)K, &zero, const_cast<void*>(host_ptrs[(size_t)(base + 2) * max_blocks_ + i]), CUDA_R_16BF,
                                (int)N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
  }

  // Whether cublasGemmGroupedBatchedEx takes bf16 in/out with fp32 compute here (a 2-group probe).
  bool grouped_supported() {
    const int n = 16;
    void* buf = nullptr;
    BRAID_CUDA(cudaMalloc(&buf, 3 * 2 * n * n * sizeof(bf16) + 6 * sizeof(void*)));
    BRAID_CUDA(cudaMemset(buf, 0, 3 * 2 * n * n * sizeof(bf16)));
    bf16* m = static_cast<bf16*>(buf);
    void* hp[6] = {m, m + n * n, m + 2 * n * n, m + 3 * n * n, m + 4 * n * n, m + 5 * n * n};  // A0 A1 B0 B1 C0 C1
    void** dp = reinterpret_cast<void**>(m + 6 * n * n);
    BRAID_CUDA(cudaMemcpy(dp, hp, sizeof(hp), cudaMemcpyHostToDevice));
    BRAID_CUDA(cudaDeviceSynchronize());  // a pageable copy may return before its DMA lands
    cublasOperation_t ta[2] = {CUBLAS_OP_T, CUBLAS_OP_T}, tb[2] = {CUBLAS_OP_N, CUBLAS_OP_N};
    int dims[2] = {n, n}, ones[2] = {1, 1};
    float al[2] = {1.f, 1.f}, be[2] = {0.f, 0.f};
    const cublasStatus_t st = cublasGemmGroupedBatchedEx(handle_, ta, tb, dims, dims, dims, al, dp, CUDA_R_16BF, dims, dp + 2, CUDA_R_16BF, dims,
                                                         be, dp + 4, CUDA_R_16BF, dims, 2, ones, CUBLAS_COMPUTE_32F);
    BRAID_CUDA(cudaDeviceSynchronize());
    BRAID_CUDA(cudaFree(buf));
    if (st != CUBLAS_STATUS_SUCCESS)
      std::fprintf(stderr, "moe: cublasGemmGroupedBatchedEx (bf16, fp32 compute) unavailable here (%s): one cublasGemmEx per expert block\n",
                   cublasGetStatusString(st));
    return st == CUBLAS_STATUS_SUCCESS;
  }

  cublasHandle_t handle_ = nullptr;
  char* dev_ = nullptr;
  char* host_ = nullptr;
  int max_blocks_ = 1;
  int slot_ = 0;
  Path path_ = Path::PerBlock;
};

// ---------------------------------------------------------------------------------------------
// Routing entry point and the host-driven exchange used by baseline / compute / comm alone
// ---------------------------------------------------------------------------------------------

inline void route(Context& c, cudaStream_t s) {
  const Shape sh = shape_of(c);
  route_kernel<><<<(unsigned)std::max<int64_t>(1, std::min<int64_t>((sh.tokens + 127) / 128, 1024)), 128, 0, s>>>(
      c.buffer("route_seed").win, sh, c.buffer("topk_ids").as<int32_t>(), c.buffer("topk_weights").as<float>());
  BRAID_LAUNCHED();
}

// Host-side counts of one call: send[e] (my picks per global expert), recv[p*El + e] (rows source
// p sends to my local expert e), and the derived per-peer row counts and offsets.
struct Counts {
  std::vector<int32_t> send, recv;
  std::vector<int64_t> send_rows, send_off, recv_rows, recv_off;  // per peer
  int64_t recv_total = 0;
  void derive(int world, int per_rank) {
    send_rows.assign((size_t)world, 0);
    recv_rows.assign((size_t)world, 0);
    for (int p = 0; p < world; ++p)
      for (int e = 0; e < per_rank; ++e) {
        send_rows[(size_t)p] += send[(size_t)(p * per_rank + e)];
        recv_rows[(size_t)p] += recv[(size_t)(p * per_rank + e)];
      }
    send_off.assign((size_t)world, 0);
    recv_off.assign((size_t)world, 0);
    for (int p = 1; p < world; ++p) {
      send_off[(size_t)p] = send_off[(size_t)p - 1] + send_rows[(size_t)p - 1];
      recv_off[(size_t)p] = recv_off[(size_t)p - 1] + recv_rows[(size_t)p - 1];
    }
    recv_total = recv_off[(size_t)world - 1] + recv_rows[(size_t)world - 1];
  }
  // Expert-major layout of the received rows: expert e's rows, source by source.
  // Returns the moves source-major -> expert-major and fills the expert blocks.
  std::vector<RowMove> to_expert_major(int world, int per_rank, std::vector<ExpertBlock>* blocks) const {
    std::vector<RowMove> moves;
    blocks->clear();
    int64_t dst = 0;
    for (int e = 0; e < per_rank; ++e) {
      const int64_t start = dst;
      for (int p = 0; p < world; ++p) {
        int64_t src = recv_off[(size_t)p];
        for (int f = 0; f < e; ++f) src += recv[(size_t)(p * per_rank + f)];
        const int64_t rows = recv[(size_t)(p * per_rank + e)];
        if (rows > 0) moves.push_back(RowMove{src, dst, rows});
        dst += rows;
      }
      blocks->push_back(ExpertBlock{e, start, dst - start});
    }
    return moves;
  }
};

// Scratch of the host-driven strategy (the baseline's own, apart from the candidate's).
struct HostDriven {
  int32_t *counts_send = nullptr, *counts_recv = nullptr, *offsets = nullptr, *slot = nullptr;
  int32_t* pinned = nullptr;  // send[E] then recv[E]
  RowMove* moves_dev = nullptr;
  RowMove* moves_host = nullptr;
  bf16 *send = nullptr, *recv = nullptr, *expert_in = nullptr, *h = nullptr, *a = nullptr, *expert_out = nullptr, *ret_send = nullptr,
       *ret_recv = nullptr;
  ExpertGemm gemm;
};

// Allocates a HostDriven scratch set with ctx.alloc (roles: Receive for what arrives, State for
// what the call fully rewrites before reading).
inline void alloc_host_driven(Context& c, const std::string& prefix, HostDriven& d, ExpertGemm::Path path) {
  const Shape s = shape_of(c);
  const int64_t R = s.max_recv_rows(), H = s.hidden, I = s.inter, Tk = s.pairs();
  auto rows = [&](const char* name, int64_t n, int64_t width, Role role) {
    return c.alloc(prefix + name, (size_t)n * (size_t)width * 2, role, DType::BF16).as<bf16>();
  };
  d.counts_send = c.alloc(prefix + "counts_send", (size_t)s.experts * 4, Role::State, DType::I32).as<int32_t>();
  d.counts_recv = c.alloc(prefix + "counts_recv", (size_t)s.experts * 4, Role::Receive, DType::I32).as<int32_t>();
  d.offsets = c.alloc(prefix + "offsets", (size_t)s.experts * 4, Role::State, DType::I32).as<int32_t>();
  d.slot = c.alloc(prefix + "slot", (size_t)Tk * 4, Role::State, DType::I32).as<int32_t>();
  d.send = rows("send", Tk, H, Role::State);
  d.recv = rows("recv", R, H, Role::Receive);
  d.expert_in = rows("expert_in", R, H, Role::State);
  d.h = rows("h", R, 2 * I, Role::State);
  d.a = rows("a", R, I, Role::State);
  d.expert_out = rows("expert_out", R, H, Role::State);
  d.ret_send = rows("ret_send", R, H, Role::State);
  d.ret_recv = rows("ret_recv", Tk, H, Role::Receive);
  BRAID_CUDA(cudaMallocHost(&d.pinned, (size_t)s.experts * 2 * sizeof(int32_t)));
  const size_t max_moves = (size_t)s.experts * (size_t)s.world + 1;
  BRAID_CUDA(cudaMalloc(&d.moves_dev, max_moves * 2 * sizeof(RowMove)));
  BRAID_CUDA(cudaMallocHost(&d.moves_host, max_moves * 2 * sizeof(RowMove)));
  d.gemm.create(s.experts_per_rank() * s.world, path);
}
inline void free_host_driven(HostDriven& d) {
  d.gemm.destroy();
  if (d.pinned) cudaFreeHost(d.pinned);
  if (d.moves_host) cudaFreeHost(d.moves_host);
  if (d.moves_dev) cudaFree(d.moves_dev);
  d.pinned = nullptr;
  d.moves_host = nullptr;
  d.moves_dev = nullptr;
}

// Route, plan the pack, exchange the counts and read them on the host (the host round trip).
inline Counts host_counts(Context& c, cudaStream_t s, HostDriven& d) {
  const Shape sh = shape_of(c);
  const int El = sh.experts_per_rank();
  route(c, s);
  launch_plan(s, c.buffer("topk_ids").as<int32_t>(), sh.pairs(), sh.experts, d.counts_send, d.offsets, d.slot);
  BRAID_NCCL(ncclAlltoAll(d.counts_send, d.counts_recv, (size_t)El, ncclInt32, c.comm, s));
  BRAID_CUDA(cudaMemcpyAsync(d.pinned, d.counts_send, (size_t)sh.experts * 4, cudaMemcpyDeviceToHost, s));
  BRAID_CUDA(cudaMemcpyAsync(d.pinned + sh.experts, d.counts_recv, (size_t)sh.experts * 4, cudaMemcpyDeviceToHost, s));
  BRAID_CUDA(cudaStreamSynchronize(s));
  Counts k;
  k.send.assign(d.pinned, d.pinned + sh.experts);
  k.recv.assign(d.pinned + sh.experts, d.pinned + 2 * sh.experts);
  k.derive(sh.world, El);
  return k;
}

// Grouped ncclSend/ncclRecv: rows from `src` (per-peer offsets/counts) to `dst`.
inline void exchange_rows(Context& c, cudaStream_t s, const bf16* src, const std::vector<int64_t>& src_off, const std::vector<int64_t>& src_rows,
                          bf16* dst, const std::vector<int64_t>& dst_off, const std::vector<int64_t>& dst_rows) {
  const int64_t H = shape_of(c).hidden;
  BRAID_NCCL(ncclGroupStart());
  for (int p = 0; p < c.world; ++p) {
    if (src_rows[(size_t)p] > 0) BRAID_NCCL(ncclSend(src + src_off[(size_t)p] * H, (size_t)(src_rows[(size_t)p] * H), ncclBfloat16, p, c.comm, s));
    if (dst_rows[(size_t)p] > 0) BRAID_NCCL(ncclRecv(dst + dst_off[(size_t)p] * H, (size_t)(dst_rows[(size_t)p] * H), ncclBfloat16, p, c.comm, s));
  }
  BRAID_NCCL(ncclGroupEnd());
}

inline void launch_moves(cudaStream_t s, const std::vector<RowMove>& moves, RowMove* host, RowMove* dev, const bf16* src, bf16* dst, int64_t H) {
  if (moves.empty()) return;
  std::copy(moves.begin(), moves.end(), host);
  BRAID_CUDA(cudaMemcpyAsync(dev, host, moves.size() * sizeof(RowMove), cudaMemcpyHostToDevice, s));
  move_rows_kernel<><<<dim3(32, (unsigned)moves.size()), 256, 0, s>>>(dev, src, dst, H);
  BRAID_LAUNCHED();
}

inline std::vector<RowMove> inverse(const std::vector<RowMove>& moves) {
  std::vector<RowMove> inv;
  for (const RowMove& m : moves) inv.push_back(RowMove{m.dst_row, m.src_row, m.rows});
  return inv;
}

// ---------------------------------------------------------------------------------------------
// The reference: no exchange, each token times each of its experts where the weights lie
// ---------------------------------------------------------------------------------------------

template <int kUnused = 0>
__global__ void gather_tokens_kernel(const bf16* x, const int32_t* token_of_row, int64_t rows, int64_t H, bf16* out) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int4* s = reinterpret_cast<const int4*>(x + (int64_t)token_of_row[r] * H);
    int4* d = reinterpret_cast<int4*>(out + r * H);
    for (int64_t v = threadIdx.x; v < H / 8; v += blockDim.x) d[v] = s[v];
  }
}
template <int kUnused = 0>
__global__ void reference_sum_kernel(const float* o, const int32_t* row_of_pick, const float* gates, int64_t T, int64_t H, bf16* y) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < T * H; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t t = i / H, h = i % H;
    float acc = 0.f;
    for (int k = 0; k < kTopK; ++k) acc += gates[t * kTopK + k] * o[(int64_t)row_of_pick[t * kTopK + k] * H + h];
    y[i] = __float2bfloat16(acc);
  }
}

struct WorkloadState {
  cublasHandle_t ref_handle = nullptr;
  std::vector<void*> peer_w13, peer_w2;  // every rank's weight windows (host-usable LSA addresses)
  int32_t* seeds_dev = nullptr;          // all ranks' seed words (all-gathered by the reference)
  int32_t* ref_index = nullptr;          // token_of_row[T*8], row_of_pick[T*8]
  float* ref_gates = nullptr;
  bf16* ref_in = nullptr;                // T*8 x H
  float* ref_h = nullptr;                // T*8 x 2I
  bf16* ref_a = nullptr;                 // T*8 x I
  float* ref_o = nullptr;                // T*8 x H
  int32_t* barrier = nullptr;
  RowBlock* ref_block = nullptr;
  HostDriven base;
  bf16* compute_rows = nullptr;          // compute alone's input rows (random, fixed)
  Counts bound_counts;                   // the bound's fixed draw (bound_draw_picks)
  ExpertGemm bound_gemm;                 // compute alone's own staging: its graph replays slot 0
  cudaGraphExec_t compute_graph = nullptr;  // null: capture failed, compute alone runs eagerly
};
inline WorkloadState& state(Context& c) { return *static_cast<WorkloadState*>(c.workload_state); }

inline void reference(Context& c, cudaStream_t s) {
  WorkloadState& st = state(c);
  const Shape sh = shape_of(c);
  const int64_t H = sh.hidden, I = sh.inter, Tk = sh.pairs();
  const int El = sh.experts_per_rank();
  // Every rank's seed words, then this rank's routing on the host (the device route() is the
  // candidate's route; agreement is part of what is verified).
  BRAID_NCCL(ncclAllGather(c.buffer("route_seed").ptr, st.seeds_dev, kSeedWords, ncclUint32, c.comm, s));
  std::vector<uint32_t> seeds((size_t)kSeedWords * (size_t)c.world);
  BRAID_CUDA(cudaMemcpyAsync(seeds.data(), st.seeds_dev, seeds.size() * 4, cudaMemcpyDeviceToHost, s));
  BRAID_CUDA(cudaStreamSynchronize(s));
  const int hot = hot_rank(seeds.data(), sh.world);
  std::vector<int32_t> ids((size_t)Tk);
  std::vector<float> gates((size_t)Tk);
  for (int64_t t = 0; t < sh.tokens; ++t)
    route_token(seeds.data() + (size_t)kSeedWords * (size_t)c.rank, hot, t, sh, ids.data() + t * kTopK, gates.data() + t * kTopK);
  // Rows grouped by global expert; token_of_row and row_of_pick.
  std::vector<int64_t> start((size_t)sh.experts + 1, 0);
  for (int32_t e : ids) ++start[(size_t)e + 1];
  for (int e = 0; e < sh.experts; ++e) start[(size_t)e + 1] += start[(size_t)e];
  std::vector<int32_t> index((size_t)Tk * 2);
  std::vector<int64_t> cursor(start.begin(), start.end() - 1);
  for (int64_t p = 0; p < Tk; ++p) {
    const int64_t row = cursor[(size_t)ids[(size_t)p]]++;
    index[(size_t)row] = (int32_t)(p / kTopK);
    index[(size_t)(Tk + p)] = (int32_t)row;
  }
  BRAID_CUDA(cudaMemcpyAsync(st.ref_index, index.data(), index.size() * 4, cudaMemcpyHostToDevice, s));
  BRAID_CUDA(cudaMemcpyAsync(st.ref_gates, gates.data(), gates.size() * 4, cudaMemcpyHostToDevice, s));
  gather_tokens_kernel<><<<(unsigned)std::min<int64_t>(Tk, 8192), 128, 0, s>>>(c.buffer("x").as<bf16>(), st.ref_index, Tk, H, st.ref_in);
  BRAID_LAUNCHED();
  MOE_CUBLAS(cublasSetStream(st.ref_handle, s));
  const float a1 = alpha_up(H), a2 = alpha_down(I), zero = 0.f;
  for (int e = 0; e < sh.experts; ++e) {
    const int64_t r0 = start[(size_t)e], n = start[(size_t)e + 1] - r0;
    if (n == 0) continue;
    const int owner = e / El, local = e % El;
    const bf16* w13 = static_cast<const bf16*>(st.peer_w13[(size_t)owner]) + (int64_t)local * 2 * I * H;
    const bf16* w2 = static_cast<const bf16*>(st.peer_w2[(size_t)owner]) + (int64_t)local * H * I;
    MOE_CUBLAS(cublasGemmEx(st.ref_handle, CUBLAS_OP_T, CUBLAS_OP_N, (int)(2 * I), (int)n, (int)H, &a1, w13, CUDA_R_16BF, (int)H,
                            st.ref_in + r0 * H, CUDA_R_16BF, (int)H, &zero, st.ref_h + r0 * 2 * I, CUDA_R_32F, (int)(2 * I),
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  const RowBlock whole{0, Tk};
  BRAID_CUDA(cudaMemcpyAsync(st.ref_block, &whole, sizeof(whole), cudaMemcpyHostToDevice, s));
  swiglu_kernel<float><<<dim3(1024, 1), 256, 0, s>>>(st.ref_block, st.ref_h, st.ref_a, I);
  BRAID_LAUNCHED();
  for (int e = 0; e < sh.experts; ++e) {
    const int64_t r0 = start[(size_t)e], n = start[(size_t)e + 1] - r0;
    if (n == 0) continue;
    const int owner = e / El, local = e % El;
    const bf16* w2 = static_cast<const bf16*>(st.peer_w2[(size_t)owner]) + (int64_t)local * H * I;
    MOE_CUBLAS(cublasGemmEx(st.ref_handle, CUBLAS_OP_T, CUBLAS_OP_N, (int)H, (int)n, (int)I, &a2, w2, CUDA_R_16BF, (int)I, st.ref_a + r0 * I,
                            CUDA_R_16BF, (int)I, &zero, st.ref_o + r0 * H, CUDA_R_32F, (int)H, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  reference_sum_kernel<><<<2048, 256, 0, s>>>(st.ref_o, st.ref_index + Tk, st.ref_gates, sh.tokens, H, c.buffer("y").as<bf16>());
  BRAID_LAUNCHED();
  // Peers read my weights above: nobody moves on (and rewrites its inputs) before all are done.
  BRAID_NCCL(ncclAllReduce(st.barrier, st.barrier, 1, ncclInt32, ncclSum, c.comm, s));
  BRAID_CUDA(cudaStreamSynchronize(s));
}

// ---------------------------------------------------------------------------------------------
// The bound's phases: one fixed routing draw, counted on the host (see the contract)
// ---------------------------------------------------------------------------------------------

// This rank's counts in the bound's draw: what it sends (its own picks) and what every source
// sends it (that source's picks of this rank's experts). Every rank counts the same draw, so a
// sender's and its receiver's row counts agree.
inline Counts bound_counts(const Shape& sh, int rank) {
  const int El = sh.experts_per_rank();
  Counts k;
  k.send = bound_draw_picks(sh, rank);
  k.recv.assign((size_t)sh.experts, 0);
  for (int p = 0; p < sh.world; ++p) {
    const std::vector<int32_t> picks = p == rank ? k.send : bound_draw_picks(sh, p);
    for (int e = 0; e < El; ++e) k.recv[(size_t)(p * El + e)] = picks[(size_t)(rank * El + e)];
  }
  k.derive(sh.world, El);
  return k;
}

inline void bound_expert_compute(Context& c, WorkloadState& st, cudaStream_t s) {
  const Shape sh = shape_of(c);
  HostDriven& d = st.base;
  std::vector<ExpertBlock> blocks;
  st.bound_counts.to_expert_major(sh.world, sh.experts_per_rank(), &blocks);
  st.bound_gemm.forward(s, blocks, st.compute_rows, c.buffer("w13").as<bf16>(), c.buffer("w2").as<bf16>(), d.h, d.a, d.expert_out, sh.hidden,
                        sh.inter);
}

// Compute alone as a CUDA graph (device time only). Where this cuBLAS cannot be captured, null:
// compute alone then enqueues eagerly (said once on stderr; its figure includes launch cost).
inline cudaGraphExec_t capture_compute_alone(Context& c, WorkloadState& st) {
  cudaStream_t s = c.stream;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  std::string why;
  if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess) why = "cudaStreamBeginCapture failed";
  if (why.empty()) {
    try {
      bound_expert_compute(c, st, s);
    } catch (const std::exception& e) {
      why = e.what();
    }
    const cudaError_t end = cudaStreamEndCapture(s, &graph);
    if (why.empty() && end != cudaSuccess) why = std::string("cudaStreamEndCapture: ") + cudaGetErrorString(end);
  }
  if (why.empty() && cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) why = "cudaGraphInstantiate failed";
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (!why.empty()) {
    (void)cudaGetLastError();
    exec = nullptr;
    static bool said = false;
    if (!said) std::fprintf(stderr, "moe: compute alone runs without a CUDA graph (%s): the bound includes cuBLAS's launch cost\n", why.c_str());
    said = true;
  }
  return exec;
}

// ---------------------------------------------------------------------------------------------
// The workload
// ---------------------------------------------------------------------------------------------

// The host-driven layer on the baseline's scratch: what seed.cu does, on symmetric buffers.
inline void host_driven_layer(Context& c, cudaStream_t s, HostDriven& d) {
  const Shape sh = shape_of(c);
  const int El = sh.experts_per_rank();
  const int64_t H = sh.hidden, I = sh.inter;
  const Counts k = host_counts(c, s, d);
  launch_pack_rows(s, c.buffer("x").as<bf16>(), d.slot, sh.pairs(), H, d.send);
  exchange_rows(c, s, d.send, k.send_off, k.send_rows, d.recv, k.recv_off, k.recv_rows);
  std::vector<ExpertBlock> blocks;
  const std::vector<RowMove> moves = k.to_expert_major(sh.world, El, &blocks);
  launch_moves(s, moves, d.moves_host, d.moves_dev, d.recv, d.expert_in, H);
  d.gemm.forward(s, blocks, d.expert_in, c.buffer("w13").as<bf16>(), c.buffer("w2").as<bf16>(), d.h, d.a, d.expert_out, H, I);
  launch_moves(s, inverse(moves), d.moves_host + moves.size(), d.moves_dev + moves.size(), d.expert_out, d.ret_send, H);
  exchange_rows(c, s, d.ret_send, k.recv_off, k.recv_rows, d.ret_recv, k.send_off, k.send_rows);
  launch_combine(s, d.ret_recv, d.slot, c.buffer("topk_weights").as<float>(), sh.tokens, H, c.buffer("y").as<bf16>());
}

inline braid::dev::Workload make_workload() {
  braid::dev::Workload w;
  w.name = "moe";
  w.buffers = [](const Problem& p) {
    const Shape s = shape_of(p);
    const size_t T = (size_t)s.tokens, H = (size_t)s.hidden, I = (size_t)s.inter, El = (size_t)s.experts_per_rank();
    return std::vector<BufferSpec>{{"x", Role::Input, DType::BF16, T * H, true},
                                   {"route_seed", Role::Input, DType::U32, (size_t)kSeedWords, true},
                                   {"w13", Role::Input, DType::BF16, El * 2 * I * H, true},
                                   {"w2", Role::Input, DType::BF16, El * H * I, true},
                                   {"y", Role::Output, DType::BF16, T * H, true}};
  };
  w.init = [](Context& c) {
    const Shape s = shape_of(c);
    if (c.dev_comm.lsaSize != c.world)
      throw DeviceError("moe: every rank must be in one NVLink (LSA) domain (lsaSize " + std::to_string(c.dev_comm.lsaSize) + ", world " +
                        std::to_string(c.world) + "): routing reads rank 0's seed and the reference reads peers' weights");
    const size_t Tk = (size_t)s.pairs(), H = (size_t)s.hidden, I = (size_t)s.inter;
    c.alloc_window("topk_ids", Tk * 4, Role::Intermediate, DType::I32);
    c.alloc_window("topk_weights", Tk * 4, Role::Intermediate, DType::F32);
    auto* st = new WorkloadState;
    c.workload_state = st;
    MOE_CUBLAS(cublasCreate(&st->ref_handle));
    st->peer_w13 = braid::dev::host_lsa_pointers(c.buffer("w13").win, 0, c.world, c.stream, c.dev_comm.lsaRank);
    st->peer_w2 = braid::dev::host_lsa_pointers(c.buffer("w2").win, 0, c.world, c.stream, c.dev_comm.lsaRank);
    // Reference scratch (State: fully rewritten before use).
    st->seeds_dev = c.alloc("workload_ref_seeds", (size_t)kSeedWords * (size_t)c.world * 4, Role::State, DType::I32).as<int32_t>();
    st->ref_index = c.alloc("workload_ref_index", Tk * 2 * 4, Role::State, DType::I32).as<int32_t>();
    st->ref_gates = c.alloc("workload_ref_gates", Tk * 4, Role::State, DType::F32).as<float>();
    st->ref_in = c.alloc("workload_ref_in", Tk * H * 2, Role::State, DType::BF16).as<bf16>();
    st->ref_h = c.alloc("workload_ref_h", Tk * 2 * I * 4, Role::State, DType::F32).as<float>();
    st->ref_a = c.alloc("workload_ref_a", Tk * I * 2, Role::State, DType::BF16).as<bf16>();
    st->ref_o = c.alloc("workload_ref_o", Tk * H * 4, Role::State, DType::F32).as<float>();
    st->barrier = c.alloc("workload_barrier", 4, Role::State, DType::I32).as<int32_t>();
    st->ref_block = static_cast<RowBlock*>(c.alloc("workload_ref_block", sizeof(RowBlock), Role::State, DType::U8).ptr);
    alloc_host_driven(c, "workload_", st->base, ExpertGemm::Path::Auto);  // the bound uses the faster GEMM
    // Compute alone multiplies fixed random rows (the values do not change a GEMM's time).
    st->compute_rows = c.alloc("workload_compute_rows", (size_t)s.max_recv_rows() * H * 2, Role::State, DType::BF16).as<bf16>();
    braid::dev::fill_random_kernel<><<<1024, 256, 0, c.stream>>>(st->compute_rows, (size_t)s.max_recv_rows() * H, (int)DType::BF16, 0x3017ull);
    BRAID_LAUNCHED();
    BRAID_CUDA(cudaStreamSynchronize(c.stream));
    st->bound_counts = bound_counts(s, c.rank);
    st->bound_gemm.create(s.experts_per_rank() * s.world, ExpertGemm::Path::Auto);
    st->compute_graph = capture_compute_alone(c, *st);
  };
  w.finish = [](Context& c) {
    auto* st = static_cast<WorkloadState*>(c.workload_state);
    if (st == nullptr) return;
    cudaDeviceSynchronize();
    if (st->compute_graph != nullptr) cudaGraphExecDestroy(st->compute_graph);
    st->bound_gemm.destroy();
    free_host_driven(st->base);
    cublasDestroy(st->ref_handle);
    delete st;
    c.workload_state = nullptr;
  };
  w.reference = [](Context& c, cudaStream_t s) { reference(c, s); };
  w.baseline = [](Context& c, cudaStream_t s) { host_driven_layer(c, s, state(c).base); };
  w.compute_alone = [](Context& c, cudaStream_t s) {
    WorkloadState& st = state(c);
    if (st.compute_graph != nullptr)
      BRAID_CUDA(cudaGraphLaunch(st.compute_graph, s));
    else
      bound_expert_compute(c, st, s);
  };
  w.comm_alone = [](Context& c, cudaStream_t s) {
    HostDriven& d = state(c).base;
    const Counts& k = state(c).bound_counts;
    exchange_rows(c, s, d.send, k.send_off, k.send_rows, d.recv, k.recv_off, k.recv_rows);
    exchange_rows(c, s, d.ret_send, k.recv_off, k.recv_rows, d.ret_recv, k.send_off, k.send_rows);
  };
  // Bytes a rank receives in both exchanges, at the expected load of an even (skew 1) rank.
  w.comm_bytes = [](const Problem& p) {
    const Shape s = shape_of(p);
    return 2.0 * (double)s.pairs() * (double)(s.world - 1) / (double)s.world * (double)s.hidden * 2.0;
  };
  return w;
}

}  // namespace moe
