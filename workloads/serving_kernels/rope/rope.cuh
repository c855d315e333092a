// rope.cuh -- the frozen rotary-embedding workload (NeoX layout, on Q and K, as vLLM's
// rotary_embedding with is_neox=true), shared by seed.cu and gen0.cu.
//
// CONTRACT (shown to the LLM as documentation)
//   Size: rows * 1000000 + Hq * 128 (serving_kernels.cuh): T = rows tokens, Hq query heads of
//   kHeadDim = 128 (4096: 32 heads, an 8B Llama; 8192: 64 heads, 70B); kKvHeads = 8 key heads.
//   Buffers (row-major):
//     "positions"  Input  T u32       token t's position is position_of(positions[t]) (the low
//                                     17 bits: random draws are valid positions < kMaxPosition)
//     "q"          Input  T x Hq*128  bf16, head h of token t at [t][h*128, (h+1)*128)
//     "k"          Input  T x 8*128   bf16
//     "cos_sin"    State  kMaxPosition x 128 fp32: row p = cos(p f_0..63) then sin(p f_0..63),
//                                     f_i = kTheta^(-2i/128) (filled once by the workload)
//     "q_out", "k_out"  Output, shaped like q and k, bf16:
//       for i < 64, c = cos_sin[p][i], s = cos_sin[p][64 + i], x1 = x[i], x2 = x[64 + i]:
//       out[i] = x1 c - x2 s,  out[64 + i] = x2 c + x1 s   (fp32 arithmetic, per head)
//   Verified: every element against a reference in fp64, |got - exp| <= atol + rtol |exp|
//   (workload.yaml: rtol 0.02, atol 0.001). DRAM traffic: read q, k, positions and one cos_sin
//   row per token; write q_out, k_out.
//   Baseline (the seed): one thread per rotated pair (token, head, i), scalar loads.
#pragma once

#include <type_traits>

#include "serving_kernels.cuh"

namespace rope {

using serving::Shape;
constexpr int kHeadDim = 128;
constexpr int kHalf = kHeadDim / 2;
constexpr int kKvHeads = 8;
constexpr uint32_t kMaxPosition = 131072;  // a power of two: position_of is a mask
constexpr double kTheta = 500000.0;         // Llama 3's rope_theta

__host__ __device__ inline uint32_t position_of(uint32_t raw) { return raw & (kMaxPosition - 1); }

inline int64_t q_heads(const Shape& s) {
  if (s.width % kHeadDim != 0)
    throw serving::DeviceError("rope: width " + std::to_string(s.width) + " is not a whole number of 128-wide query heads");
  return s.width / kHeadDim;
}

template <int kUnused = 0>
__global__ void fill_cos_sin_kernel(float* table) {
  const int64_t n = (int64_t)kMaxPosition * kHalf;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t p = i / kHalf, j = i % kHalf;
    const double angle = (double)p * pow(kTheta, -2.0 * (double)j / (double)kHeadDim);
    table[p * kHeadDim + j] = (float)cos(angle);
    table[p * kHeadDim + kHalf + j] = (float)sin(angle);
  }
}

// One thread per rotated pair of (tensor, token, head, i); the reference computes in fp64.
template <bool kReference>
__global__ void pair_kernel(const uint32_t* positions, const __nv_bfloat16* q, const __nv_bfloat16* k, const float* cos_sin, __nv_bfloat16* q_out,
                            __nv_bfloat16* k_out, int64_t rows, int64_t hq) {
  using Real = typename std::conditional<kReference, double, float>::type;
  const int64_t q_pairs = rows * hq * kHalf, n = q_pairs + rows * kKvHeads * kHalf;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const bool is_q = i < q_pairs;
    const int64_t j = is_q ? i : i - q_pairs, heads = is_q ? hq : kKvHeads;
    const int64_t t = j / (heads * kHalf), h = (j / kHalf) % heads, d = j % kHalf;
    const __nv_bfloat16* x = (is_q ? q : k) + (t * heads + h) * kHeadDim;
    __nv_bfloat16* o = (is_q ? q_out : k_out) + (t * heads + h) * kHeadDim;
    const float* row = cos_sin + (int64_t)position_of(positions[t]) * kHeadDim;
    const Real c = row[d], s = row[kHalf + d];
    const Real x1 = __bfloat162float(x[d]), x2 = __bfloat162float(x[kHalf + d]);
    o[d] = __float2bfloat16((float)(x1 * c - x2 * s));
    o[kHalf + d] = __float2bfloat16((float)(x2 * c + x1 * s));
  }
}

inline braid::dev::Workload make_workload() {
  using braid::dev::BufferSpec;
  using braid::dev::Context;
  using braid::dev::DType;
  using braid::dev::Role;
  serving::OpSpec op;
  op.name = "rope";
  op.buffers = [](const Shape& s) {
    const size_t t = (size_t)s.rows, hq = (size_t)q_heads(s);
    return std::vector<BufferSpec>{{"positions", Role::Input, DType::U32, t, false},
                                   {"q", Role::Input, DType::BF16, t * hq * kHeadDim, false},
                                   {"k", Role::Input, DType::BF16, t * kKvHeads * kHeadDim, false},
                                   {"cos_sin", Role::State, DType::F32, (size_t)kMaxPosition * kHeadDim, false},
                                   {"q_out", Role::Output, DType::BF16, t * hq * kHeadDim, false},
                                   {"k_out", Role::Output, DType::BF16, t * kKvHeads * kHeadDim, false}};
  };
  op.read_bytes = [](const Shape& s) {
    const double t = (double)s.rows;
    return t * (double)(q_heads(s) + kKvHeads) * kHeadDim * 2.0 + t * 4.0 + t * kHeadDim * 4.0;
  };
  op.write_bytes = [](const Shape& s) { return (double)s.rows * (double)(q_heads(s) + kKvHeads) * kHeadDim * 2.0; };
  op.init = [](Context& c) {
    fill_cos_sin_kernel<><<<1024, 256, 0, c.stream>>>(c.buffer("cos_sin").as<float>());
    BRAID_LAUNCHED();
    BRAID_CUDA(cudaStreamSynchronize(c.stream));
  };
  auto launch = [](bool reference) {
    return [reference](Context& c, cudaStream_t stream) {
      const Shape s = serving::shape_of(c.problem);
      const int64_t hq = q_heads(s), pairs = s.rows * (hq + kKvHeads) * kHalf;
      auto* kernel = reference ? pair_kernel<true> : pair_kernel<false>;
      kernel<<<serving::grid_for(pairs, 256, 1 << 30), 256, 0, stream>>>(c.buffer("positions").as<const uint32_t>(), serving::in_bf16(c, "q"),
                                                                         serving::in_bf16(c, "k"), c.buffer("cos_sin").as<const float>(),
                                                                         serving::out_bf16(c, "q_out"), serving::out_bf16(c, "k_out"), s.rows, hq);
      BRAID_LAUNCHED();
    };
  };
  op.reference = launch(true);
  op.seed = launch(false);
  return serving::make_workload(op);
}

}  // namespace rope
