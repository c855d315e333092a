// braid/comm/kernels.cuh -- LSA collective kernels (placement: own kernel), their launch sizing
// and the all-gather's launch. Each kernel starts with a barrier (peers are ready to receive:
// done with the previous round) and ends with one (our stores are published, theirs acquired),
// on indices first_index + group id. Part of braid/comm.cuh, whose contract applies.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include <cstddef>
#include <cstdint>

#include "braid/comm/barriers.cuh"
#include "braid/comm/collectives.cuh"
#include "braid/comm/copy.cuh"
#include "braid/comm/flags.cuh"
#include "braid/comm/issuer.cuh"
#include "braid/comm/types.cuh"
#include "braid/runtime.cuh"

namespace braid::dev {

template <Issuer I, int kUnroll = 4>
__global__ void __launch_bounds__(1024) all_gather_kernel(ncclDevComm dc, ncclWindow_t recv_win, size_t recv_off, size_t block_stride,
                                                          const void* src, size_t bytes, size_t chunk_bytes, uint32_t first_index) {
  LsaBarrier<I> bar(dc, first_index);
  bar.sync(cuda::memory_order_acq_rel);
  all_gather_push<I, kUnroll>(dc, recv_win, recv_off, block_stride, src, bytes, chunk_bytes);
  bar.sync(cuda::memory_order_acq_rel);
}

template <Issuer I, int kUnroll = 4>
__global__ void __launch_bounds__(1024) all_to_all_kernel(ncclDevComm dc, ncclWindow_t recv_win, size_t recv_off, const void* src,
                                                          size_t bytes, size_t chunk_bytes, uint32_t first_index) {
  LsaBarrier<I> bar(dc, first_index);
  bar.sync(cuda::memory_order_acq_rel);
  all_to_all_push<I, kUnroll>(dc, recv_win, recv_off, src, bytes, chunk_bytes);
  bar.sync(cuda::memory_order_acq_rel);
}

// Entry barrier: every rank's send window is written. Exit barrier: nobody still reads ours.
template <typename T, Issuer I>
__global__ void __launch_bounds__(1024) reduce_scatter_kernel(ncclDevComm dc, ncclWindow_t send_win, size_t send_off, T* out,
                                                              size_t count, size_t chunk_elems, uint32_t first_index) {
  LsaBarrier<I> bar(dc, first_index);
  bar.sync(cuda::memory_order_acq_rel);
  reduce_scatter_pull<T, I>(dc, send_win, send_off, out, count, chunk_elems);
  bar.sync(cuda::memory_order_acq_rel);
}

// All-gather push through the Hopper bulk-copy engine (TMA, sm_90): per CTA one thread streams
// its chunks through shared memory, cp.async.bulk global->shared (local shard) then
// shared->global (every peer's slot), kBulkBuffers pieces of kBulkPiece bytes in flight.
// Pointers and sizes must be 16-byte multiples. Same barriers and indices as all_gather_kernel.
constexpr int kBulkPiece = 15 * 1024;  // three pieces and their mbarriers fit the 48 KiB static shared memory
constexpr int kBulkBuffers = 3;

__device__ __forceinline__ uint32_t smem_address(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

template <int kUnused = 0>
__global__ void __launch_bounds__(128) all_gather_bulk_kernel(ncclDevComm dc, ncclWindow_t recv_win, size_t recv_off, size_t block_stride,
                                                              const void* src, size_t bytes, size_t chunk_bytes, uint32_t first_index) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __shared__ alignas(128) unsigned char buf[kBulkBuffers][kBulkPiece];
  __shared__ alignas(8) uint64_t full[kBulkBuffers];
  LsaBarrier<Issuer::Cta> bar(dc, first_index);
  bar.sync(cuda::memory_order_acq_rel);
  if (threadIdx.x == 0) {
    for (int b = 0; b < kBulkBuffers; ++b) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_address(&full[b])));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    const int me = dc.lsaRank, n = dc.lsaSize;
    const size_t my_off = recv_off + (size_t)me * block_stride;
    char* dsts[kMaxPeersBulk];
    int ndst = 0;
    for (int k = 0; k < n && ndst < kMaxPeersBulk; ++k) {
      char* d = static_cast<char*>(ncclGetLsaPointer(recv_win, my_off, (me + k) % n));
      if (d != static_cast<const char*>(src)) dsts[ndst++] = d;
    }
    uint32_t piece = 0;
    const size_t nchunks = chunk_count(bytes, chunk_bytes);
    for (size_t c = blockIdx.x; c < nchunks; c += gridDim.x) {
      const ChunkRange r = chunk_at(c, bytes, chunk_bytes);
      for (size_t pos = r.begin; pos < r.end; pos += kBulkPiece, ++piece) {
        const uint32_t size = (uint32_t)min((size_t)kBulkPiece, r.end - pos);
        const int b = (int)(piece % kBulkBuffers);
        // The store that last read buffer b must be done reading it.
        if (piece >= kBulkBuffers) asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(kBulkBuffers - 1) : "memory");
        const uint32_t sb = smem_address(buf[b]), mb = smem_address(&full[b]);
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(mb), "r"(size) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     ::"r"(sb), "l"(static_cast<const char*>(src) + pos), "r"(size), "r"(mb) : "memory");
        const uint32_t parity = (piece / kBulkBuffers) & 1u;
        uint32_t done = 0;
        while (!done)
          asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                       : "=r"(done) : "r"(mb), "r"(parity) : "memory");
        for (int k = 0; k < ndst; ++k)
          asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dsts[k] + pos), "r"(sb), "r"(size) : "memory");
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
      }
    }
    // Writes complete, then ordered before the generic-proxy release of the exit barrier.
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    asm volatile("fence.proxy.async.global;" ::: "memory");
  }
  __syncthreads();
  bar.sync(cuda::memory_order_acq_rel);
#endif
}

// Pipelined all-gather: each chunk is published on its own ready flag as soon as it is pushed, so
// a consumer (another kernel or stream) can start on chunk c before the rest has landed. The
// caller guarantees peers are done with the previous round (e.g. a barrier in the consumer).
template <Issuer I, int kUnroll = 4>
__global__ void __launch_bounds__(1024) all_gather_flagged_kernel(ncclDevComm dc, ncclWindow_t recv_win, size_t recv_off,
                                                                  size_t block_stride, const void* src, size_t bytes,
                                                                  size_t chunk_bytes, ReadyFlags flags, uint32_t epoch) {
  using G = IssuerGroup<I>;
  const int me = dc.lsaRank, n = dc.lsaSize;
  const size_t my_off = recv_off + (size_t)me * block_stride;
  const size_t nchunks = chunk_count(bytes, chunk_bytes);
  for (size_t c = G::id(); c < nchunks; c += G::count()) {
    const ChunkRange r = chunk_at(c, bytes, chunk_bytes);
    for (int k = 0; k < n; ++k) {
      const int peer = (me + k) % n;
      char* d = static_cast<char*>(ncclGetLsaPointer(recv_win, my_off, peer));
      if (d != static_cast<const char*>(src)) copy_range<I, kUnroll>(d + r.begin, static_cast<const char*>(src) + r.begin, r.end - r.begin);
      flags.publish<I>(peer, me, (int)c, epoch);
    }
  }
}

// Consumer side of the pipeline: waits for every chunk of every source, then copies it out
// (the simplest fused consumer; real candidates compute on the chunk instead).
template <Issuer I>
__global__ void __launch_bounds__(1024) wait_chunks_copy_kernel(ncclDevComm dc, ncclWindow_t recv_win, size_t recv_off,
                                                                size_t block_stride, void* out, size_t bytes, size_t chunk_bytes,
                                                                ReadyFlags flags, uint32_t epoch) {
  using G = IssuerGroup<I>;
  const size_t nchunks = chunk_count(bytes, chunk_bytes);
  const char* base = static_cast<const char*>(ncclGetLocalPointer(recv_win, recv_off));
  for (size_t w = G::id(); w < nchunks * (size_t)dc.lsaSize; w += G::count()) {
    const int source = (int)(w / nchunks);
    const size_t c = w % nchunks;
    flags.wait<I>(source, (int)c, epoch);
    const ChunkRange r = chunk_at(c, bytes, chunk_bytes);
    copy_range<I>(static_cast<char*>(out) + (size_t)source * bytes + r.begin, base + (size_t)source * block_stride + r.begin, r.end - r.begin);
  }
}

// Launch shape of the LSA all-gather kernel. chunk_bytes 0 means one contiguous tile per CTA.
struct AllGatherConfig {
  int ctas = 0;
  int threads = 512;
  int unroll = 4;
  size_t chunk_bytes = 0;
};

// The fastest launch per shard size measured on two NVLink-linked H200 (bench/device/allgather.cu,
// sweep of grid, block, unroll and chunk): small shards want few CTAs (barrier latency), large
// ones every SM with 256 KiB chunks dealt round-robin.
inline AllGatherConfig all_gather_auto_config(size_t shard_bytes, int sm_count) {
  AllGatherConfig c;
  if (shard_bytes <= (1u << 20)) {
    c.ctas = 32;
    c.unroll = 8;
  } else if (shard_bytes <= (2u << 20)) {
    c.ctas = 64;
    c.unroll = 8;
  } else if (shard_bytes <= (8u << 20)) {
    c.ctas = 64;
  } else {
    c.ctas = sm_count;
    c.chunk_bytes = 256u << 10;
  }
  return c;
}

// Barrier indices first_index .. first_index + cfg.ctas - 1 (Issuer::Cta).
inline void launch_all_gather(const AllGatherConfig& cfg, ncclDevComm const& dc, ncclWindow_t recv_win, size_t recv_off, size_t block_stride,
                              const void* src, size_t bytes, uint32_t first_index, cudaStream_t stream) {
  const size_t chunk = cfg.chunk_bytes != 0 ? cfg.chunk_bytes : ((bytes + cfg.ctas - 1) / cfg.ctas + 15) / 16 * 16;
  switch (cfg.unroll) {
    case 1: all_gather_kernel<Issuer::Cta, 1><<<cfg.ctas, cfg.threads, 0, stream>>>(dc, recv_win, recv_off, block_stride, src, bytes, chunk, first_index); break;
    case 2: all_gather_kernel<Issuer::Cta, 2><<<cfg.ctas, cfg.threads, 0, stream>>>(dc, recv_win, recv_off, block_stride, src, bytes, chunk, first_index); break;
    case 8: all_gather_kernel<Issuer::Cta, 8><<<cfg.ctas, cfg.threads, 0, stream>>>(dc, recv_win, recv_off, block_stride, src, bytes, chunk, first_index); break;
    default: all_gather_kernel<Issuer::Cta, 4><<<cfg.ctas, cfg.threads, 0, stream>>>(dc, recv_win, recv_off, block_stride, src, bytes, chunk, first_index); break;
  }
  BRAID_LAUNCHED();
}

// Largest co-resident grid for `kernel` at `threads` per CTA (spinning kernels need it), capped.
template <typename Kernel>
inline int resident_ctas(Kernel kernel, int threads, int cap) {
  int dev = 0, sms = 0, per_sm = 0;
  BRAID_CUDA(cudaGetDevice(&dev));
  BRAID_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  BRAID_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0));
  const int most = per_sm * sms;
  return most < cap ? most : cap;
}

}  // namespace braid::dev
