// braid/comm/flags.cuh -- flags at system scope (release/acquire), per-chunk ready flags in a
// symmetric window, and one-thread kernels that wait on or set a flag in stream order.
// Part of braid/comm.cuh, whose contract applies.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include <cstddef>
#include <cstdint>

#include "braid/comm/issuer.cuh"
#include "braid/runtime.cuh"

namespace braid::dev {

__device__ __forceinline__ void flag_store_release(uint32_t* flag, uint32_t value) {
  cuda::atomic_ref<uint32_t, cuda::thread_scope_system>(*flag).store(value, cuda::memory_order_release);
}
__device__ __forceinline__ uint32_t flag_load_acquire(uint32_t* flag) {
  return cuda::atomic_ref<uint32_t, cuda::thread_scope_system>(*flag).load(cuda::memory_order_acquire);
}
// Waits until *flag >= value, comparing with wrap-around (epochs may roll over 2^32).
__device__ __forceinline__ void flag_wait_geq(uint32_t* flag, uint32_t value) {
  while (static_cast<int32_t>(flag_load_acquire(flag) - value) < 0) __nanosleep(32);
}

// Per-chunk ready flags living in a symmetric window: flags[source rank][chunk], one uint32 each.
// A producer copies a chunk into a peer, then `publish`es (peer's flag[me][chunk] = epoch, release);
// a consumer `wait`s on its own flag[source][chunk] >= epoch (acquire). Epochs grow by one per
// round, so flags are never reset. The window region needs bytes() bytes, zeroed once at setup.
struct ReadyFlags {
  ncclWindow_t win;
  size_t offset;  // byte offset of flags[0][0] in the window
  int ranks;      // LSA ranks
  int chunks;     // chunks per source rank

  __host__ __device__ size_t bytes() const { return (size_t)ranks * chunks * sizeof(uint32_t); }
  __host__ __device__ size_t slot(int source, int chunk) const { return offset + ((size_t)source * chunks + chunk) * sizeof(uint32_t); }

  // Called by every thread of issuer group I after the group's stores of `chunk` to `peer`.
  template <Issuer I>
  __device__ void publish(int peer, int me, int chunk, uint32_t epoch) const {
    IssuerGroup<I>::sync();
    if (IssuerGroup<I>::lane() == 0)
      flag_store_release(static_cast<uint32_t*>(ncclGetLsaPointer(win, slot(me, chunk), peer)), epoch);
  }
  // Called by every thread of issuer group I; returns when source's chunk has landed here.
  template <Issuer I>
  __device__ void wait(int source, int chunk, uint32_t epoch) const {
    if (IssuerGroup<I>::lane() == 0) flag_wait_geq(static_cast<uint32_t*>(ncclGetLocalPointer(win, slot(source, chunk))), epoch);
    IssuerGroup<I>::sync();
  }
};

// Stream-side wait on a flag (a one-thread kernel: holds one SM slot while it spins).
template <int kUnused = 0>
__global__ void wait_flag_kernel(uint32_t* flag, uint32_t value) { flag_wait_geq(flag, value); }
template <int kUnused = 0>
__global__ void set_flag_kernel(uint32_t* flag, uint32_t value) {
  __threadfence_system();
  flag_store_release(flag, value);
}

inline void launch_wait_flag(cudaStream_t stream, uint32_t* flag, uint32_t value) {
  wait_flag_kernel<><<<1, 1, 0, stream>>>(flag, value);
  BRAID_LAUNCHED();
}
inline void launch_set_flag(cudaStream_t stream, uint32_t* flag, uint32_t value) {
  set_flag_kernel<><<<1, 1, 0, stream>>>(flag, value);
  BRAID_LAUNCHED();
}

}  // namespace braid::dev
