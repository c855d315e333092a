// braid/comm/issuer.cuh -- issuer groups (thread, warp, CTA), the barrier indices a launch needs,
// and the chunks of a range dealt over the groups. Part of braid/comm.cuh, whose contract applies.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include <cstddef>
#include <cstdint>

#include "braid/comm/types.cuh"

namespace braid::dev {

template <Issuer I> struct IssuerGroup;

template <> struct IssuerGroup<Issuer::Thread> {
  using Coop = ncclCoopThread;
  static __device__ __forceinline__ unsigned lane() { return 0; }
  static __device__ __forceinline__ unsigned size() { return 1; }
  static __device__ __forceinline__ size_t id() { return (size_t)blockIdx.x * blockDim.x + threadIdx.x; }
  static __device__ __forceinline__ size_t count() { return (size_t)gridDim.x * blockDim.x; }
  static __device__ __forceinline__ void sync() {}
};

template <> struct IssuerGroup<Issuer::Warp> {
  using Coop = ncclCoopWarp;
  static __device__ __forceinline__ unsigned lane() { return threadIdx.x & 31u; }
  static __device__ __forceinline__ unsigned size() { return 32; }
  static __device__ __forceinline__ size_t id() { return (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; }
  static __device__ __forceinline__ size_t count() { return (size_t)gridDim.x * (blockDim.x / 32); }
  static __device__ __forceinline__ void sync() { __syncwarp(); }
};

template <> struct IssuerGroup<Issuer::Cta> {
  using Coop = ncclCoopCta;
  static __device__ __forceinline__ unsigned lane() { return threadIdx.x; }
  static __device__ __forceinline__ unsigned size() { return blockDim.x; }
  static __device__ __forceinline__ size_t id() { return blockIdx.x; }
  static __device__ __forceinline__ size_t count() { return gridDim.x; }
  static __device__ __forceinline__ void sync() { __syncthreads(); }
};

// Barrier indices a launch needs when every issuer group holds its own index.
// Warp issuers need threads_per_cta to be a multiple of 32.
inline uint32_t barrier_count(Issuer issuer, int ctas, int threads_per_cta) {
  switch (issuer) {
    case Issuer::Thread: return (uint32_t)ctas * (uint32_t)threads_per_cta;
    case Issuer::Warp: return (uint32_t)ctas * (uint32_t)(threads_per_cta / 32);
    case Issuer::Cta: return (uint32_t)ctas;
  }
  return 0;
}

// Chunks [0, nchunks) of a `bytes` range dealt round-robin over the issuer groups of the grid.
struct ChunkRange {
  size_t begin, end;
};
__host__ __device__ inline size_t chunk_count(size_t bytes, size_t chunk_bytes) {
  return chunk_bytes == 0 ? 1 : (bytes + chunk_bytes - 1) / chunk_bytes;
}
__device__ __forceinline__ ChunkRange chunk_at(size_t c, size_t bytes, size_t chunk_bytes) {
  if (chunk_bytes == 0) return {0, bytes};
  const size_t b = c * chunk_bytes;
  return {b, b + chunk_bytes < bytes ? b + chunk_bytes : bytes};
}

}  // namespace braid::dev
