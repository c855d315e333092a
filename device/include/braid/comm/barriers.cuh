// braid/comm/barriers.cuh -- LSA and world (GIN) barriers, one index per issuer group.
// Part of braid/comm.cuh, whose contract applies.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include <cstdint>

#include "braid/comm/issuer.cuh"

namespace braid::dev {

template <Issuer I>
__device__ __forceinline__ uint32_t barrier_index(uint32_t first_index) {
  return first_index + (uint32_t)IssuerGroup<I>::id();
}

// LSA barrier over all LSA peers, one index per issuer group (index = first_index + group id).
// Needs lsaBarrierCount >= first_index + barrier_count(I, ctas, threads_per_cta).
template <Issuer I>
struct LsaBarrier {
  using Coop = typename IssuerGroup<I>::Coop;
  ncclLsaBarrierSession<Coop> session;
  __device__ LsaBarrier(ncclDevComm const& dc, uint32_t first_index)
      : session(Coop(), dc, ncclTeamTagLsa(), barrier_index<I>(first_index)) {}
  __device__ void arrive(cuda::memory_order order = cuda::memory_order_release) { session.arrive(Coop(), order); }
  __device__ void wait(cuda::memory_order order = cuda::memory_order_acquire) { session.wait(Coop(), order); }
  __device__ void sync(cuda::memory_order order = cuda::memory_order_acq_rel) { session.sync(Coop(), order); }
};

// World barrier over LSA then the GIN rail (needs reqs.barrierCount and a GIN backend).
template <Issuer I>
struct WorldBarrier {
  using Coop = typename IssuerGroup<I>::Coop;
  ncclBarrierSession<Coop> session;
  __device__ WorldBarrier(ncclGin const& gin, uint32_t first_index)
      : session(Coop(), ncclTeamTagWorld(), gin, barrier_index<I>(first_index)) {}
  __device__ void sync(cuda::memory_order order = cuda::memory_order_acq_rel) {
    session.sync(Coop(), order, ncclGinFenceLevel::Relaxed);
  }
};

}  // namespace braid::dev
