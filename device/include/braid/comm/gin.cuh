// braid/comm/gin.cuh -- GIN building blocks (compile everywhere; run only where an RDMA NIC
// exists). Part of braid/comm.cuh, whose contract applies.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include <cstddef>
#include <cstdint>

#include "braid/comm/barriers.cuh"
#include "braid/comm/issuer.cuh"

namespace braid::dev {

// All-gather over GIN: chunk c of my block goes to every world peer by one put that increments
// signal `first_signal + group id` there. Returns after this group's signal has counted every
// peer's chunks, i.e. the matching chunks of all peers have landed here. The put source and
// destination are both the window (in-place all-gather layout, block_stride apart).
// Needs reqs.ginSignalCount >= first_signal + number of issuer groups, and the same context
// on every rank (context = group id).
template <Issuer I>
__device__ void gin_all_gather_inplace(ncclDevComm const& dc, ncclWindow_t win, size_t off, size_t block_stride, size_t bytes,
                                       size_t chunk_bytes, uint32_t first_signal) {
  using G = IssuerGroup<I>;
  using Coop = typename G::Coop;
  ncclGin gin(dc, (int)G::id());
  const ncclTeam world = ncclTeamWorld(dc);
  const ncclGinSignal_t sig = first_signal + (uint32_t)G::id();
  const uint64_t base = gin.readSignal(sig);
  const size_t nchunks = chunk_count(bytes, chunk_bytes);
  uint64_t expected = 0;
  const size_t my = off + (size_t)world.rank * block_stride;
  for (size_t c = G::id(); c < nchunks; c += G::count()) {
    const ChunkRange r = chunk_at(c, bytes, chunk_bytes);
    for (int k = 1; k < world.nRanks; ++k) {
      const int peer = (world.rank + k) % world.nRanks;
      gin.put(world, peer, win, my + r.begin, win, my + r.begin, r.end - r.begin, ncclGin_SignalInc{sig}, ncclGin_None{}, Coop());
      ++expected;
    }
  }
  gin.waitSignal(Coop(), sig, base + expected);
  gin.flush(Coop());
}

template <Issuer I>
__global__ void __launch_bounds__(1024) gin_all_gather_kernel(ncclDevComm dc, ncclWindow_t win, size_t off, size_t block_stride,
                                                              size_t bytes, size_t chunk_bytes, uint32_t first_signal, uint32_t first_index) {
  using G = IssuerGroup<I>;
  ncclGin gin(dc, (int)G::id());
  {
    WorldBarrier<I> bar(gin, first_index);
    bar.sync(cuda::memory_order_acq_rel);
  }
  gin_all_gather_inplace<I>(dc, win, off, block_stride, bytes, chunk_bytes, first_signal);
}

}  // namespace braid::dev
