// SiLU-and-mul for `braid evolve`: out[t] = bf16(silu(gate[t]) * up[t]) with x[t] = [gate | up],
// bf16, I = 14336..28672 (see silu_mul.cuh for buffers, reference, seed baseline and the
// copy-rate bound). Everything the candidate does, kernel included, is inside the EVOLVE-BLOCK;
// only includes and main() are frozen.
//
// The knobs:
//   kThreads            threads per block.
//   kVec                bf16 elements per load/store: 2 (4 bytes), 4 (8 bytes), 8 (16 bytes).
//   kVectorsPerThread   output vectors per thread per tile; all loads of a tile are issued before
//                       any math (memory-level parallelism).
//   kGrid               RowTiles: a 2D grid, y = row, x = tiles of a row (no division);
//                       Persistent: kBlocksPerSm blocks per SM walk all (row, tile) pairs.
//   kBlocksPerSm        Persistent: blocks per SM.
//   kFastExp            __expf (ex2.approx) instead of expf in silu.
//   kLoads              Plain, ReadOnly (ld.global.nc) or EvictFirst (ld.global.cs) for the input.
//   kStreamingStores    the output written with st.global.cs (evict-first).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "braid/harness.cuh"
#include "silu_mul.cuh"

using namespace braid::dev;

// EVOLVE-BLOCK-START silu_mul
enum class Grid { RowTiles, Persistent };
enum class Loads { Plain, ReadOnly, EvictFirst };

constexpr int kThreads = 256;  // braid:knob 128|256|512|1024
constexpr int kVec = 8;  // braid:knob 2|4|8
constexpr int kVectorsPerThread = 2;  // braid:knob 1|2|4|8
constexpr Grid kGrid = Grid::RowTiles;  // braid:knob Grid::RowTiles|Grid::Persistent
constexpr int kBlocksPerSm = 4;  // braid:knob 1|2|4|8
constexpr bool kFastExp = true;  // braid:knob
constexpr Loads kLoads = Loads::Plain;  // braid:knob Loads::Plain|Loads::ReadOnly|Loads::EvictFirst
constexpr bool kStreamingStores = false;  // braid:knob
// kBlocksPerSm only matters for the persistent grid; at most 2048 resident threads per SM.
// braid:require kGrid == Grid::Persistent || kBlocksPerSm == 4
// braid:require kGrid == Grid::RowTiles || kThreads * kBlocksPerSm <= 2048

namespace cand {

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
  const Raw* q = reinterpret_cast<const Raw*>(p);
  if constexpr (kLoads == Loads::ReadOnly) v.raw = __ldg(q);
  else if constexpr (kLoads == Loads::EvictFirst) v.raw = __ldcs(q);
  else v.raw = *q;
  return v;
}
__device__ __forceinline__ void store_vec(__nv_bfloat16* p, const Vec& v) {
  if constexpr (kStreamingStores) __stcs(reinterpret_cast<Raw*>(p), v.raw);
  else *reinterpret_cast<Raw*>(p) = v.raw;
}

__device__ __forceinline__ float silu(float g) {
  if constexpr (kFastExp) return g / (1.0f + __expf(-g));
  else return g / (1.0f + expf(-g));
}

constexpr int kTile = kThreads * kVectorsPerThread;  // vectors of one row per tile

// One tile: vectors [tile * kTile, (tile + 1) * kTile) of row `row`'s output.
__device__ __forceinline__ void do_tile(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ out, int64_t row, int tile, int width,
                                        int nvec) {
  const __nv_bfloat16* gate = x + row * 2 * (int64_t)width;
  const __nv_bfloat16* up = gate + width;
  __nv_bfloat16* o = out + row * (int64_t)width;
  Vec g[kVectorsPerThread], u[kVectorsPerThread];
#pragma unroll
  for (int k = 0; k < kVectorsPerThread; ++k) {
    const int v = tile * kTile + k * kThreads + (int)threadIdx.x;
    if (v < nvec) {
      g[k] = load_vec(gate + (int64_t)v * kVec);
      u[k] = load_vec(up + (int64_t)v * kVec);
    }
  }
#pragma unroll
  for (int k = 0; k < kVectorsPerThread; ++k) {
    const int v = tile * kTile + k * kThreads + (int)threadIdx.x;
    if (v < nvec) {
      Vec r;
#pragma unroll
      for (int j = 0; j < kVec / 2; ++j) {
        const float2 fg = g[k].get(j), fu = u[k].get(j);
        r.set(j, silu(fg.x) * fu.x, silu(fg.y) * fu.y);
      }
      store_vec(o + (int64_t)v * kVec, r);
    }
  }
}

__global__ void __launch_bounds__(kThreads) silu_mul_kernel(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ out, int64_t rows,
                                                            int width) {
  const int nvec = width / kVec;
  const int tiles = (nvec + kTile - 1) / kTile;
  if constexpr (kGrid == Grid::RowTiles) {
    for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) do_tile(x, out, row, (int)blockIdx.x, width, nvec);
  } else {
    const int64_t total = rows * (int64_t)tiles;
    for (int64_t t = blockIdx.x; t < total; t += gridDim.x) do_tile(x, out, t / tiles, (int)(t % tiles), width, nvec);
  }
}

}  // namespace cand

Requirements requirements(const Problem&) { return {}; }

void setup(Context&) {}

void run(Context& c, cudaStream_t stream) {
  const serving::Shape s = serving::shape_of(c.problem);
  const int nvec = (int)s.width / kVec;
  const int tiles = (nvec + cand::kTile - 1) / cand::kTile;
  dim3 grid;
  if constexpr (kGrid == Grid::RowTiles) {
    grid = dim3((unsigned)tiles, (unsigned)(s.rows < 65535 ? s.rows : 65535));
  } else {
    const int64_t total = s.rows * (int64_t)tiles, cap = (int64_t)c.sm_count * kBlocksPerSm;
    grid = dim3((unsigned)(total < cap ? total : cap));
  }
  cand::silu_mul_kernel<<<grid, kThreads, 0, stream>>>(serving::in_bf16(c, "x"), serving::out_bf16(c, "out"), s.rows, (int)s.width);
  BRAID_LAUNCHED();
}

void teardown(Context&) {}
// EVOLVE-BLOCK-END

int main(int argc, char** argv) {
  return harness_main(argc, argv, silu_mul::make_workload(), Candidate{requirements, setup, run, teardown});
}
