// braid/comm/collectives.cuh -- LSA collective building blocks (no barriers inside; the caller
// places them): all-gather and all-to-all push, reduce-scatter pull.
// Part of braid/comm.cuh, whose contract applies.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include <cstddef>
#include <cstdint>

#include "braid/comm/copy.cuh"
#include "braid/comm/issuer.cuh"

namespace braid::dev {

// All-gather, push: rank me's `bytes` at `src` land in every LSA rank's window at
// recv_off + me*block_stride + [0, bytes). Includes the local copy unless src already is
// that slot. Chunks are dealt over issuer groups.
template <Issuer I, int kUnroll = 4>
__device__ void all_gather_push(ncclDevComm const& dc, ncclWindow_t recv_win, size_t recv_off, size_t block_stride,
                                const void* src, size_t bytes, size_t chunk_bytes) {
  using G = IssuerGroup<I>;
  constexpr int kMaxPeers = 8;
  const int me = dc.lsaRank, n = dc.lsaSize;
  const size_t my_off = recv_off + (size_t)me * block_stride;
  char* dsts[kMaxPeers];
  int ndst = 0;
  for (int k = 0; k < n && ndst < kMaxPeers; ++k) {
    const int peer = (me + k) % n;  // rotate the first target so ranks do not all hit one peer
    char* d = static_cast<char*>(ncclGetLsaPointer(recv_win, my_off, peer));
    if (d != static_cast<const char*>(src)) dsts[ndst++] = d;
  }
  const size_t nchunks = chunk_count(bytes, chunk_bytes);
  for (size_t c = G::id(); c < nchunks; c += G::count()) {
    const ChunkRange r = chunk_at(c, bytes, chunk_bytes);
    char* dd[kMaxPeers];
    for (int k = 0; k < ndst; ++k) dd[k] = dsts[k] + r.begin;
    copy_range_multi<I, kUnroll>(dd, ndst, static_cast<const char*>(src) + r.begin, r.end - r.begin);
  }
}

// All-to-all, push: block p of `src` (bytes each, stride bytes apart) goes to LSA rank p's
// window at recv_off + me*bytes.
template <Issuer I, int kUnroll = 4>
__device__ void all_to_all_push(ncclDevComm const& dc, ncclWindow_t recv_win, size_t recv_off, const void* src,
                                size_t bytes, size_t chunk_bytes) {
  using G = IssuerGroup<I>;
  const int me = dc.lsaRank, n = dc.lsaSize;
  const size_t nchunks = chunk_count(bytes, chunk_bytes);
  for (size_t w = G::id(); w < nchunks * (size_t)n; w += G::count()) {
    const int peer = (me + (int)(w / nchunks)) % n;
    const ChunkRange r = chunk_at(w % nchunks, bytes, chunk_bytes);
    char* dst = static_cast<char*>(ncclGetLsaPointer(recv_win, recv_off + (size_t)me * bytes, peer));
    copy_range<I, kUnroll>(dst + r.begin, static_cast<const char*>(src) + (size_t)peer * bytes + r.begin, r.end - r.begin);
  }
}

// Element types for reductions: 16 bytes at a time, accumulated in float.
template <typename T> struct Vec16;
template <> struct Vec16<float> {
  static constexpr int kElems = 4;
  static __device__ __forceinline__ void load(const void* p, float (&a)[4]) {
    const float4 v = *static_cast<const float4*>(p);
    a[0] = v.x; a[1] = v.y; a[2] = v.z; a[3] = v.w;
  }
  static __device__ __forceinline__ void store(void* p, const float (&a)[4]) { *static_cast<float4*>(p) = make_float4(a[0], a[1], a[2], a[3]); }
  static __device__ __forceinline__ float to_float(float x) { return x; }
  static __device__ __forceinline__ float from_float(float x) { return x; }
};
template <> struct Vec16<__nv_bfloat16> {
  static constexpr int kElems = 8;
  static __device__ __forceinline__ void load(const void* p, float (&a)[8]) {
    const int4 v = *static_cast<const int4*>(p);
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(h[i]);
      a[2 * i] = f.x;
      a[2 * i + 1] = f.y;
    }
  }
  static __device__ __forceinline__ void store(void* p, const float (&a)[8]) {
    int4 v;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(a[2 * i], a[2 * i + 1]);
    *static_cast<int4*>(p) = v;
  }
  static __device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
  static __device__ __forceinline__ __nv_bfloat16 from_float(float x) { return __float2bfloat16(x); }
};

// Reduce-scatter (sum), pull: out[i] = sum over LSA ranks p of p's window at
// send_off + me*count*sizeof(T) + i*sizeof(T), for i < count. Peers are summed in rank order
// (0..n-1) on every rank, so results do not depend on who computes them.
template <typename T, Issuer I>
__device__ void reduce_scatter_pull(ncclDevComm const& dc, ncclWindow_t send_win, size_t send_off, T* out, size_t count,
                                    size_t chunk_elems) {
  using G = IssuerGroup<I>;
  using V = Vec16<T>;
  constexpr int kMaxPeers = 8;
  const int me = dc.lsaRank, n = dc.lsaSize < kMaxPeers ? dc.lsaSize : kMaxPeers;
  const T* srcs[kMaxPeers];
  for (int p = 0; p < n; ++p)
    srcs[p] = static_cast<const T*>(ncclGetLsaPointer(send_win, send_off + (size_t)me * count * sizeof(T), p));
  bool aligned = (reinterpret_cast<uintptr_t>(out) & 15u) == 0;
  for (int p = 0; p < n; ++p) aligned = aligned && (reinterpret_cast<uintptr_t>(srcs[p]) & 15u) == 0;
  const size_t nchunks = chunk_count(count, chunk_elems);
  for (size_t c = G::id(); c < nchunks; c += G::count()) {
    const ChunkRange r = chunk_at(c, count, chunk_elems);
    size_t i = r.begin;
    if (aligned && (r.begin % V::kElems) == 0) {
      const size_t nvec = (r.end - r.begin) / V::kElems;
      for (size_t v = G::lane(); v < nvec; v += G::size()) {
        const size_t e = r.begin + v * V::kElems;
        float acc[V::kElems], tmp[V::kElems];
        V::load(srcs[0] + e, acc);
        for (int p = 1; p < n; ++p) {
          V::load(srcs[p] + e, tmp);
#pragma unroll
          for (int k = 0; k < V::kElems; ++k) acc[k] += tmp[k];
        }
        V::store(out + e, acc);
      }
      i = r.begin + nvec * V::kElems;
    }
    for (size_t e = i + G::lane(); e < r.end; e += G::size()) {
      float acc = V::to_float(srcs[0][e]);
      for (int p = 1; p < n; ++p) acc += V::to_float(srcs[p][e]);
      out[e] = V::from_float(acc);
    }
  }
}

}  // namespace braid::dev
