// kv_transfer.cuh -- the frozen KV-cache transfer workload (disaggregated serving: a prefill GPU
// hands a prompt's KV cache to a decode GPU), shared by seed.cu and gen0.cu.
//
// CONTRACT (shown to the LLM as documentation)
//   Size N encodes the shape: N = S * 10000 + D, plus L * 10^9 when L != 32 (S tokens, KV width D
//   per layer, L layers; H = 4096). 40961024 is S = 4096, D = 1024, L = 32; 8040961024 the same
//   with L = 8. S must be a multiple of 16 (the page size), D a multiple of 8.
//   Ranks: rank 2i prefills, rank 2i+1 decodes (its partner); P must be 1 or even. With P = 1
//   rank 0 is both: the cache moves to itself, and the paged re-layout is what is left to do.
//   Buffers (bf16, row-major):
//     "x"     Input, prefill ranks: L x S x H, the hidden states entering each layer.
//     "w"     Input, prefill ranks: L x 2 x D x H, Wk_l then Wv_l (nn.Linear layout, out x in).
//     "kv"    symmetric window, L x 2 x S x D: the prefill rank's contiguous cache, kv[l][0] = K_l =
//             X_l Wk_l^T, kv[l][1] = V_l = X_l Wv_l^T. Output on prefill ranks (verified there);
//             on a decode-only rank it is a Receive buffer the program may use as staging.
//     "paged" symmetric window, L x 2 x NB x 16 x D (NB = S / 16): the decode rank's paged cache.
//             Token t of layer l sits in physical block page_table(shape).physical(t / 16), row
//             t % 16, of plane [l][0] (K) or [l][1] (V). Output on decode ranks; a Receive buffer
//             on prefill-only ranks.
//   Projections: project_layer(ctx, l, stream) computes K_l and V_l into "kv" (two cublasGemmEx,
//   fp32 accumulation, bf16 out, a cuBLAS handle and workspace per stream).
//   The cache must be computed with it: the decode rank's cache is checked bit for bit (run with
//   --rtol 0 --atol 0) against the reference, which uses the same call, so any other GEMM route
//   may differ in the last bit. Recomputing on the decode rank is not a way out: it would need
//   X_l (S x H) per layer, more bytes than the cache (S x 2D, 2D <= H).
//   Reference: project every layer, host ncclSend/ncclRecv of the whole cache into a staging
//   buffer, an element-by-element re-layout kernel (reference_relayout_kernel) into "paged".
//   Baseline (host-driven, the strong one): project every layer, one ncclSend/ncclRecv of the whole
//   cache between the windows, then relayout_to_pages. Compute alone: every layer's projection on
//   the prefill rank. Communication alone: that ncclSend/ncclRecv (with P = 1, a send to self).
//   bound = max(compute alone, communication alone); the paged re-layout is not in the bound: a
//   program that scatters into pages as the bytes land pays nothing extra for it.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <map>
#include <string>
#include <vector>

#include "braid/harness.cuh"

namespace kv_transfer {

using braid::dev::BufferSpec;
using braid::dev::Context;
using braid::dev::DeviceError;
using braid::dev::DType;
using braid::dev::Problem;
using braid::dev::Role;

constexpr int64_t kHidden = 4096;      // H: a Llama-8B-like layer
constexpr int64_t kPageTokens = 16;    // tokens per paged block (vLLM's default block size)
constexpr int64_t kDefaultLayers = 32;

inline void check_cublas(cublasStatus_t st, const char* what, const char* file, int line) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw DeviceError(braid::dev::format_location(file, line) + ": " + what + ": " + cublasGetStatusString(st));
}
#define KV_CUBLAS(call) ::kv_transfer::check_cublas((call), #call, __FILE__, __LINE__)

struct Shape {
  int64_t layers = 0, tokens = 0, kv_dim = 0;  // L, S, D
  __host__ __device__ int64_t blocks() const { return tokens / kPageTokens; }                        // NB
  __host__ __device__ size_t plane_elems() const { return (size_t)tokens * (size_t)kv_dim; }        // one K or V
  __host__ __device__ size_t layer_elems() const { return 2 * plane_elems(); }                       // K and V
  __host__ __device__ size_t cache_elems() const { return (size_t)layers * layer_elems(); }
  __host__ __device__ size_t block_elems() const { return (size_t)kPageTokens * (size_t)kv_dim; }   // one page
  size_t cache_bytes() const { return cache_elems() * 2; }
};

// A shape the workload cannot take is the user's error, named with its size.
inline Shape shape_of(int64_t size) {
  Shape s;
  s.kv_dim = size % 10000;
  s.tokens = (size / 10000) % 100000;
  s.layers = size / 1000000000;
  if (s.layers == 0) s.layers = kDefaultLayers;
  const std::string where = "size " + std::to_string(size) + " (S = " + std::to_string(s.tokens) + ", D = " + std::to_string(s.kv_dim) +
                            ", L = " + std::to_string(s.layers) + "; size = [L * 10^9 +] S * 10000 + D)";
  if (s.kv_dim < 8 || s.kv_dim % 8 != 0) throw DeviceError(where + ": D must be a positive multiple of 8");
  if (s.tokens < kPageTokens || s.tokens % kPageTokens != 0) throw DeviceError(where + ": S must be a positive multiple of 16");
  if (s.layers > 1024) throw DeviceError(where + ": L must be at most 1024");
  if (2 * s.kv_dim > kHidden) throw DeviceError(where + ": 2D must not exceed H = 4096");
  return s;
}

// Which side of a pair a rank is on. P = 1: both, paired with itself.
struct Pair {
  bool prefill = false, decode = false;
  int peer = 0;
};
inline Pair pair_of(int rank, int world) {
  if (world == 1) return {true, true, 0};
  if (world % 2 != 0)
    throw DeviceError("kv_transfer pairs a prefill rank with a decode rank: P must be 1 or even, got " + std::to_string(world));
  if (rank % 2 == 0) return {true, false, rank + 1};
  return {false, true, rank - 1};
}

// The decode rank's block table for this request: logical block b (tokens [16b, 16b+16)) lives in
// physical block (b * stride + offset) mod NB. A scrambled permutation, as blocks come off a
// serving engine's free list, so neighbouring blocks are far apart.
struct PageTable {
  int64_t blocks = 1, stride = 1, offset = 0;
  __host__ __device__ int64_t physical(int64_t b) const { return (b * stride + offset) % blocks; }
};
inline PageTable page_table(const Shape& s) {
  PageTable t;
  t.blocks = s.blocks();
  auto gcd = [](int64_t a, int64_t b) {
    while (b != 0) {
      const int64_t r = a % b;
      a = b;
      b = r;
    }
    return a;
  };
  t.stride = t.blocks / 2 + 1;
  while (t.blocks > 1 && gcd(t.stride, t.blocks) != 1) ++t.stride;
  t.offset = t.blocks / 3;
  return t;
}

// Element offsets. Contiguous ("kv", staging): [l][kv][t][d]. Paged: [l][kv][phys][t % 16][d].
__host__ __device__ inline size_t contiguous_offset(const Shape& s, int64_t l, int kv, int64_t t) {
  return ((size_t)(l * 2 + kv) * (size_t)s.tokens + (size_t)t) * (size_t)s.kv_dim;
}
__host__ __device__ inline size_t paged_offset(const Shape& s, const PageTable& pt, int64_t l, int kv, int64_t t) {
  return (((size_t)(l * 2 + kv) * (size_t)s.blocks() + (size_t)pt.physical(t / kPageTokens)) * kPageTokens + (size_t)(t % kPageTokens)) *
         (size_t)s.kv_dim;
}

// The reference re-layout: one element per thread, index arithmetic per element (not the block
// copies the programs use).
template <int kUnused = 0>
__global__ void reference_relayout_kernel(const __nv_bfloat16* contiguous, __nv_bfloat16* paged, Shape s, PageTable pt) {
  const size_t n = s.cache_elems();
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const int64_t d = (int64_t)(i % (size_t)s.kv_dim);
    const int64_t t = (int64_t)((i / (size_t)s.kv_dim) % (size_t)s.tokens);
    const int64_t plane = (int64_t)(i / s.plane_elems());
    paged[paged_offset(s, pt, plane / 2, (int)(plane % 2), t) + (size_t)d] = contiguous[i];
  }
}

// Block re-layout of layers [l0, l1) from a contiguous cache into the paged one: each CTA copies
// whole 16-token pages with 16-byte accesses. What the baseline and the seed use.
template <int kUnused = 0>
__global__ void __launch_bounds__(256) relayout_to_pages(const __nv_bfloat16* contiguous, __nv_bfloat16* paged, Shape s, PageTable pt,
                                                         int64_t l0, int64_t l1) {
  const int64_t nb = s.blocks();
  const int64_t units = (l1 - l0) * 2 * nb;
  const size_t vecs = s.block_elems() * 2 / 16;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const int64_t plane = l0 * 2 + u / nb, b = u % nb;
    const uint4* src = reinterpret_cast<const uint4*>(contiguous + ((size_t)plane * (size_t)nb + (size_t)b) * s.block_elems());
    uint4* dst = reinterpret_cast<uint4*>(paged + ((size_t)plane * (size_t)nb + (size_t)pt.physical(b)) * s.block_elems());
    for (size_t v = threadIdx.x; v < vecs; v += blockDim.x) dst[v] = src[v];
  }
}

inline void launch_relayout_to_pages(const __nv_bfloat16* contiguous, __nv_bfloat16* paged, const Shape& s, int64_t l0, int64_t l1,
                                     int ctas, cudaStream_t stream) {
  if (l1 <= l0) return;
  relayout_to_pages<><<<ctas, 256, 0, stream>>>(contiguous, paged, s, page_table(s), l0, l1);
  BRAID_LAUNCHED();
}

// One cuBLAS handle and workspace per stream: cuBLAS picks its kernel from the workspace size, so
// every stream gets the same one and every call of project_layer computes the same bits.
struct StreamBlas {
  cublasHandle_t handle = nullptr;
  void* workspace = nullptr;
};
constexpr size_t kBlasWorkspace = 32u << 20;

struct WorkloadState {
  Shape shape;
  Pair pair;
  std::map<cudaStream_t, StreamBlas> blas;
};

inline WorkloadState& state(Context& c) { return *static_cast<WorkloadState*>(c.workload_state); }
inline const Shape& shape(Context& c) { return state(c).shape; }
inline const Pair& pair(Context& c) { return state(c).pair; }

// The handle bound to `stream` (made on first use; call it in setup to keep that out of the
// timed runs).
inline cublasHandle_t blas_for(Context& c, cudaStream_t stream) {
  auto& m = state(c).blas;
  auto it = m.find(stream);
  if (it == m.end()) {
    StreamBlas b;
    KV_CUBLAS(cublasCreate(&b.handle));
    BRAID_CUDA(cudaMalloc(&b.workspace, kBlasWorkspace));
    KV_CUBLAS(cublasSetStream(b.handle, stream));
    KV_CUBLAS(cublasSetWorkspace(b.handle, b.workspace, kBlasWorkspace));  // after SetStream, which resets it
    it = m.emplace(stream, b).first;
  }
  return it->second.handle;
}

// K_l and V_l of layer l into "kv" (prefill ranks): two cublasGemmEx calls. cuBLAS is column-major,
// so each computes kv[l][j]^T (D x S, ld D) = (w[l][j] seen as H x D, ld H)^T * (x[l]^T: H x S).
inline void project_layer(Context& c, int64_t l, cudaStream_t stream) {
  const Shape& s = shape(c);
  if (!pair(c).prefill) throw DeviceError("project_layer called on a decode-only rank (it holds no X or W)");
  if (l < 0 || l >= s.layers) throw DeviceError("project_layer: layer " + std::to_string(l) + " outside [0, " + std::to_string(s.layers) + ")");
  const float one = 1.0f, zero = 0.0f;
  cublasHandle_t h = blas_for(c, stream);
  const auto* x = c.buffer("x").as<__nv_bfloat16>() + (size_t)l * (size_t)s.tokens * (size_t)kHidden;
  for (int j = 0; j < 2; ++j) {
    const auto* w = c.buffer("w").as<__nv_bfloat16>() + ((size_t)l * 2 + (size_t)j) * (size_t)s.kv_dim * (size_t)kHidden;
    auto* out = c.buffer("kv").as<__nv_bfloat16>() + contiguous_offset(s, l, j, 0);
    KV_CUBLAS(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)s.kv_dim, (int)s.tokens, (int)kHidden, &one, w, CUDA_R_16BF, (int)kHidden, x,
                           CUDA_R_16BF, (int)kHidden, &zero, out, CUDA_R_16BF, (int)s.kv_dim, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
}

// Where a received contiguous cache lands on the decode rank before its re-layout: its own "kv"
// (a Receive buffer there), or, with P = 1, the workload's staging (the rank's "kv" is the source).
inline braid::dev::Buffer& workload_staging(Context& c) { return pair(c).prefill ? c.buffer("workload_staging") : c.buffer("kv"); }

inline braid::dev::Workload make_workload() {
  braid::dev::Workload w;
  w.name = "kv_transfer";
  w.buffers = [](const Problem& p) {
    const Shape s = shape_of(p.size);
    const Pair pr = pair_of(p.rank, p.world);
    const size_t x = pr.prefill ? (size_t)s.layers * (size_t)s.tokens * (size_t)kHidden : 0;
    const size_t wt = pr.prefill ? (size_t)s.layers * 2 * (size_t)s.kv_dim * (size_t)kHidden : 0;
    return std::vector<BufferSpec>{{"x", Role::Input, DType::BF16, x, false},
                                   {"w", Role::Input, DType::BF16, wt, false},
                                   {"kv", pr.prefill ? Role::Output : Role::Receive, DType::BF16, s.cache_elems(), true},
                                   {"paged", pr.decode ? Role::Output : Role::Receive, DType::BF16, s.cache_elems(), true}};
  };
  w.init = [](Context& c) {
    auto* st = new WorkloadState;
    c.workload_state = st;
    st->shape = shape_of(c.problem.size);
    st->pair = pair_of(c.rank, c.world);
    // State role: fully overwritten before every use. Only P = 1 needs it (see workload_staging).
    c.alloc("workload_staging", c.world == 1 ? st->shape.cache_bytes() : 0, Role::State, DType::BF16);
    blas_for(c, c.stream);
  };
  w.finish = [](Context& c) {
    auto* st = static_cast<WorkloadState*>(c.workload_state);
    if (st == nullptr) return;
    for (auto& [stream, b] : st->blas) {
      cublasDestroy(b.handle);
      cudaFree(b.workspace);
    }
    delete st;
    c.workload_state = nullptr;
  };
  // The whole cache in one message, window to window (P = 1: to itself).
  auto send_cache = [](Context& c, cudaStream_t s, void* dst) {
    const Pair& pr = pair(c);
    const size_t n = shape(c).cache_elems();
    BRAID_NCCL(ncclGroupStart());
    if (pr.prefill) BRAID_NCCL(ncclSend(c.buffer("kv").ptr, n, ncclBfloat16, pr.peer, c.comm, s));
    if (pr.decode) BRAID_NCCL(ncclRecv(dst, n, ncclBfloat16, pr.peer, c.comm, s));
    BRAID_NCCL(ncclGroupEnd());
  };
  auto compute = [](Context& c, cudaStream_t s) {
    if (!pair(c).prefill) return;
    for (int64_t l = 0; l < shape(c).layers; ++l) project_layer(c, l, s);
  };
  w.reference = [send_cache, compute](Context& c, cudaStream_t s) {
    compute(c, s);
    auto* staging = workload_staging(c).as<__nv_bfloat16>();
    send_cache(c, s, staging);
    if (pair(c).decode) {
      reference_relayout_kernel<><<<2048, 256, 0, s>>>(staging, c.buffer("paged").as<__nv_bfloat16>(), shape(c), page_table(shape(c)));
      BRAID_LAUNCHED();
    }
  };
  w.baseline = [send_cache, compute](Context& c, cudaStream_t s) {
    compute(c, s);
    auto* staging = workload_staging(c).as<__nv_bfloat16>();
    send_cache(c, s, staging);
    if (pair(c).decode)
      launch_relayout_to_pages(staging, c.buffer("paged").as<__nv_bfloat16>(), shape(c), 0, shape(c).layers, c.sm_count * 4, s);
  };
  w.compute_alone = compute;
  w.comm_alone = [send_cache](Context& c, cudaStream_t s) { send_cache(c, s, workload_staging(c).ptr); };
  w.comm_bytes = [](const Problem& p) { return (double)shape_of(p.size).cache_bytes(); };
  return w;
}

}  // namespace kv_transfer
