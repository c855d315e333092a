// add_rmsnorm.cuh -- the frozen fused residual-add + RMSNorm workload (a decoder layer's
// post-attention / post-MLP norm, as vLLM's fused_add_rms_norm), shared by seed.cu and gen0.cu.
//
// CONTRACT (shown to the LLM as documentation)
//   Size: rows * 1000000 + H (serving_kernels.cuh): T = rows tokens, hidden size H.
//   Buffers (row-major, bf16):
//     "x"            Input  T x H   the sub-layer's output
//     "residual"     Input  T x H   the residual stream
//     "weight"       Input  H       RMSNorm's gain
//     "residual_out" Output T x H   s = bf16(x + residual)          (the new residual stream)
//     "out"          Output T x H   bf16(s * rsqrt(mean(s^2) + kEps) * weight), mean over the row,
//                                   s as stored in residual_out, fp32 arithmetic
//   Verified: every element of both outputs against a reference in fp64 over the bf16 sum,
//   |got - exp| <= atol + rtol |exp| (workload.yaml: rtol 0.02, atol 0.001; one bf16 ulp is up
//   to 0.8 %). DRAM traffic: read 2TH + H, write 2TH bf16 elements.
//   Baseline (the seed): one 256-thread block per row, scalar loads, the sum re-read from
//   residual_out for the second pass, a shared-memory tree reduction.
#pragma once

#include "serving_kernels.cuh"

namespace add_rmsnorm {

using serving::Shape;
constexpr float kEps = 1e-5f;

template <int kUnused = 0>
__global__ void reference_kernel(const __nv_bfloat16* x, const __nv_bfloat16* r, const __nv_bfloat16* w, __nv_bfloat16* out,
                                 __nv_bfloat16* res_out, int64_t width) {
  __shared__ double partial[256];
  const int64_t base = (int64_t)blockIdx.x * width;
  double sum = 0;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    const __nv_bfloat16 s = __float2bfloat16(__bfloat162float(x[base + i]) + __bfloat162float(r[base + i]));
    res_out[base + i] = s;
    const double d = __bfloat162float(s);
    sum += d * d;
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0;
    for (int i = 0; i < (int)blockDim.x; ++i) total += partial[i];
    partial[0] = 1.0 / sqrt(total / (double)width + (double)kEps);
  }
  __syncthreads();
  const double inv = partial[0];
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x)
    out[base + i] = __double2bfloat16((double)__bfloat162float(res_out[base + i]) * inv * (double)__bfloat162float(w[i]));
}

template <int kUnused = 0>
__global__ void seed_kernel(const __nv_bfloat16* x, const __nv_bfloat16* r, const __nv_bfloat16* w, __nv_bfloat16* out,
                            __nv_bfloat16* res_out, int64_t width) {
  __shared__ float partial[256];
  const int64_t base = (int64_t)blockIdx.x * width;
  float sum = 0;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    const __nv_bfloat16 s = __float2bfloat16(__bfloat162float(x[base + i]) + __bfloat162float(r[base + i]));
    res_out[base + i] = s;
    const float f = __bfloat162float(s);
    sum += f * f;
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = 128; stride > 0; stride >>= 1) {
    if ((int)threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  const float inv = rsqrtf(partial[0] / (float)width + kEps);
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x)
    out[base + i] = __float2bfloat16(__bfloat162float(res_out[base + i]) * inv * __bfloat162float(w[i]));
}

inline braid::dev::Workload make_workload() {
  using braid::dev::BufferSpec;
  using braid::dev::Context;
  using braid::dev::DType;
  using braid::dev::Role;
  serving::OpSpec op;
  op.name = "add_rmsnorm";
  op.buffers = [](const Shape& s) {
    const size_t n = (size_t)(s.rows * s.width);
    return std::vector<BufferSpec>{{"x", Role::Input, DType::BF16, n, false},
                                   {"residual", Role::Input, DType::BF16, n, false},
                                   {"weight", Role::Input, DType::BF16, (size_t)s.width, false},
                                   {"residual_out", Role::Output, DType::BF16, n, false},
                                   {"out", Role::Output, DType::BF16, n, false}};
  };
  op.read_bytes = [](const Shape& s) { return 2.0 * (2.0 * (double)s.rows * (double)s.width + (double)s.width); };
  op.write_bytes = [](const Shape& s) { return 2.0 * 2.0 * (double)s.rows * (double)s.width; };
  auto launch = [](bool reference) {
    return [reference](Context& c, cudaStream_t stream) {
      const Shape s = serving::shape_of(c.problem);
      auto* kernel = reference ? reference_kernel<> : seed_kernel<>;
      kernel<<<(unsigned)s.rows, 256, 0, stream>>>(serving::in_bf16(c, "x"), serving::in_bf16(c, "residual"), serving::in_bf16(c, "weight"),
                                                   serving::out_bf16(c, "out"), serving::out_bf16(c, "residual_out"), s.width);
      BRAID_LAUNCHED();
    };
  };
  op.reference = launch(true);
  op.seed = launch(false);
  return serving::make_workload(op);
}

}  // namespace add_rmsnorm
