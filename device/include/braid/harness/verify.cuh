// braid/harness/verify.cuh -- device helpers behind verification (counter-based random inputs,
// element-wise comparison, canary bands) and their host-side reads. Part of braid/harness.cuh,
// whose contract applies.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "braid/harness/context.cuh"
#include "braid/harness/report.cuh"
#include "braid/harness/types.cuh"
#include "braid/runtime.cuh"

namespace braid::dev {

__host__ __device__ inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

template <int kUnused = 0>
__global__ void fill_random_kernel(void* p, size_t count, int dtype, uint64_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
    const uint64_t h = mix64(seed ^ mix64(i));
    const float u = (float)(h >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;  // [-1, 1)
    switch ((DType)dtype) {
      case DType::F32: static_cast<float*>(p)[i] = u; break;
      case DType::BF16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(u); break;
      case DType::F16: static_cast<__half*>(p)[i] = __float2half(u); break;
      case DType::I32: static_cast<int32_t*>(p)[i] = (int32_t)(h >> 32); break;
      case DType::U32: static_cast<uint32_t*>(p)[i] = (uint32_t)(h >> 32); break;
      case DType::U8: static_cast<uint8_t*>(p)[i] = (uint8_t)(h >> 56); break;
    }
  }
}

__device__ inline double load_as_double(const void* p, size_t i, int dtype) {
  switch ((DType)dtype) {
    case DType::F32: return static_cast<const float*>(p)[i];
    case DType::BF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case DType::F16: return __half2float(static_cast<const __half*>(p)[i]);
    case DType::I32: return static_cast<const int32_t*>(p)[i];
    case DType::U32: return static_cast<const uint32_t*>(p)[i];
    case DType::U8: return static_cast<const uint8_t*>(p)[i];
  }
  return 0;
}

template <int kUnused = 0>
__global__ void compare_kernel(const void* got, const void* expected, size_t count, int dtype, double rtol, double atol,
                               unsigned long long* first_bad, unsigned long long* bad_count) {
  const bool exact = (DType)dtype == DType::I32 || (DType)dtype == DType::U32 || (DType)dtype == DType::U8;
  unsigned long long mine = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
    const double g = load_as_double(got, i, dtype), e = load_as_double(expected, i, dtype);
    const bool bad = exact ? (g != e) : (isnan(g) || isnan(e) || isinf(g) != isinf(e) || fabs(g - e) > atol + rtol * fabs(e));
    if (bad) {
      atomicMin(first_bad, (unsigned long long)i);
      ++mine;
    }
  }
  if (mine) atomicAdd(bad_count, mine);
}

template <int kUnused = 0>
__global__ void canary_kernel(const unsigned char* base, size_t front, size_t data_end, size_t total, unsigned long long* first_bad) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
    if (i >= front && i < data_end) continue;
    if (base[i] != kCanaryByte) atomicMin(first_bad, (unsigned long long)i);
  }
}

// The value at index i of a device array of type t, read to the host.
inline double host_value(const void* p, size_t i, DType t) {
  unsigned char raw[8] = {0};
  BRAID_CUDA(cudaMemcpy(raw, static_cast<const char*>(p) + i * dtype_size(t), dtype_size(t), cudaMemcpyDeviceToHost));
  switch (t) {
    case DType::F32: { float f; std::memcpy(&f, raw, 4); return f; }
    case DType::BF16: { uint32_t u = (uint32_t)raw[0] << 16 | (uint32_t)raw[1] << 24; float f; std::memcpy(&f, &u, 4); return f; }
    case DType::F16: { __half h; std::memcpy(&h, raw, 2); return __half2float(h); }
    case DType::I32: { int32_t x; std::memcpy(&x, raw, 4); return x; }
    case DType::U32: { uint32_t x; std::memcpy(&x, raw, 4); return x; }
    case DType::U8: return raw[0];
  }
  return 0;
}

// Every buffer's canary bands still hold kCanaryByte; the first change is recorded in v.
inline void check_canaries(Context& ctx, cudaStream_t stream, RankVerdict& v) {
  unsigned long long* dev = nullptr;
  BRAID_CUDA(cudaMalloc(&dev, sizeof(unsigned long long)));
  for (Buffer& b : ctx.buffers()) {
    const unsigned long long init = ~0ull;
    BRAID_CUDA(cudaMemcpyAsync(dev, &init, sizeof(init), cudaMemcpyHostToDevice, stream));  // ordered before the kernel
    canary_kernel<><<<256, 256, 0, stream>>>(reinterpret_cast<unsigned char*>(b.alloc_base), kCanaryBand, kCanaryBand + b.bytes,
                                             b.alloc_bytes, dev);
    BRAID_LAUNCHED();
    unsigned long long first = 0;
    BRAID_CUDA(cudaMemcpyAsync(&first, dev, sizeof(first), cudaMemcpyDeviceToHost, stream));
    BRAID_CUDA(cudaStreamSynchronize(stream));
    if (first != ~0ull && v.canary_ok) {
      v.canary_ok = 0;
      v.canary_offset = (int64_t)first - (int64_t)kCanaryBand;
      if (v.ok) std::snprintf(v.buffer, sizeof(v.buffer), "%s", b.name.c_str());
    }
  }
  cudaFree(dev);
}

}  // namespace braid::dev
