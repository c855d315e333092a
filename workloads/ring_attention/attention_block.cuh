// attention_block.cuh -- the attention kernels of the ring attention workload (frozen: seed, gen0
// and the reference all use them, so a candidate's gain is the co-design, not a better kernel).
//
//   attention_block_kernel   flash attention of one query block against ONE key/value block,
//                            folded into running online-softmax state (fp32 O, row max m, row sum
//                            l). Tensor cores: mma.sync m16n8k16 bf16 with fp32 accumulation,
//                            ldmatrix from XOR-swizzled shared memory, cp.async double-buffered
//                            K/V tiles. Head dim 128; GQA (Hq a multiple of Hkv); causal masking
//                            by GLOBAL positions, so any placement of the blocks works (contiguous
//                            or zig-zag: a block may be two runs of the sequence).
//   finalize_kernel          O / l -> bf16 (when the last block was not run with finalize).
//   reference_attention_kernel  unsplit attention in fp32 on CUDA cores (no tensor cores, no bf16
//                            rounding of P): the verification route.
//
// Layouts (batch 1): Q, O [tokens][Hq][128] bf16; K, V [tokens][Hkv][128] bf16 (one rank's block
// is contiguous either way). State: o_acc [tokens][Hq][128] fp32; m, l [Hq][tokens] fp32, m in
// log2 units already multiplied by the softmax scale (1/sqrt(128) * log2 e), l the full row sum.
// Block lengths: queries a multiple of kBlockM (128), keys of kBlockN (64, or 32), and so each run of a
// two-run (zig-zag) block.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "braid/harness.cuh"
#include "ring_shape.hpp"

namespace ring_attention {

using bf16 = __nv_bfloat16;

// Two shapes of the same CTA tile (128 query rows), chosen at compile time:
//   1 (default): 8 warps x 16 rows, the warp's Q fragments held in registers, one CTA per SM (248
//                registers a thread);
//   2:           4 warps x 32 rows (two 16-row m-tiles per warp, Q fragments re-read from shared
//                memory), 32-key tiles (the registers of two m-tiles' scores), two CTAs per SM:
//                every K/V fragment a warp loads feeds twice the MMAs, half the shared-memory
//                traffic per FLOP.
// bench/block_bench.cu verifies and times both (-DRING_ATTENTION_ROW_TILES=2).
#ifndef RING_ATTENTION_ROW_TILES
#define RING_ATTENTION_ROW_TILES 1
#endif
constexpr int kRowTiles = RING_ATTENTION_ROW_TILES;  // 16-row m-tiles per warp
static_assert(kRowTiles == 1 || kRowTiles == 2, "RING_ATTENTION_ROW_TILES must be 1 or 2");
constexpr int kBlockM = 128;  // query rows per CTA
constexpr int kBlockN = kRowTiles == 1 ? 64 : 32;  // keys per tile
constexpr int kKeyFrags = kBlockN / 8;             // 8-key accumulator fragments per row tile
constexpr int kWarps = kBlockM / (16 * kRowTiles);
constexpr int kThreads = kWarps * 32;
constexpr int kCtasPerSm = kRowTiles;  // what the register budget allows (__launch_bounds__)
// K/V tiles in flight: tile i + 1 loads while tile i is computed; a third stage lets the refill
// of the stage tile i - 1 used wait for nothing but the barrier at the top of the next tile, so
// there is one __syncthreads per tile (the warps drift apart by up to a phase: one warp's softmax
// overlaps another's MMAs).
constexpr int kStages = 3;
// Q tile + kStages stages of (K tile, V tile), bf16: 128 KiB (one row tile), 80 KiB (two).
constexpr size_t kBlockSmem = (size_t)(kBlockM + 2 * kStages * kBlockN) * kHeadDim * 2;

struct BlockArgs {
  const bf16* q = nullptr;  // [q_len][hq][128]
  const bf16* k = nullptr;  // [kv_len][hkv][128]
  const bf16* v = nullptr;
  float* o_acc = nullptr;   // [q_len][hq][128]   (unused when first && finalize)
  float* m = nullptr;       // [hq][q_len]
  float* l = nullptr;       // [hq][q_len]
  bf16* out = nullptr;      // [q_len][hq][128]   (finalize only)
  int q_len = 0, kv_len = 0, hq = 0, hkv = 0;
  Positions q_pos, k_pos;
  bool first = true;        // start from empty state (m = -inf, l = 0, O = 0) instead of loading it
  bool finalize = true;     // write out = O / l in bf16 instead of storing the state
};

// ---- PTX helpers ---------------------------------------------------------------------------------

__device__ inline uint32_t smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ inline void cp_async16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ inline void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// c += a (16x16, row) * b (16x8, col), bf16 in, fp32 accumulate.
__device__ inline void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ inline float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ inline uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// A tile row is 128 bf16 = 16 chunks of 16 bytes; chunk c of row r sits at c ^ (r % 8), so the 8
// rows one ldmatrix reads at the same logical chunk fall in 8 different bank groups.
__device__ inline uint32_t tile_addr(uint32_t base, int row, int col) {
  return base + (uint32_t)((row * kHeadDim + ((((col >> 3) ^ (row & 7))) << 3)) * 2);
}

// kRows x 128 tile from global (row stride `stride` elements) into swizzled shared memory.
template <int kRows>
__device__ inline void load_tile_async(uint32_t base, const bf16* g, size_t stride) {
#pragma unroll
  for (int i = 0; i < kRows * 16 / kThreads; ++i) {
    const int c = threadIdx.x + i * kThreads, row = c >> 4, ch = c & 15;
    cp_async16(tile_addr(base, row, ch * 8), g + (size_t)row * stride + ch * 8);
  }
}

// How many key tiles of one run [start, start + tiles * 64) a query tile whose last position is
// q_last needs: all when not causal, else those whose first key is <= q_last.
__device__ inline int needed_tiles(bool causal, int start, int tiles, int q_last) {
  if (!causal) return tiles;
  if (q_last < start) return 0;
  const int n = (q_last - start) / kBlockN + 1;
  return n < tiles ? n : tiles;
}

// ---- the block kernel ----------------------------------------------------------------------------

// The running state of one thread's rows: m-tile mi, r = 0 for row g and r = 1 for row g + 8 of
// the m-tile; o[mi][j] covers columns 8j + 2t and 8j + 2t + 1. l is this thread's partial row sum
// (the quad's four are added at the end).
struct RowState {
  float o[kRowTiles][16][4];
  float m[kRowTiles][2], l[kRowTiles][2];
};

// Where this thread sits: warp_row0 is the warp's first row in the tile.
struct LaneMap {
  int warp_row0, lane, g, t;
  __device__ int row(int q0, int mi, int r) const { return q0 + warp_row0 + 16 * mi + g + 8 * r; }
};

// Empty state (first block), or the one stored by the previous call.
__device__ __forceinline__ void load_state(RowState& st, const BlockArgs& a, int h, int q0, const LaneMap& p) {
#pragma unroll
  for (int mi = 0; mi < kRowTiles; ++mi)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (a.first) {
#pragma unroll
        for (int j = 0; j < 16; ++j) st.o[mi][j][2 * r] = st.o[mi][j][2 * r + 1] = 0.f;
        st.m[mi][r] = -INFINITY;
        st.l[mi][r] = 0.f;
        continue;
      }
      const int row = p.row(q0, mi, r);
      const float* src = a.o_acc + ((size_t)row * a.hq + h) * kHeadDim + 2 * p.t;
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const float2 x = *reinterpret_cast<const float2*>(src + 8 * j);
        st.o[mi][j][2 * r] = x.x, st.o[mi][j][2 * r + 1] = x.y;
      }
      st.m[mi][r] = a.m[(size_t)h * a.q_len + row];
      st.l[mi][r] = p.t == 0 ? a.l[(size_t)h * a.q_len + row] : 0.f;  // one thread of the quad carries the sum
    }
}

// Q fragment address: m-tile mi, dims [16 kk, 16 kk + 16) (mma A operand, 4 8x8 matrices).
__device__ __forceinline__ uint32_t q_frag_addr(uint32_t sQ, const LaneMap& p, int mi, int kk) {
  return tile_addr(sQ, p.warp_row0 + 16 * mi + (p.lane & 7) + ((p.lane >> 3) & 1) * 8, kk * 16 + (p.lane >> 4) * 8);
}

// s = Q K^T for every m-tile's 16 rows x kBlockN keys of the tile at sK: s[mi][j] is keys 8j..8j+7.
// qf holds the warp's Q fragments when kRowTiles == 1; otherwise they are read from sQ per step.
template <int kQRegs>
__device__ __forceinline__ void tile_scores(float (&s)[kRowTiles][kKeyFrags][4], const uint32_t (&qf)[kQRegs][4], uint32_t sQ, uint32_t sK,
                                            const LaneMap& p) {
#pragma unroll
  for (int mi = 0; mi < kRowTiles; ++mi)
#pragma unroll
    for (int j = 0; j < kKeyFrags; ++j) s[mi][j][0] = s[mi][j][1] = s[mi][j][2] = s[mi][j][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) {
    uint32_t qa[kRowTiles][4];
#pragma unroll
    for (int mi = 0; mi < kRowTiles; ++mi) {
      if constexpr (kQRegs == 8) {
#pragma unroll
        for (int x = 0; x < 4; ++x) qa[mi][x] = qf[kk][x];
      } else {
        ldmatrix_x4(qa[mi], q_frag_addr(sQ, p, mi, kk));
      }
    }
#pragma unroll
    for (int np = 0; np < kKeyFrags / 2; ++np) {
      uint32_t b[4];  // K rows are the B operand's columns: no transpose
      ldmatrix_x4(b, tile_addr(sK, np * 16 + (p.lane & 7) + (p.lane >> 4) * 8, kk * 16 + ((p.lane >> 3) & 1) * 8));
#pragma unroll
      for (int mi = 0; mi < kRowTiles; ++mi) {
        mma_bf16(s[mi][2 * np], qa[mi], b[0], b[1]);
        mma_bf16(s[mi][2 * np + 1], qa[mi], b[2], b[3]);
      }
    }
  }
}

// Causal mask by global position: kg0 is the tile's first key, q_first the warp's first query.
__device__ __forceinline__ void mask_scores(float (&s)[kRowTiles][kKeyFrags][4], int kg0, int q_first, const LaneMap& p) {
#pragma unroll
  for (int mi = 0; mi < kRowTiles; ++mi) {
    const int qm = q_first + 16 * mi;
    if (kg0 + kBlockN - 1 <= qm) continue;  // every key at or before every row of the m-tile
#pragma unroll
    for (int j = 0; j < kKeyFrags; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int key = kg0 + 8 * j + 2 * p.t + (c & 1), qpos = qm + p.g + (c >> 1) * 8;
        if (key > qpos) s[mi][j][c] = -INFINITY;
      }
  }
}

// Online softmax over the tile: new row max, rescale of O and l, s becomes P (unnormalized).
__device__ __forceinline__ void softmax_step(float (&s)[kRowTiles][kKeyFrags][4], RowState& st, float scale_log2) {
#pragma unroll
  for (int mi = 0; mi < kRowTiles; ++mi)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < kKeyFrags; ++j) mx = fmaxf(mx, fmaxf(s[mi][j][2 * r], s[mi][j][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));  // a quad of threads shares a row
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(st.m[mi][r], mx * scale_log2);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;  // a row with no key yet stays empty
      const float alpha = fast_exp2(st.m[mi][r] - m_use);
      st.m[mi][r] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < kKeyFrags; ++j) {
        s[mi][j][2 * r] = fast_exp2(fmaf(s[mi][j][2 * r], scale_log2, -m_use));
        s[mi][j][2 * r + 1] = fast_exp2(fmaf(s[mi][j][2 * r + 1], scale_log2, -m_use));
        sum += s[mi][j][2 * r] + s[mi][j][2 * r + 1];
      }
      st.l[mi][r] = st.l[mi][r] * alpha + sum;
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        st.o[mi][j][2 * r] *= alpha;
        st.o[mi][j][2 * r + 1] *= alpha;
      }
    }
}

// O += P V for the tile at sV: P's accumulators become A fragments of 16 keys each.
__device__ __forceinline__ void accumulate_pv(RowState& st, const float (&s)[kRowTiles][kKeyFrags][4], uint32_t sV, const LaneMap& p) {
#pragma unroll
  for (int kk = 0; kk < kKeyFrags / 2; ++kk) {
    uint32_t pa[kRowTiles][4];
#pragma unroll
    for (int mi = 0; mi < kRowTiles; ++mi) {
      pa[mi][0] = pack_bf16(s[mi][2 * kk][0], s[mi][2 * kk][1]);
      pa[mi][1] = pack_bf16(s[mi][2 * kk][2], s[mi][2 * kk][3]);
      pa[mi][2] = pack_bf16(s[mi][2 * kk + 1][0], s[mi][2 * kk + 1][1]);
      pa[mi][3] = pack_bf16(s[mi][2 * kk + 1][2], s[mi][2 * kk + 1][3]);
    }
#pragma unroll
    for (int dp = 0; dp < 8; ++dp) {
      uint32_t b[4];  // V rows are keys, the B operand's k dimension: transposed load
      ldmatrix_x4_trans(b, tile_addr(sV, kk * 16 + (p.lane & 7) + ((p.lane >> 3) & 1) * 8, dp * 16 + (p.lane >> 4) * 8));
#pragma unroll
      for (int mi = 0; mi < kRowTiles; ++mi) {
        mma_bf16(st.o[mi][2 * dp], pa[mi], b[0], b[1]);
        mma_bf16(st.o[mi][2 * dp + 1], pa[mi], b[2], b[3]);
      }
    }
  }
}

// The end of the call: out = O / l in bf16 (finalize), or the state for the next call.
__device__ __forceinline__ void write_state(RowState& st, const BlockArgs& a, int h, int q0, const LaneMap& p) {
#pragma unroll
  for (int mi = 0; mi < kRowTiles; ++mi)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = st.l[mi][r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int row = p.row(q0, mi, r);
      const size_t at = ((size_t)row * a.hq + h) * kHeadDim + 2 * p.t;
      if (a.finalize) {
        const float inv = sum > 0.f ? 1.f / sum : 0.f;
#pragma unroll
        for (int j = 0; j < 16; ++j)
          *reinterpret_cast<uint32_t*>(a.out + at + 8 * j) = pack_bf16(st.o[mi][j][2 * r] * inv, st.o[mi][j][2 * r + 1] * inv);
      } else {
#pragma unroll
        for (int j = 0; j < 16; ++j)
          *reinterpret_cast<float2*>(a.o_acc + at + 8 * j) = make_float2(st.o[mi][j][2 * r], st.o[mi][j][2 * r + 1]);
        if (p.t == 0) {
          a.m[(size_t)h * a.q_len + row] = st.m[mi][r];
          a.l[(size_t)h * a.q_len + row] = sum;
        }
      }
    }
}

// One CTA's work: query tile `q_tile` (rows [128 q_tile, 128 q_tile + 128)) of head h against
// every key tile of the block. CTA = kWarps warps (kThreads); warp w owns query rows
// [16 kRowTiles w, 16 kRowTiles (w + 1)). kBlockSmem bytes of dynamic shared memory: Q, then kStages
// stages of (K tile, V tile). A device function, so that a program may launch it inside a kernel
// of its own (with other CTAs doing other work).
template <bool kCausal>
__device__ __forceinline__ void attention_tile(const BlockArgs& a, int h, int q_tile) {
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sQ = smem_u32(smem);
  const uint32_t sK0 = sQ + kBlockM * kHeadDim * 2;
  const uint32_t kTileBytes = kBlockN * kHeadDim * 2;
  const uint32_t sV0 = sK0 + kStages * kTileBytes;
  const int kvh = h / (a.hq / a.hkv), q0 = q_tile * kBlockM;
  const LaneMap p{(int)(threadIdx.x >> 5) * 16 * kRowTiles, (int)(threadIdx.x & 31), (int)((threadIdx.x & 31) >> 2), (int)(threadIdx.x & 3)};
  const int qg0 = a.q_pos.global(q0);  // a query tile never straddles the two runs

  // Key tiles: run 0 then run 1, each cut to the tiles the causal mask leaves.
  const int len0 = a.k_pos.len0 < a.kv_len ? a.k_pos.len0 : a.kv_len;
  const int tiles0 = len0 / kBlockN, tiles1 = (a.kv_len - len0) / kBlockN;
  const int n0 = needed_tiles(kCausal, a.k_pos.start0, tiles0, qg0 + kBlockM - 1);
  const int ntiles = n0 + needed_tiles(kCausal, a.k_pos.start1, tiles1, qg0 + kBlockM - 1);
  if (ntiles == 0 && !a.first && !a.finalize) return;  // nothing to fold in, state stays as it is

  const size_t kv_stride = (size_t)a.hkv * kHeadDim;
  auto tile_of = [&](int i) { return i < n0 ? i : tiles0 + (i - n0); };
  auto load_kv = [&](int i, int stage) {
    const size_t row0 = (size_t)tile_of(i) * kBlockN;
    load_tile_async<kBlockN>(sK0 + stage * kTileBytes, a.k + (row0 * a.hkv + kvh) * kHeadDim, kv_stride);
    load_tile_async<kBlockN>(sV0 + stage * kTileBytes, a.v + (row0 * a.hkv + kvh) * kHeadDim, kv_stride);
  };
  load_tile_async<kBlockM>(sQ, a.q + ((size_t)q0 * a.hq + h) * kHeadDim, (size_t)a.hq * kHeadDim);
  if (ntiles > 0) load_kv(0, 0);
  cp_async_commit();

  RowState st;
  load_state(st, a, h, q0, p);
  cp_async_wait<0>();
  __syncthreads();
  constexpr int kQRegs = kRowTiles == 1 ? 8 : 1;  // one m-tile: the warp's Q fragments stay in registers
  uint32_t qf[kQRegs][4];
  if constexpr (kQRegs == 8) {
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) ldmatrix_x4(qf[kk], q_frag_addr(sQ, p, 0, kk));
  }
  const float scale_log2 = 1.4426950408889634f / sqrtf((float)kHeadDim);

  for (int i = 0; i < ntiles; ++i) {
    // Stage (i + 1) % 3 was last read at tile i - 2, which every warp has left: all of them passed
    // the barrier below at tile i - 1.
    const int stage = i % kStages;
    if (i + 1 < ntiles) load_kv(i + 1, (i + 1) % kStages);  // lands while this tile is computed
    cp_async_commit();
    cp_async_wait<1>();  // tile i has landed (this thread's copies) ...
    __syncthreads();     // ... and every thread's
    float s[kRowTiles][kKeyFrags][4];
    tile_scores(s, qf, sQ, sK0 + stage * kTileBytes, p);
    if constexpr (kCausal) mask_scores(s, a.k_pos.global(tile_of(i) * kBlockN), qg0 + p.warp_row0, p);
    softmax_step(s, st, scale_log2);
    accumulate_pv(st, s, sV0 + stage * kTileBytes, p);
  }
  cp_async_wait<0>();
  write_state(st, a, h, q0, p);
}

// Grid (hq, q_len / 128). Query tiles are taken last-first so that the longest causal rows start
// first.
template <bool kCausal>
__global__ void __launch_bounds__(kThreads, kCtasPerSm) attention_block_kernel(BlockArgs a) {
  attention_tile<kCausal>(a, blockIdx.x, gridDim.y - 1 - blockIdx.y);
}

// Opts a kernel that runs attention_tile in to kBlockSmem of dynamic shared memory (once per kernel).
inline void allow_block_smem(const void* kernel) {
  BRAID_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kBlockSmem));
}

// out = o_acc / l, bf16.
template <int kUnused = 0>
__global__ void finalize_kernel(const float* o_acc, const float* l, bf16* out, int q_len, int hq) {
  const size_t n = (size_t)q_len * hq * kHeadDim;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const size_t row = i / ((size_t)hq * kHeadDim), h = (i / kHeadDim) % (size_t)hq;
    const float sum = l[h * (size_t)q_len + row];
    out[i] = __float2bfloat16(sum > 0.f ? o_acc[i] / sum : 0.f);
  }
}

// The block constraints, one line naming the problem.
inline void check_block_args(const BlockArgs& a) {
  using braid::dev::DeviceError;
  if (a.q_len <= 0 || a.q_len % kBlockM != 0 || a.kv_len % kBlockN != 0)
    throw DeviceError("attention block: q_len " + std::to_string(a.q_len) + " must be a positive multiple of 128 and kv_len " +
                      std::to_string(a.kv_len) + " a multiple of " + std::to_string(kBlockN));
  if (a.hkv <= 0 || a.hq % a.hkv != 0) throw DeviceError("attention block: Hq must be a multiple of Hkv");
  if (a.q_pos.len0 % kBlockM != 0 || a.k_pos.len0 % kBlockN != 0)
    throw DeviceError("attention block: each run of a two-run block must be whole tiles (128 queries, " + std::to_string(kBlockN) + " keys)");
}

// Checks the block constraints and launches attention_block_kernel.
inline void launch_attention_block(const BlockArgs& a, bool causal, cudaStream_t stream) {
  check_block_args(a);
  static bool configured[2] = {false, false};  // the smem opt-in, once per instantiation
  auto kernel = causal ? attention_block_kernel<true> : attention_block_kernel<false>;
  if (!configured[causal]) {
    allow_block_smem((const void*)kernel);
    configured[causal] = true;
  }
  kernel<<<dim3(a.hq, a.q_len / kBlockM), kThreads, kBlockSmem, stream>>>(a);
  BRAID_LAUNCHED();
}

inline void launch_finalize(const float* o_acc, const float* l, bf16* out, int q_len, int hq, int ctas, cudaStream_t stream) {
  finalize_kernel<><<<ctas, 256, 0, stream>>>(o_acc, l, out, q_len, hq);
  BRAID_LAUNCHED();
}

// ---- the reference -------------------------------------------------------------------------------

constexpr int kRefRows = 64, kRefKeys = 64, kRefThreads = 256;
constexpr size_t kRefSmem = ((size_t)kRefRows * kHeadDim + (size_t)kRefKeys * (kHeadDim + 1) + (size_t)kRefRows * (kRefKeys + 1) +
                             3 * (size_t)kRefRows) * 4;

// Unsplit attention, everything in fp32 (exp, P and the accumulation), output rounded to bf16 once.
// Keys are the whole sequence in order (positions 0..kv_len-1); query rows sit at q_pos. Grid
// (hq, q_len / 64); thread (ty, tx) = (tid / 16, tid % 16) owns rows 4ty..4ty+3.
template <bool kCausal>
__global__ void __launch_bounds__(kRefThreads) reference_attention_kernel(const bf16* q, const bf16* k, const bf16* v, bf16* out, int q_len,
                                                                          int kv_len, int hq, int hkv, Positions q_pos) {
  extern __shared__ float ref_smem[];
  float* sQ = ref_smem;                                // [64][128]
  float* sKV = sQ + kRefRows * kHeadDim;               // [64][129]
  float* sP = sKV + kRefKeys * (kHeadDim + 1);         // [64][65]
  float* sM = sP + kRefRows * (kRefKeys + 1);          // running max (natural log units)
  float* sL = sM + kRefRows;                           // running sum
  float* sAlpha = sL + kRefRows;                       // this chunk's rescale
  const int h = blockIdx.x, kvh = h / (hq / hkv), r0 = blockIdx.y * kRefRows;
  const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
  const float scale = 1.f / sqrtf((float)kHeadDim);
  for (int i = tid; i < kRefRows * kHeadDim; i += kRefThreads)
    sQ[i] = __bfloat162float(q[((size_t)(r0 + i / kHeadDim) * hq + h) * kHeadDim + i % kHeadDim]);
  if (tid < kRefRows) sM[tid] = -INFINITY, sL[tid] = 0.f;
  int last_pos = 0;
  for (int r = 0; r < kRefRows; ++r) last_pos = max(last_pos, q_pos.global(r0 + r));
  const int key_end = kCausal ? min(kv_len, last_pos + 1) : kv_len;
  float acc[4][8] = {};
  for (int c0 = 0; c0 < key_end; c0 += kRefKeys) {
    __syncthreads();
    for (int i = tid; i < kRefKeys * kHeadDim; i += kRefThreads) {
      const int key = c0 + i / kHeadDim;
      sKV[(i / kHeadDim) * (kHeadDim + 1) + i % kHeadDim] =
          key < kv_len ? __bfloat162float(k[((size_t)key * hkv + kvh) * kHeadDim + i % kHeadDim]) : 0.f;
    }
    __syncthreads();
    float dot[4][4] = {};
    for (int d = 0; d < kHeadDim; ++d) {
      float qa[4], kb[4];
      for (int rr = 0; rr < 4; ++rr) qa[rr] = sQ[(ty * 4 + rr) * kHeadDim + d];
      for (int cc = 0; cc < 4; ++cc) kb[cc] = sKV[(tx + 16 * cc) * (kHeadDim + 1) + d];
      for (int rr = 0; rr < 4; ++rr)
        for (int cc = 0; cc < 4; ++cc) dot[rr][cc] += qa[rr] * kb[cc];
    }
    for (int rr = 0; rr < 4; ++rr)
      for (int cc = 0; cc < 4; ++cc) {
        const int row = ty * 4 + rr, key = tx + 16 * cc;
        const bool masked = c0 + key >= kv_len || (kCausal && c0 + key > q_pos.global(r0 + row));
        sP[row * (kRefKeys + 1) + key] = masked ? -INFINITY : dot[rr][cc] * scale;
      }
    __syncthreads();
    if (tid < kRefRows) {
      float mx = sM[tid];
      for (int j = 0; j < kRefKeys; ++j) mx = fmaxf(mx, sP[tid * (kRefKeys + 1) + j]);
      const float alpha = mx == -INFINITY ? 1.f : expf(sM[tid] - mx);
      float sum = 0.f;
      for (int j = 0; j < kRefKeys; ++j) {
        float& p = sP[tid * (kRefKeys + 1) + j];
        p = p == -INFINITY ? 0.f : expf(p - mx);
        sum += p;
      }
      sL[tid] = sL[tid] * alpha + sum;
      sM[tid] = mx;
      sAlpha[tid] = alpha;
    }
    __syncthreads();
    for (int i = tid; i < kRefKeys * kHeadDim; i += kRefThreads) {
      const int key = c0 + i / kHeadDim;
      sKV[(i / kHeadDim) * (kHeadDim + 1) + i % kHeadDim] =
          key < kv_len ? __bfloat162float(v[((size_t)key * hkv + kvh) * kHeadDim + i % kHeadDim]) : 0.f;
    }
    __syncthreads();
    for (int rr = 0; rr < 4; ++rr)
      for (int cc = 0; cc < 8; ++cc) acc[rr][cc] *= sAlpha[ty * 4 + rr];
    for (int j = 0; j < kRefKeys; ++j) {
      float p[4], vv[8];
      for (int rr = 0; rr < 4; ++rr) p[rr] = sP[(ty * 4 + rr) * (kRefKeys + 1) + j];
      for (int cc = 0; cc < 8; ++cc) vv[cc] = sKV[j * (kHeadDim + 1) + tx + 16 * cc];
      for (int rr = 0; rr < 4; ++rr)
        for (int cc = 0; cc < 8; ++cc) acc[rr][cc] += p[rr] * vv[cc];
    }
  }
  __syncthreads();
  for (int rr = 0; rr < 4; ++rr) {
    const int row = ty * 4 + rr;
    const float sum = sL[row];
    for (int cc = 0; cc < 8; ++cc)
      out[((size_t)(r0 + row) * hq + h) * kHeadDim + tx + 16 * cc] = __float2bfloat16(sum > 0.f ? acc[rr][cc] / sum : 0.f);
  }
}

// Reference over the whole sequence: k, v hold every key in order; q's rows sit at q_pos.
inline void launch_reference(const bf16* q, const bf16* k, const bf16* v, bf16* out, int q_len, int kv_len, int hq, int hkv, Positions q_pos,
                             bool causal, cudaStream_t stream) {
  using braid::dev::DeviceError;
  if (q_len % kRefRows != 0) throw DeviceError("reference attention: q_len must be a multiple of 64");
  static bool configured[2] = {false, false};
  auto kernel = causal ? reference_attention_kernel<true> : reference_attention_kernel<false>;
  if (!configured[causal]) {
    BRAID_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kRefSmem));
    configured[causal] = true;
  }
  kernel<<<dim3(hq, q_len / kRefRows), kRefThreads, kRefSmem, stream>>>(q, k, v, out, q_len, kv_len, hq, hkv, q_pos);
  BRAID_LAUNCHED();
}

// FLOPs of attention over S queries and keys (two GEMMs of 2 * S * S * 128 per head; causal: half,
// the convention FlashAttention's and PyTorch's benchmarks use).
inline double attention_flops(double seq, int hq, bool causal) { return 4.0 * seq * seq * hq * kHeadDim * (causal ? 0.5 : 1.0); }

}  // namespace ring_attention
