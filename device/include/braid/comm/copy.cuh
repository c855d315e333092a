// braid/comm/copy.cuh -- copies by an issuer group (16-byte accesses where aligned) and peer
// put/get over LSA windows. Part of braid/comm.cuh, whose contract applies.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include <cstddef>
#include <cstdint>

#include "braid/comm/issuer.cuh"

namespace braid::dev {

// The group's threads copy `bytes` from src to dst together. kUnroll 16-byte loads are in flight
// per thread before their stores, which keeps NVLink busy with few threads.
template <Issuer I, int kUnroll = 4>
__device__ __forceinline__ void copy_range(void* dst, const void* src, size_t bytes) {
  using G = IssuerGroup<I>;
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  size_t done = 0;
  if (((reinterpret_cast<uintptr_t>(d) | reinterpret_cast<uintptr_t>(s)) & 15u) == 0) {
    const size_t nvec = bytes / 16;
    int4* dv = reinterpret_cast<int4*>(d);
    const int4* sv = reinterpret_cast<const int4*>(s);
    const size_t step = (size_t)G::size() * kUnroll;
    size_t v = G::lane();
    for (; v + (size_t)(kUnroll - 1) * G::size() < nvec; v += step) {
      int4 r[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) r[u] = sv[v + (size_t)u * G::size()];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) dv[v + (size_t)u * G::size()] = r[u];
    }
    for (; v < nvec; v += G::size()) dv[v] = sv[v];
    done = nvec * 16;
  }
  for (size_t i = done + G::lane(); i < bytes; i += G::size()) d[i] = s[i];
}

// Same, but one load feeds stores to several destinations (push to every peer at once).
template <Issuer I, int kUnroll = 4>
__device__ __forceinline__ void copy_range_multi(char* const* dsts, int ndst, const void* src, size_t bytes) {
  using G = IssuerGroup<I>;
  const char* s = static_cast<const char*>(src);
  uintptr_t align = reinterpret_cast<uintptr_t>(s);
  for (int k = 0; k < ndst; ++k) align |= reinterpret_cast<uintptr_t>(dsts[k]);
  size_t done = 0;
  if ((align & 15u) == 0) {
    const size_t nvec = bytes / 16;
    const int4* sv = reinterpret_cast<const int4*>(s);
    const size_t step = (size_t)G::size() * kUnroll;
    size_t v = G::lane();
    for (; v + (size_t)(kUnroll - 1) * G::size() < nvec; v += step) {
      int4 r[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) r[u] = sv[v + (size_t)u * G::size()];
      for (int k = 0; k < ndst; ++k) {
        int4* dv = reinterpret_cast<int4*>(dsts[k]);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) dv[v + (size_t)u * G::size()] = r[u];
      }
    }
    for (; v < nvec; v += G::size()) {
      const int4 r = sv[v];
      for (int k = 0; k < ndst; ++k) reinterpret_cast<int4*>(dsts[k])[v] = r;
    }
    done = nvec * 16;
  }
  for (size_t i = done + G::lane(); i < bytes; i += G::size())
    for (int k = 0; k < ndst; ++k) dsts[k][i] = s[i];
}

// Peer put: copy `bytes` from a local pointer into LSA peer `peer`'s window at dst_off.
template <Issuer I, int kUnroll = 4>
__device__ __forceinline__ void peer_put(ncclWindow_t dst_win, size_t dst_off, int peer, const void* src, size_t bytes) {
  copy_range<I, kUnroll>(ncclGetLsaPointer(dst_win, dst_off, peer), src, bytes);
}

// Peer get: copy `bytes` from LSA peer `peer`'s window at src_off into a local pointer.
template <Issuer I, int kUnroll = 4>
__device__ __forceinline__ void peer_get(void* dst, ncclWindow_t src_win, size_t src_off, int peer, size_t bytes) {
  copy_range<I, kUnroll>(dst, ncclGetLsaPointer(src_win, src_off, peer), bytes);
}

// Chunked forms: this issuer group handles chunks id, id+count, ... of the range.
template <Issuer I, int kUnroll = 4>
__device__ void peer_put_chunked(ncclWindow_t dst_win, size_t dst_off, int peer, const void* src, size_t bytes, size_t chunk_bytes) {
  using G = IssuerGroup<I>;
  char* dst = static_cast<char*>(ncclGetLsaPointer(dst_win, dst_off, peer));
  const size_t n = chunk_count(bytes, chunk_bytes);
  for (size_t c = G::id(); c < n; c += G::count()) {
    const ChunkRange r = chunk_at(c, bytes, chunk_bytes);
    copy_range<I, kUnroll>(dst + r.begin, static_cast<const char*>(src) + r.begin, r.end - r.begin);
  }
}

template <Issuer I, int kUnroll = 4>
__device__ void peer_get_chunked(void* dst, ncclWindow_t src_win, size_t src_off, int peer, size_t bytes, size_t chunk_bytes) {
  using G = IssuerGroup<I>;
  const char* src = static_cast<const char*>(ncclGetLsaPointer(src_win, src_off, peer));
  const size_t n = chunk_count(bytes, chunk_bytes);
  for (size_t c = G::id(); c < n; c += G::count()) {
    const ChunkRange r = chunk_at(c, bytes, chunk_bytes);
    copy_range<I, kUnroll>(static_cast<char*>(dst) + r.begin, src + r.begin, r.end - r.begin);
  }
}

}  // namespace braid::dev
