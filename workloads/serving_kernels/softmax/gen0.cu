// Softmax over a 128k vocabulary for `braid evolve`: probs = bf16(softmax(kInvTemperature *
// logits)) per row, fp32 arithmetic (see softmax.cuh for buffers, reference, seed baseline and the
// copy-rate bound). Everything the candidate does, kernel included, is inside the EVOLVE-BLOCK;
// only includes and main() are frozen.
//
// A row (128256 bf16 = 250 KiB) is split over kClusterCtas CTAs of a thread-block cluster: each
// CTA reduces its slice, the CTAs combine their (max, sum) through distributed shared memory, and
// each writes its slice. With 256 rows, one CTA per row would leave half of an H100's SMs idle.
// The staged path (the default) keeps the clusters resident and streams rows through shared
// memory with bulk copies, so DRAM reads never wait for a row's reduction; the other paths launch
// a cluster per row.
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
//   kKeepExp         registers and staged paths: keep the exponentials of the sum (fp32) and scale
//                    them for the output instead of computing exp again (half the exps, more
//                    registers; staged: the slice's shared memory is free once read).
//   kFastExp         exp2 of pre-scaled logits (ex2.approx.ftz, one instruction) instead of expf.
//   kUnroll          unroll of the streamed loops.
//   kStreamingStores probabilities written with st.global.cs (evict-first).
//   kMinBlocksPerSm  __launch_bounds__ minimum CTAs per SM: caps registers so more CTAs overlap
//                    their load, reduce and store phases (too low a cap spills).
//   kStaged          persistent clusters loop over rows; one thread per CTA keeps kStages bulk
//                    copies (TMA) of the CTA's next row slices in flight into shared memory, so
//                    DRAM reads never wait for a row's reduction; each slice is reduced and written
//                    from shared memory (one DRAM read). Falls back to the other paths when
//                    kStages slices do not fit in shared memory.
//   kStages          slices in flight per CTA (staged). With kept exponentials a slice is refilled
//                    as soon as the CTA has read it, so one already overlaps the next row's read
//                    with the exchange and the writes (on H200 1 beat 2 and 3: fewer bytes waiting
//                    in flight per SM).
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
constexpr int kMinBlocksPerSm = 2;  // braid:knob 1|2|3|4
constexpr bool kStaged = true;  // braid:knob
constexpr int kStages = 1;  // braid:knob 1|2
// kRegVectors only matters with the slice in registers; the cached slice (packed bf16) takes at
// most half of the register file.
// braid:require kRowInRegisters || kStaged || kRegVectors == 4
// The kept exponentials are fp32: at most 16384 per CTA (32 registers a thread at 512 threads).
// braid:require kKeepExp == false || ((kRowInRegisters || kStaged) && kThreads * kRegVectors * kVec <= 16384)
// braid:require kThreads * kRegVectors * kVec / 2 <= 32768
// At most 2048 resident threads per SM.
// braid:require kThreads * kMinBlocksPerSm <= 2048
// kStages only matters when staged.
// braid:require kStaged || kStages == 1
// The staged kernel has its own reductions (kRowInRegisters and kStats are the fallback's).
// braid:require kStaged == false || (kRowInRegisters && kStats == Stats::Online)
// Staged with kept exponentials has no streamed loop to unroll.
// braid:require kStaged == false || kKeepExp == false || kUnroll == 2
// Bulk copies move multiples of 16 bytes to 16-byte aligned shared memory: 16-byte vectors.
// braid:require kStaged == false || kVec == 8

namespace cand {

namespace cg = cooperative_groups;

constexpr int kWarps = kThreads / 32;
// Logits in the exponent's base: log2 units with the fast exp2, natural units otherwise.
constexpr float kScale = kFastExp ? softmax::kInvTemperature * 1.4426950408889634f : softmax::kInvTemperature;

// ex2.approx.ftz: one MUFU instruction. exp2f compiles to ex2.approx without ftz, which wraps it
// in a range check and two multiplies to keep denormal results; here those are probabilities
// below 1e-38, far under the tolerance, so flushing them to zero costs nothing.
__device__ __forceinline__ float ex(float a) {
  if constexpr (kFastExp) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(a));
    return r;
  } else {
    return expf(a);
  }
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

// A launch of `clusters` thread-block clusters of kClusterCtas CTAs (attribute: its storage).
inline cudaLaunchConfig_t launch_config(unsigned clusters, size_t shared_bytes, cudaStream_t stream, cudaLaunchAttribute* attribute) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(clusters * kClusterCtas);
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = kClusterCtas;
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  return config;
}

// ---- staged path: bulk copies (TMA) into shared memory, persistent clusters
namespace staged {

__device__ __forceinline__ uint32_t shared_address(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void barrier_init(uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(bar)) : "memory");
}

// One arrival that expects `bytes`, then the copy that delivers them (completes the phase).
__device__ __forceinline__ void load_slice(uint64_t* bar, void* dst, const void* src, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(bar)), "r"(bytes) : "memory");
  if (bytes > 0)
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(shared_address(dst)), "l"(src), "r"(bytes),
                 "r"(shared_address(bar))
                 : "memory");
}

__device__ __forceinline__ void wait_phase(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(shared_address(bar)),
      "r"(parity)
      : "memory");
}

// (max, sum) pairs over a warp: the max first, then each lane's sum rescaled to it once (one exp
// a lane instead of one per shuffle step). Every lane gets the result.
__device__ __forceinline__ float2 max_then_sum(float2 v) {
  float m = v.x;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  float s = v.x == -INFINITY ? 0.f : v.y * ex(v.x - m);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  return make_float2(m, s);
}

// v into `slot` of the cluster's CTA `peer`, completing 8 bytes on its barrier `bar`.
__device__ __forceinline__ void push_stats(float2* slot, uint64_t* bar, int peer, float2 v) {
  uint32_t remote_slot, remote_bar;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote_slot) : "r"(shared_address(slot)), "r"(peer));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote_bar) : "r"(shared_address(bar)), "r"(peer));
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];" ::"r"(remote_slot), "f"(v.x), "f"(v.y), "r"(remote_bar)
               : "memory");
}

__device__ __forceinline__ void cluster_sync() {
  if constexpr (kClusterCtas > 1) cg::this_cluster().sync();
  else __syncthreads();
}

// Grid: clusters x kClusterCtas CTAs; cluster c takes rows c, c + clusters, ... Every CTA of a
// cluster takes the same rows, so all meet at the same cluster barriers. kKeep: the thread's
// vectors are copied to registers, their exponentials (against the thread's own maximum) kept in
// fp32 and rescaled for the output, so the slice is free for the next copy as soon as the CTA has
// read it, and each element costs one exp; else each element is read twice from shared memory and
// exponentiated twice.
template <bool kKeep>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm)
    softmax_kernel(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ out, int64_t rows, int width, int slice_vectors) {
  extern __shared__ __align__(128) unsigned char stage_bytes[];
  Raw* stage = reinterpret_cast<Raw*>(stage_bytes);  // kStages slices of slice_vectors
  __shared__ uint64_t full[kStages];
  __shared__ float2 warp_part[kWarps];
  __shared__ float2 stats[2][kClusterCtas];  // per row parity: each CTA's (max, sum), pushed by it
  __shared__ uint64_t got[2];  // per row parity: the peers' pushes have landed
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int rank = 0;
  if constexpr (kClusterCtas > 1) rank = (int)cg::this_cluster().block_rank();
  const int64_t first = blockIdx.x / kClusterCtas, clusters = gridDim.x / kClusterCtas;
  const int nvec = width / kVec;
  const int v0 = rank * slice_vectors < nvec ? rank * slice_vectors : nvec;
  const int n = (v0 + slice_vectors < nvec ? v0 + slice_vectors : nvec) - v0;
  const uint32_t bytes = (uint32_t)n * (uint32_t)sizeof(Raw);
  const float2 none = make_float2(-INFINITY, 0.f);
  auto refill = [&](int s, int64_t row) {  // thread 0: stage s <- this CTA's slice of `row`
    const int64_t next = row + (int64_t)kStages * clusters;
    if (next < rows) load_slice(&full[s], stage + (int64_t)s * slice_vectors, x + next * width + (int64_t)v0 * kVec, bytes);
  };

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) barrier_init(&full[s]);
    barrier_init(&got[0]);
    barrier_init(&got[1]);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    for (int k = 0; k < kStages; ++k) refill(k, first - (int64_t)kStages * clusters + k * clusters);
  }
  cluster_sync();  // barriers initialised; every CTA of the cluster runs before any pushes to it

  int i = 0;
  for (int64_t row = first; row < rows; row += clusters, ++i) {
    const int s = i % kStages;
    wait_phase(&full[s], (uint32_t)(i / kStages) & 1u);
    const Raw* slice = stage + (int64_t)s * slice_vectors;
    float2 ms = none;
    float kept[kKeep ? kRegVectors : 1][kKeep ? kVec : 1];
    if constexpr (kKeep) {
      // Shared memory is read twice (max, then the exponentials) rather than held in registers
      // beside the kept exponentials: fewer registers, no spill at two CTAs an SM.
      __nv_bfloat162 top = __float2bfloat162_rn(-INFINITY);
#pragma unroll
      for (int k = 0; k < kRegVectors; ++k) {
        const int v = (int)threadIdx.x + k * kThreads;
        if (v < n) {
          const Raw r = slice[v];
#pragma unroll
          for (int j = 0; j < kVec / 2; ++j) top = __hmax2(top, reinterpret_cast<const __nv_bfloat162*>(&r)[j]);
        }
      }
      const float m = fmaxf(__low2float(top), __high2float(top)) * kScale;
      float sum = 0.f;
#pragma unroll
      for (int k = 0; k < kRegVectors; ++k) {
        const int v = (int)threadIdx.x + k * kThreads;
        if (v < n) {
          const Vec c{slice[v]};
#pragma unroll
          for (int j = 0; j < kVec / 2; ++j) {
            const float2 f = c.get(j);
            kept[k][2 * j] = ex(f.x * kScale - m);
            kept[k][2 * j + 1] = ex(f.y * kScale - m);
            sum += kept[k][2 * j] + kept[k][2 * j + 1];
          }
        }
      }
      ms = make_float2(m, sum);
    } else {
#pragma unroll kUnroll
      for (int v = threadIdx.x; v < n; v += kThreads) ms = vec_max_sum(Vec{slice[v]}, ms.x, ms.y);
    }
    const float own_max = ms.x;
    ms = max_then_sum(ms);
    if (lane == 0) warp_part[warp] = ms;
    __syncthreads();
    if (kKeep && threadIdx.x == 0) refill(s, row);  // every thread has its vectors in registers
    if (warp == 0) {
      ms = max_then_sum(lane < kWarps ? warp_part[lane] : none);
      // Each CTA pushes its pair into its peers' shared memory (st.async completes on the peer's
      // barrier), so a CTA waits only for its peers' data, not for a cluster-wide barrier.
      if (lane < kClusterCtas && lane != rank) push_stats(&stats[i & 1][rank], &got[i & 1], lane, ms);
      if (lane == rank) {
        stats[i & 1][rank] = ms;
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(&got[i & 1])), "r"(8 * (kClusterCtas - 1)) : "memory");
      }
    }
    // Every CTA's pair of this row has landed. Slot i & 1 is pushed again only for row i + 2, by a
    // peer that has had this CTA's row i + 1 pair, so after this CTA has read it.
    wait_phase(&got[i & 1], (uint32_t)(i >> 1) & 1u);
    // Lane r takes CTA r's pair: one exp a lane, not one per CTA.
    const float2 total = max_then_sum(lane < kClusterCtas ? stats[i & 1][lane] : none);
    const float inv = 1.0f / total.y;
    __nv_bfloat16* orow = out + row * width + (int64_t)v0 * kVec;
    if constexpr (kKeep) {
      const float factor = own_max != -INFINITY ? ex(own_max - total.x) * inv : 0.f;
#pragma unroll
      for (int k = 0; k < kRegVectors; ++k) {
        const int v = (int)threadIdx.x + k * kThreads;
        if (v < n) {
          Vec o;
#pragma unroll
          for (int j = 0; j < kVec / 2; ++j) o.set(j, kept[k][2 * j] * factor, kept[k][2 * j + 1] * factor);
          store_vec(orow + (int64_t)v * kVec, o);
        }
      }
    } else {
#pragma unroll kUnroll
      for (int v = threadIdx.x; v < n; v += kThreads) store_vec(orow + (int64_t)v * kVec, probabilities(Vec{slice[v]}, total.x, inv));
      __syncthreads();  // the slice is read: refill it
      if (threadIdx.x == 0) refill(s, row);
    }
  }
  cluster_sync();  // no CTA leaves while its pushes may be in flight
}

// Launch shape for a width, decided once per size in setup(): 0 clusters when the slices do not
// fit in shared memory (the other paths run instead).
struct Plan {
  int64_t rows = 0;
  int width = 0;
  bool keep = false;  // the kept-exponentials kernel (the thread's vectors fit kRegVectors)
  int slice_vectors = 0;
  size_t shared_bytes = 0;
  int clusters = 0;
};
inline Plan plan;

inline Plan make_plan(int64_t rows, int width) {
  Plan p;
  p.rows = rows;
  p.width = width;
  const int nvec = width / kVec;
  p.slice_vectors = (nvec + kClusterCtas - 1) / kClusterCtas;
  p.shared_bytes = (size_t)kStages * (size_t)p.slice_vectors * sizeof(Raw);
  int device = 0, optin = 0;
  BRAID_CUDA(cudaGetDevice(&device));
  BRAID_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const size_t fixed = sizeof(uint64_t) * kStages + sizeof(float2) * (kWarps + 2 * kClusterCtas) + 1024;
  if (p.shared_bytes + fixed > (size_t)optin) return Plan{rows, width};
  p.keep = kKeepExp && p.slice_vectors <= kThreads * kRegVectors;
  auto* kernel = p.keep ? softmax_kernel<true> : softmax_kernel<false>;
  BRAID_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)p.shared_bytes));
  cudaLaunchAttribute attribute[1];
  cudaLaunchConfig_t config = launch_config(1, p.shared_bytes, nullptr, attribute);
  int active = 0;
  BRAID_CUDA(cudaOccupancyMaxActiveClusters(&active, kernel, &config));
  if (active <= 0) return Plan{rows, width};
  // As many clusters as fit at once, but no more than the rows need: the slowest cluster takes
  // ceil(rows / active) rows either way.
  const int64_t per_cluster = (rows + active - 1) / active;
  p.clusters = (int)((rows + per_cluster - 1) / per_cluster);
  return p;
}

}  // namespace staged

}  // namespace cand

Requirements requirements(const Problem&) { return {}; }

void setup(Context& c) {
  if constexpr (kStaged) {
    const serving::Shape s = serving::shape_of(c.problem);
    cand::staged::plan = cand::staged::make_plan(s.rows, (int)s.width);
  }
}

void run(Context& c, cudaStream_t stream) {
  const serving::Shape s = serving::shape_of(c.problem);
  const __nv_bfloat16* x = serving::in_bf16(c, "logits");
  __nv_bfloat16* out = serving::out_bf16(c, "probs");
  const int width = (int)s.width;
  if constexpr (kStaged) {  // planned in setup(); again if a size runs without its setup
    if (cand::staged::plan.rows != s.rows || cand::staged::plan.width != width) cand::staged::plan = cand::staged::make_plan(s.rows, width);
  }
  if (kStaged && cand::staged::plan.clusters > 0) {
    const cand::staged::Plan& p = cand::staged::plan;
    cudaLaunchAttribute attribute[1];
    const cudaLaunchConfig_t config = cand::launch_config((unsigned)p.clusters, p.shared_bytes, stream, attribute);
    auto* kernel = p.keep ? cand::staged::softmax_kernel<true> : cand::staged::softmax_kernel<false>;
    BRAID_CUDA(cudaLaunchKernelEx(&config, kernel, x, out, (int64_t)s.rows, width, p.slice_vectors));
    BRAID_LAUNCHED();
    return;
  }
  if constexpr (kClusterCtas == 1) {
    cand::softmax_kernel<<<(unsigned)s.rows, kThreads, 0, stream>>>(x, out, width);
  } else {
    cudaLaunchAttribute attribute[1];
    const cudaLaunchConfig_t config = cand::launch_config((unsigned)s.rows, 0, stream, attribute);  // a cluster per row
    BRAID_CUDA(cudaLaunchKernelEx(&config, cand::softmax_kernel, x, out, width));
  }
  BRAID_LAUNCHED();
}

void teardown(Context&) {}
// EVOLVE-BLOCK-END

int main(int argc, char** argv) {
  return harness_main(argc, argv, softmax::make_workload(), Candidate{requirements, setup, run, teardown});
}
