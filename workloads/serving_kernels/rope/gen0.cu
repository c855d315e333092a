// Rotary embedding (NeoX layout) on Q and K for `braid evolve`: per head of 128, for i < 64,
// out[i] = x[i] cos - x[64 + i] sin, out[64 + i] = x[64 + i] cos + x[i] sin, with the token's
// cos/sin row of the fp32 table, bf16 in and out (see rope.cuh for buffers, reference, seed
// baseline and the copy-rate bound). Everything the candidate does, kernel included, is inside the
// EVOLVE-BLOCK; only includes and main() are frozen.
//
// The knobs:
//   kMapping         Flat: the (token, head, vector) items of the whole batch are spread evenly,
//                    kItemsPerThread per thread (as many blocks as the batch needs: a decode batch
//                    of 32 tokens still fills the GPU); TokenBlocks: kTokensPerBlock tokens per
//                    block, the block's threads walk their items.
//   kThreads         threads per block.
//   kVec             bf16 elements of each half-head per access: 2 (4 bytes), 4, 8 (16 bytes).
//   kItemsPerThread  Flat: items per thread, their loads issued together.
//   kTokensPerBlock  TokenBlocks: tokens per block.
//   kCosSin          TokenBlocks: Global: each thread reads its cos/sin from the table (L1/L2 hits
//                    across heads); Shared: the block stages its tokens' table rows in shared
//                    memory. (Flat reads them from the table.)
//   kUnroll          TokenBlocks: unroll of the item loop.
//   kStreamingStores outputs written with st.global.cs (evict-first).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "braid/harness.cuh"
#include "rope.cuh"

using namespace braid::dev;

// EVOLVE-BLOCK-START rope
enum class Mapping { Flat, TokenBlocks };
enum class CosSin { Global, Shared };

constexpr Mapping kMapping = Mapping::Flat;  // braid:knob Mapping::Flat|Mapping::TokenBlocks
constexpr int kThreads = 128;  // braid:knob 64|128|256|512
constexpr int kVec = 8;  // braid:knob 2|4|8
constexpr int kItemsPerThread = 2;  // braid:knob 1|2|4
constexpr int kTokensPerBlock = 2;  // braid:knob 1|2|4|8
constexpr CosSin kCosSin = CosSin::Global;  // braid:knob CosSin::Global|CosSin::Shared
constexpr int kUnroll = 1;  // braid:knob 1|2|4
constexpr bool kStreamingStores = false;  // braid:knob
// Knobs a mapping ignores stay at their defaults.
// braid:require kMapping == Mapping::Flat || kItemsPerThread == 2
// braid:require kMapping == Mapping::TokenBlocks || (kTokensPerBlock == 2 && kCosSin == CosSin::Global && kUnroll == 1)

namespace cand {

using rope::kHalf;
using rope::kHeadDim;
using rope::kKvHeads;
constexpr int kVecsPerHalf = kHalf / kVec;  // items per head

template <int N> struct RawOf;
template <> struct RawOf<2> { using T = unsigned int; };
template <> struct RawOf<4> { using T = uint2; };
template <> struct RawOf<8> { using T = uint4; };
using Raw = typename RawOf<kVec>::T;

struct Vec {
  Raw raw;
  __device__ __forceinline__ float2 get(int j) const { return __bfloat1622float2(reinterpret_cast<const __nv_bfloat162*>(&raw)[j]); }
  __device__ __forceinline__ void set(int j, float a, float b) { reinterpret_cast<__nv_bfloat162*>(&raw)[j] = __floats2bfloat162_rn(a, b); }
};

__device__ __forceinline__ Vec load_vec(const __nv_bfloat16* p) {
  Vec v;
  v.raw = *reinterpret_cast<const Raw*>(p);
  return v;
}
__device__ __forceinline__ void store_vec(__nv_bfloat16* p, const Vec& v) {
  if constexpr (kStreamingStores) __stcs(reinterpret_cast<Raw*>(p), v.raw);
  else *reinterpret_cast<Raw*>(p) = v.raw;
}

// Rotates elements [d0, d0 + kVec) of both halves of one head.
__device__ __forceinline__ void rotate(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ o, const float* cs, int d0) {
  const Vec a = load_vec(x + d0), b = load_vec(x + kHalf + d0);
  Vec ra, rb;
#pragma unroll
  for (int j = 0; j < kVec / 2; ++j) {
    const float2 x1 = a.get(j), x2 = b.get(j);
    const float c0 = cs[d0 + 2 * j], c1 = cs[d0 + 2 * j + 1];
    const float s0 = cs[kHalf + d0 + 2 * j], s1 = cs[kHalf + d0 + 2 * j + 1];
    ra.set(j, x1.x * c0 - x2.x * s0, x1.y * c1 - x2.y * s1);
    rb.set(j, x2.x * c0 + x1.x * s0, x2.y * c1 + x1.y * s1);
  }
  store_vec(o + d0, ra);
  store_vec(o + kHalf + d0, rb);
}

// Flat: item = (token * heads + head) * kVecsPerHalf + vector over the whole batch.
__global__ void __launch_bounds__(kThreads) rope_flat_kernel(const uint32_t* __restrict__ positions, const __nv_bfloat16* __restrict__ q,
                                                             const __nv_bfloat16* __restrict__ k, const float* __restrict__ cos_sin,
                                                             __nv_bfloat16* __restrict__ q_out, __nv_bfloat16* __restrict__ k_out, int64_t rows,
                                                             int hq) {
  const int heads = hq + kKvHeads;
  const int64_t per_token = (int64_t)heads * kVecsPerHalf, total = rows * per_token;
  const int64_t first = (int64_t)blockIdx.x * kThreads * kItemsPerThread + threadIdx.x;
#pragma unroll
  for (int i = 0; i < kItemsPerThread; ++i) {
    const int64_t item = first + (int64_t)i * kThreads;
    if (item >= total) break;
    const int64_t t = item / per_token;
    const int rest = (int)(item - t * per_token);
    const int h = rest / kVecsPerHalf, d0 = (rest % kVecsPerHalf) * kVec;
    const float* cs = cos_sin + (int64_t)rope::position_of(positions[t]) * kHeadDim;
    if (h < hq) rotate(q + (t * hq + h) * kHeadDim, q_out + (t * hq + h) * kHeadDim, cs, d0);
    else rotate(k + (t * kKvHeads + (h - hq)) * kHeadDim, k_out + (t * kKvHeads + (h - hq)) * kHeadDim, cs, d0);
  }
}

__global__ void __launch_bounds__(kThreads) rope_kernel(const uint32_t* __restrict__ positions, const __nv_bfloat16* __restrict__ q,
                                                        const __nv_bfloat16* __restrict__ k, const float* __restrict__ cos_sin,
                                                        __nv_bfloat16* __restrict__ q_out, __nv_bfloat16* __restrict__ k_out, int64_t rows, int hq) {
  const int64_t t0 = (int64_t)blockIdx.x * kTokensPerBlock;
  const int heads = hq + kKvHeads;
  const int per_token = heads * kVecsPerHalf;
  __shared__ float staged[kCosSin == CosSin::Shared ? kTokensPerBlock * kHeadDim : 1];
  if constexpr (kCosSin == CosSin::Shared) {
    for (int i = threadIdx.x; i < kTokensPerBlock * kHeadDim; i += kThreads) {
      const int64_t t = t0 + i / kHeadDim;
      if (t < rows) staged[i] = cos_sin[(int64_t)rope::position_of(positions[t]) * kHeadDim + i % kHeadDim];
    }
    __syncthreads();
  }
#pragma unroll kUnroll
  for (int item = threadIdx.x; item < kTokensPerBlock * per_token; item += kThreads) {
    const int local = item / per_token, rest = item % per_token;
    const int64_t t = t0 + local;
    if (t >= rows) break;  // items are token-major: every later item is past the end too
    const int h = rest / kVecsPerHalf, d0 = (rest % kVecsPerHalf) * kVec;
    const float* cs;
    if constexpr (kCosSin == CosSin::Shared) cs = staged + local * kHeadDim;
    else cs = cos_sin + (int64_t)rope::position_of(positions[t]) * kHeadDim;
    if (h < hq) rotate(q + (t * hq + h) * kHeadDim, q_out + (t * hq + h) * kHeadDim, cs, d0);
    else rotate(k + (t * kKvHeads + (h - hq)) * kHeadDim, k_out + (t * kKvHeads + (h - hq)) * kHeadDim, cs, d0);
  }
}

}  // namespace cand

Requirements requirements(const Problem&) { return {}; }

void setup(Context&) {}

void run(Context& c, cudaStream_t stream) {
  const serving::Shape s = serving::shape_of(c.problem);
  const int hq = (int)rope::q_heads(s);
  const uint32_t* positions = c.buffer("positions").as<const uint32_t>();
  const float* cos_sin = c.buffer("cos_sin").as<const float>();
  if constexpr (kMapping == Mapping::Flat) {
    const int64_t items = s.rows * (hq + cand::kKvHeads) * cand::kVecsPerHalf, per_block = (int64_t)kThreads * kItemsPerThread;
    const unsigned blocks = (unsigned)((items + per_block - 1) / per_block);
    cand::rope_flat_kernel<<<blocks, kThreads, 0, stream>>>(positions, serving::in_bf16(c, "q"), serving::in_bf16(c, "k"), cos_sin,
                                                            serving::out_bf16(c, "q_out"), serving::out_bf16(c, "k_out"), s.rows, hq);
  } else {
    const unsigned blocks = (unsigned)((s.rows + kTokensPerBlock - 1) / kTokensPerBlock);
    cand::rope_kernel<<<blocks, kThreads, 0, stream>>>(positions, serving::in_bf16(c, "q"), serving::in_bf16(c, "k"), cos_sin,
                                                       serving::out_bf16(c, "q_out"), serving::out_bf16(c, "k_out"), s.rows, hq);
  }
  BRAID_LAUNCHED();
}

void teardown(Context&) {}
// EVOLVE-BLOCK-END

int main(int argc, char** argv) {
  return harness_main(argc, argv, rope::make_workload(), Candidate{requirements, setup, run, teardown});
}
