// Softmax over a 128k vocabulary for `braid evolve`: probs = bf16(softmax(kInvTemperature *
// logits)) per row, fp32 arithmetic (see softmax.cuh for buffers, reference, seed baseline and the
// copy-rate bound). Everything the candidate does, kernel included, is inside the EVOLVE-BLOCK;
// only includes and main() are frozen.
//
// A row (128256 bf16 = 250 KiB) is split over kClusterCtas CTAs of a thread-block cluster: each
// CTA reduces its slice, the CTAs combine their (max, sum) through distributed shared memory, and
// each writes its slice. With 256 rows, one CTA per row would leave half of an H100's SMs idle.
//
// The knobs:
//   kClusterCtas     CTAs per row (a cluster; 1: no cluster).
//   kThreads         threads per CTA.
//   kVec             bf16 elements per load/store: 4 (8 bytes) or 8 (16 bytes).
//   kRowInRegisters  the CTA's slice is held in registers (kRegVectors vectors per thread): the
//                    row is read from DRAM once. A slice that does not fit is streamed instead.
//                    false: always streamed, the slice is read again to write the output.
//   kRegVectors      vectors per thread held in registers.
//   kStats           Online: (max, sum) in one pass, combined pairwise; MaxThenSum: the max
//                    first, then the sum (streamed: one more read of the slice).
//   kKeepExp         registers path: keep the exponentials of the sum (fp32) and scale them for
//                    the output instead of computing exp again (half the exps, more registers).
//   kFastExp         exp2 of pre-scaled logits (ex2.approx) instead of expf.
//   kUnroll          unroll of the streamed loops.
//   kStreamingStores probabilities written with st.global.cs (evict-first).
//   kMinBlocksPerSm  __launch_bounds__ minimum CTAs per SM: caps registers so more CTAs overlap
//                    their load, reduce and store phases (too low a cap spills).
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "braid/harness.cuh"
#include "softmax.cuh"

using namespace braid::dev;

// EVOLVE-BLOCK-START softmax
enum class Stats { Online, MaxThenSum };

constexpr int kClusterCtas = 8;  // braid:knob 1|2|4|8
constexpr int kThreads = 512;  // braid:knob 256|512|1024
constexpr int kVec = 8;  // braid:knob 4|8
constexpr bool kRowInRegisters = true;  // braid:knob
constexpr int kRegVectors = 4;  // braid:knob 2|4|8|16
constexpr Stats kStats = Stats::Online;  // braid:knob Stats::Online|Stats::MaxThenSum
constexpr bool kKeepExp = true;  // braid:knob
constexpr bool kFastExp = true;  // braid:knob
constexpr int kUnroll = 2;  // braid:knob 1|2|4
constexpr bool kStreamingStores = false;  // braid:knob
constexpr int kMinBlocksPerSm = 1;  // braid:knob 1|2|3|4
// kRegVectors only matters with the slice in registers; the cached slice (packed bf16) takes at
// most half of the register file.
// braid:require kRowInRegisters || kRegVectors == 4
// The kept exponentials are fp32: at most 16384 per CTA (32 registers a thread at 512 threads).
// braid:require kKeepExp == false || (kRowInRegisters && kThreads * kRegVectors * kVec <= 16384)
// braid:require kThreads * kRegVectors * kVec / 2 <= 32768
// At most 2048 resident threads per SM.
// braid:require kThreads * kMinBlocksPerSm <= 2048

namespace cand {

namespace cg = cooperative_groups;

constexpr int kWarps = kThreads / 32;
// Logits in the exponent's base: log2 units with the fast exp2, natural units otherwise.
constexpr float kScale = kFastExp ? softmax::kInvTemperature * 1.4426950408889634f : softmax::kInvTemperature;

__device__ __forceinline__ float ex(float a) {
  if constexpr (kFastExp) return exp2f(a);
  else return expf(a);
}

template <int N> struct RawOf;
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

// Reductions carry float2: (max, sum) pairs, or a max / a sum in .x.
struct PairOp {  // (m, s): s = sum of ex(y - m); m = -inf marks "no elements"
  __device__ __forceinline__ float2 operator()(float2 a, float2 b) const {
    if (b.x == -INFINITY) return a;
    if (a.x == -INFINITY) return b;
    const float m = fmaxf(a.x, b.x);
    return make_float2(m, a.y * ex(a.x - m) + b.y * ex(b.x - m));
  }
};
struct MaxOp {
  __device__ __forceinline__ float2 operator()(float2 a, float2 b) const { return make_float2(fmaxf(a.x, b.x), 0.f); }
};
struct SumOp {
  __device__ __forceinline__ float2 operator()(float2 a, float2 b) const { return make_float2(a.x + b.x, 0.f); }
};

struct Shared {
  float2 warp[32];
  float2 block;
  float2 slot;     // this CTA's value, read by the cluster's CTAs
  float2 cluster;
};

template <class Op>
__device__ __forceinline__ float2 warp_reduce(float2 v, Op op) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float2 other = make_float2(__shfl_xor_sync(0xffffffffu, v.x, o), __shfl_xor_sync(0xffffffffu, v.y, o));
    v = op(v, other);
  }
  return v;
}

// Over the CTA, then over the cluster's CTAs through distributed shared memory. Every thread of
// every CTA of the cluster calls it, the same number of times.
template <class Op>
__device__ __forceinline__ float2 reduce(float2 v, Op op, float2 identity, Shared& sh) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  v = warp_reduce(v, op);
  if (lane == 0) sh.warp[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = warp_reduce(lane < kWarps ? sh.warp[lane] : identity, op);
    if (lane == 0) sh.block = v;
  }
  __syncthreads();
  if constexpr (kClusterCtas == 1) {
    return sh.block;
  } else {
    cg::cluster_group cluster = cg::this_cluster();
    if (threadIdx.x == 0) sh.slot = sh.block;
    cluster.sync();  // every CTA's slot is written
    if (threadIdx.x == 0) {
      float2 acc = identity;
      for (int r = 0; r < kClusterCtas; ++r) acc = op(acc, *cluster.map_shared_rank(&sh.slot, r));
      sh.cluster = acc;
    }
    cluster.sync();  // every remote read is done (slots may be rewritten, CTAs may exit); sh.cluster is visible
    return sh.cluster;
  }
}

__device__ __forceinline__ float2 vec_max_sum(const Vec& v, float m_in, float s_in) {
  float m = m_in;
#pragma unroll
  for (int j = 0; j < kVec / 2; ++j) {
    const float2 f = v.get(j);
    m = fmaxf(m, fmaxf(f.x, f.y) * kScale);
  }
  float s = s_in * ex(m_in - m);  // m_in = -inf, s_in = 0 the first time: 0
#pragma unroll
  for (int j = 0; j < kVec / 2; ++j) {
    const float2 f = v.get(j);
    s += ex(f.x * kScale - m) + ex(f.y * kScale - m);
  }
  return make_float2(m, s);
}

__device__ __forceinline__ Vec probabilities(const Vec& v, float m, float inv) {
  Vec o;
#pragma unroll
  for (int j = 0; j < kVec / 2; ++j) {
    const float2 f = v.get(j);
    o.set(j, ex(f.x * kScale - m) * inv, ex(f.y * kScale - m) * inv);
  }
  return o;
}

__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm) softmax_kernel(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ out, int width) {
  __shared__ Shared sh;
  int rank = 0;
  if constexpr (kClusterCtas > 1) rank = (int)cg::this_cluster().block_rank();
  const int64_t row = blockIdx.x / kClusterCtas;
  const int nvec = width / kVec;
  const int per = (nvec + kClusterCtas - 1) / kClusterCtas;  // vectors per CTA (the last may have fewer)
  const int v0 = rank * per < nvec ? rank * per : nvec;
  const int v1 = v0 + per < nvec ? v0 + per : nvec;
  const __nv_bfloat16* xr = x + row * (int64_t)width;
  __nv_bfloat16* orow = out + row * (int64_t)width;
  const float2 none = make_float2(-INFINITY, 0.f);

  // `per` is the same in every CTA of the cluster, so all take the same branch (and barriers).
  if (kRowInRegisters && per <= kThreads * kRegVectors) {
    Vec cache[kRegVectors];
#pragma unroll
    for (int i = 0; i < kRegVectors; ++i) {
      const int v = v0 + i * kThreads + (int)threadIdx.x;
      if (v < v1) cache[i] = load_vec(xr + (int64_t)v * kVec);
    }
    float m = -INFINITY, s = 0.f;
    float kept[kKeepExp ? kRegVectors : 1][kKeepExp ? kVec : 1];
#pragma unroll
    for (int i = 0; i < kRegVectors; ++i) {
      const int v = v0 + i * kThreads + (int)threadIdx.x;
      if (v < v1) {
#pragma unroll
        for (int j = 0; j < kVec / 2; ++j) {
          const float2 f = cache[i].get(j);
          m = fmaxf(m, fmaxf(f.x, f.y) * kScale);
        }
      }
    }
    if constexpr (kStats == Stats::MaxThenSum) m = reduce(make_float2(m, 0.f), MaxOp{}, none, sh).x;
#pragma unroll
    for (int i = 0; i < kRegVectors; ++i) {
      const int v = v0 + i * kThreads + (int)threadIdx.x;
      if (v < v1) {
#pragma unroll
        for (int j = 0; j < kVec / 2; ++j) {
          const float2 f = cache[i].get(j);
          const float e0 = ex(f.x * kScale - m), e1 = ex(f.y * kScale - m);
          s += e0 + e1;
          if constexpr (kKeepExp) {
            kept[i][2 * j] = e0;
            kept[i][2 * j + 1] = e1;
          }
        }
      }
    }
    float2 total;
    if constexpr (kStats == Stats::MaxThenSum) total = make_float2(m, reduce(make_float2(s, 0.f), SumOp{}, make_float2(0.f, 0.f), sh).x);
    else total = reduce(make_float2(m, s), PairOp{}, none, sh);
    const float inv = 1.0f / total.y;
    // kept[] is relative to this thread's m (the row max after MaxThenSum): rescale once.
    const float factor = kKeepExp && m != -INFINITY ? ex(m - total.x) * inv : 0.f;
#pragma unroll
    for (int i = 0; i < kRegVectors; ++i) {
      const int v = v0 + i * kThreads + (int)threadIdx.x;
      if (v < v1) {
        if constexpr (kKeepExp) {
          Vec o;
#pragma unroll
          for (int j = 0; j < kVec / 2; ++j) o.set(j, kept[i][2 * j] * factor, kept[i][2 * j + 1] * factor);
          store_vec(orow + (int64_t)v * kVec, o);
        } else {
          store_vec(orow + (int64_t)v * kVec, probabilities(cache[i], total.x, inv));
        }
      }
    }
  } else {
    float2 total;
    if constexpr (kStats == Stats::MaxThenSum) {
      float m = -INFINITY;
#pragma unroll kUnroll
      for (int v = v0 + (int)threadIdx.x; v < v1; v += kThreads) {
        const Vec a = load_vec(xr + (int64_t)v * kVec);
#pragma unroll
        for (int j = 0; j < kVec / 2; ++j) {
          const float2 f = a.get(j);
          m = fmaxf(m, fmaxf(f.x, f.y) * kScale);
        }
      }
      m = reduce(make_float2(m, 0.f), MaxOp{}, none, sh).x;
      float s = 0.f;
#pragma unroll kUnroll
      for (int v = v0 + (int)threadIdx.x; v < v1; v += kThreads) {
        const Vec a = load_vec(xr + (int64_t)v * kVec);
#pragma unroll
        for (int j = 0; j < kVec / 2; ++j) {
          const float2 f = a.get(j);
          s += ex(f.x * kScale - m) + ex(f.y * kScale - m);
        }
      }
      total = make_float2(m, reduce(make_float2(s, 0.f), SumOp{}, make_float2(0.f, 0.f), sh).x);
    } else {
      float2 ms = none;
#pragma unroll kUnroll
      for (int v = v0 + (int)threadIdx.x; v < v1; v += kThreads) ms = vec_max_sum(load_vec(xr + (int64_t)v * kVec), ms.x, ms.y);
      total = reduce(ms, PairOp{}, none, sh);
    }
    const float inv = 1.0f / total.y;
#pragma unroll kUnroll
    for (int v = v0 + (int)threadIdx.x; v < v1; v += kThreads)
      store_vec(orow + (int64_t)v * kVec, probabilities(load_vec(xr + (int64_t)v * kVec), total.x, inv));
  }
}

}  // namespace cand

Requirements requirements(const Problem&) { return {}; }

void setup(Context&) {}

void run(Context& c, cudaStream_t stream) {
  const serving::Shape s = serving::shape_of(c.problem);
  const __nv_bfloat16* x = serving::in_bf16(c, "logits");
  __nv_bfloat16* out = serving::out_bf16(c, "probs");
  const int width = (int)s.width;
  const unsigned blocks = (unsigned)(s.rows * kClusterCtas);
  if constexpr (kClusterCtas == 1) {
    cand::softmax_kernel<<<blocks, kThreads, 0, stream>>>(x, out, width);
  } else {
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(blocks);
    config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = 0;
    config.stream = stream;
    cudaLaunchAttribute attribute[1];
    attribute[0].id = cudaLaunchAttributeClusterDimension;
    attribute[0].val.clusterDim.x = kClusterCtas;
    attribute[0].val.clusterDim.y = 1;
    attribute[0].val.clusterDim.z = 1;
    config.attrs = attribute;
    config.numAttrs = 1;
    BRAID_CUDA(cudaLaunchKernelEx(&config, cand::softmax_kernel, x, out, width));
  }
  BRAID_LAUNCHED();
}

void teardown(Context&) {}
// EVOLVE-BLOCK-END

int main(int argc, char** argv) {
  return harness_main(argc, argv, softmax::make_workload(), Candidate{requirements, setup, run, teardown});
}
