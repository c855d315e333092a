// softmax.cuh -- the frozen softmax-over-the-vocabulary workload (the sampler's probabilities of
// a batch of sequences: softmax of the logits at temperature 1 / kInvTemperature), shared by
// seed.cu and gen0.cu.
//
// CONTRACT (shown to the LLM as documentation)
//   Size: rows * 1000000 + V (serving_kernels.cuh): rows sequences, vocabulary V (128256: Llama 3).
//   Buffers (row-major, bf16):
//     "logits" Input  rows x V   drawn in [-1, 1); the op's logits are y = kInvTemperature * logits,
//                                so they span [-100, 100): exp(y) overflows fp32 without the row
//                                maximum subtracted first
//     "probs"  Output rows x V   bf16(exp(y - max_row y) / sum_row exp(y - max_row y)), fp32 arithmetic
//   Verified: every element against a reference in fp64, |got - exp| <= atol + rtol |exp|
//   (workload.yaml: rtol 0.01 (one bf16 ulp is up to 0.8 %), atol 1e-9: probabilities are relative
//   checks). DRAM traffic: read and write rows x V bf16 elements once.
//   Baseline (the seed): one 256-thread block per row, three passes over the row (max, sum, write),
//   scalar loads, shared-memory tree reductions.
#pragma once

#include "serving_kernels.cuh"

namespace softmax {

using serving::Shape;
constexpr float kInvTemperature = 100.0f;

template <int kUnused = 0>
__global__ void reference_kernel(const __nv_bfloat16* x, __nv_bfloat16* out, int64_t width) {
  __shared__ double partial[256];
  const int64_t base = (int64_t)blockIdx.x * width;
  double m = -INFINITY;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) m = fmax(m, (double)kInvTemperature * __bfloat162float(x[base + i]));
  partial[threadIdx.x] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int i = 1; i < (int)blockDim.x; ++i) partial[0] = fmax(partial[0], partial[i]);
  }
  __syncthreads();
  const double row_max = partial[0];
  __syncthreads();
  double s = 0;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) s += exp((double)kInvTemperature * __bfloat162float(x[base + i]) - row_max);
  partial[threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int i = 1; i < (int)blockDim.x; ++i) partial[0] += partial[i];
  }
  __syncthreads();
  const double sum = partial[0];
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x)
    out[base + i] = __double2bfloat16(exp((double)kInvTemperature * __bfloat162float(x[base + i]) - row_max) / sum);
}

template <int kUnused = 0>
__global__ void seed_kernel(const __nv_bfloat16* x, __nv_bfloat16* out, int64_t width) {
  __shared__ float partial[256];
  const int64_t base = (int64_t)blockIdx.x * width;
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) m = fmaxf(m, kInvTemperature * __bfloat162float(x[base + i]));
  partial[threadIdx.x] = m;
  __syncthreads();
  for (int stride = 128; stride > 0; stride >>= 1) {
    if ((int)threadIdx.x < stride) partial[threadIdx.x] = fmaxf(partial[threadIdx.x], partial[threadIdx.x + stride]);
    __syncthreads();
  }
  const float row_max = partial[0];
  __syncthreads();
  float s = 0;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) s += expf(kInvTemperature * __bfloat162float(x[base + i]) - row_max);
  partial[threadIdx.x] = s;
  __syncthreads();
  for (int stride = 128; stride > 0; stride >>= 1) {
    if ((int)threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  const float inv = 1.0f / partial[0];
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x)
    out[base + i] = __float2bfloat16(expf(kInvTemperature * __bfloat162float(x[base + i]) - row_max) * inv);
}

inline braid::dev::Workload make_workload() {
  using braid::dev::BufferSpec;
  using braid::dev::Context;
  using braid::dev::DType;
  using braid::dev::Role;
  serving::OpSpec op;
  op.name = "softmax";
  op.buffers = [](const Shape& s) {
    const size_t n = (size_t)(s.rows * s.width);
    return std::vector<BufferSpec>{{"logits", Role::Input, DType::BF16, n, false}, {"probs", Role::Output, DType::BF16, n, false}};
  };
  op.read_bytes = [](const Shape& s) { return 2.0 * (double)s.rows * (double)s.width; };
  op.write_bytes = [](const Shape& s) { return 2.0 * (double)s.rows * (double)s.width; };
  auto launch = [](bool reference) {
    return [reference](Context& c, cudaStream_t stream) {
      const Shape s = serving::shape_of(c.problem);
      auto* kernel = reference ? reference_kernel<> : seed_kernel<>;
      kernel<<<(unsigned)s.rows, 256, 0, stream>>>(serving::in_bf16(c, "logits"), serving::out_bf16(c, "probs"), s.width);
      BRAID_LAUNCHED();
    };
  };
  op.reference = launch(true);
  op.seed = launch(false);
  return serving::make_workload(op);
}

}  // namespace softmax
