// silu_mul.cuh -- the frozen SiLU-and-mul workload (the gated MLP's activation, as vLLM's
// silu_and_mul), shared by seed.cu and gen0.cu.
//
// CONTRACT (shown to the LLM as documentation)
//   Size: rows * 1000000 + I (serving_kernels.cuh): T = rows tokens, intermediate size I
//   (14336 for an 8B Llama, 28672 for 70B).
//   Buffers (row-major, bf16):
//     "x"    Input  T x 2I   [gate | up]: row t is gate[t][0..I) then up[t][0..I)
//     "out"  Output T x I    bf16(silu(gate) * up), silu(g) = g / (1 + exp(-g)), fp32 arithmetic
//   Verified: every element against a reference in fp64, |got - exp| <= atol + rtol |exp|
//   (workload.yaml: rtol 0.02, atol 0.001). DRAM traffic: read 2TI, write TI bf16 elements.
//   Baseline (the seed): one thread per output element, scalar loads, 256-thread blocks.
#pragma once

#include "serving_kernels.cuh"

namespace silu_mul {

using serving::Shape;

template <int kUnused = 0>
__global__ void reference_kernel(const __nv_bfloat16* x, __nv_bfloat16* out, int64_t rows, int64_t width) {
  const int64_t n = rows * width;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t t = i / width, j = i % width;
    const double g = __bfloat162float(x[t * 2 * width + j]), u = __bfloat162float(x[t * 2 * width + width + j]);
    out[i] = __double2bfloat16(g / (1.0 + exp(-g)) * u);
  }
}

template <int kUnused = 0>
__global__ void seed_kernel(const __nv_bfloat16* x, __nv_bfloat16* out, int64_t rows, int64_t width) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i >= rows * width) return;
  const int64_t t = i / width, j = i % width;
  const float g = __bfloat162float(x[t * 2 * width + j]), u = __bfloat162float(x[t * 2 * width + width + j]);
  out[i] = __float2bfloat16(g / (1.0f + expf(-g)) * u);
}

inline braid::dev::Workload make_workload() {
  using braid::dev::BufferSpec;
  using braid::dev::Context;
  using braid::dev::DType;
  using braid::dev::Role;
  serving::OpSpec op;
  op.name = "silu_mul";
  op.buffers = [](const Shape& s) {
    const size_t n = (size_t)(s.rows * s.width);
    return std::vector<BufferSpec>{{"x", Role::Input, DType::BF16, 2 * n, false}, {"out", Role::Output, DType::BF16, n, false}};
  };
  op.read_bytes = [](const Shape& s) { return 2.0 * 2.0 * (double)s.rows * (double)s.width; };
  op.write_bytes = [](const Shape& s) { return 2.0 * (double)s.rows * (double)s.width; };
  op.reference = [](Context& c, cudaStream_t stream) {
    const Shape s = serving::shape_of(c.problem);
    reference_kernel<><<<serving::grid_for(s.rows * s.width, 256), 256, 0, stream>>>(serving::in_bf16(c, "x"), serving::out_bf16(c, "out"), s.rows,
                                                                                    s.width);
    BRAID_LAUNCHED();
  };
  op.seed = [](Context& c, cudaStream_t stream) {
    const Shape s = serving::shape_of(c.problem);
    const int64_t blocks = (s.rows * s.width + 255) / 256;
    seed_kernel<><<<(unsigned)blocks, 256, 0, stream>>>(serving::in_bf16(c, "x"), serving::out_bf16(c, "out"), s.rows, s.width);
    BRAID_LAUNCHED();
  };
  return serving::make_workload(op);
}

}  // namespace silu_mul
