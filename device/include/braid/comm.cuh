// braid/comm.cuh -- communication primitives over the NCCL 2.28 device API (LSA and GIN).
//
// CONTRACT (shown to the LLM as documentation)
// Every primitive is configured along five dimensions:
//   backend      Backend::Lsa (NVLink/PCIe loads and stores) or Backend::Gin (RDMA puts). GIN
//                needs an RDMA NIC; `effective_backend(b, platform)` maps Gin to Lsa where the
//                device communicator has no GIN, so a GIN knob value never fails a run.
//   placement    where communication is issued: its own kernel before/after compute, a fused
//                prologue/epilogue, per tile in the main loop, specialised warps, or a second
//                stream. Primitives are __device__ building blocks; the *_kernel templates are
//                the "own kernel" placement. Placement is the caller's choice of where to call.
//   sync scope   what a wait covers: LsaBarrier<I> (all LSA peers, one index per issuer),
//                ReadyFlags (one flag per (source rank, chunk)), stream waits (host order).
//   issuer       Issuer::Thread | Issuer::Warp | Issuer::Cta: the group of threads that issues
//                one chunk (copies) or shares one barrier index. Every thread of the group must
//                make the call.
//   chunk size   bytes per unit of work; one issuer group copies one chunk at a time, chunks are
//                dealt round-robin over groups. 16-byte accesses where pointers and sizes are
//                16-byte aligned, a byte loop for the rest.
// Rules that hold everywhere:
//   * LSA peers are LSA ranks (devComm.lsaRank / lsaSize), not world ranks.
//   * Barrier indices are persistent state: size the requirement from the launch with
//     `barrier_count(issuer, ctas, threads_per_cta)`, give concurrently running kernels disjoint
//     index ranges (`first_index`), and make every rank call each index equally often.
//   * A wait acquires, a publish releases (system scope). `relaxed` barriers order no data.
//   * Grids that spin on peers must be co-resident: ctas <= occupancy * SMs, same on all ranks.
//   * Host side: `host_lsa_pointers` hands peers' symmetric addresses to the host so copy
//     engines can move data (cudaMemcpyAsync); `ZeroCtaComm` runs NCCL's host collectives with
//     NCCL_CTA_POLICY_ZERO (copy engines, no SMs); `CopyEngineAllGather` is an all-gather that uses
//     only copy engines and stream memory operations (flags written and waited by the streams);
//     call its release(stream) once the gathered result has been consumed, so the next run()
//     skips a flag round trip.
//   * Addresses NCCL gives for one's own slot (ncclGetLocalPointer, ncclGetLsaPointer(self)) alias
//     the pointer ncclMemAlloc returned: compare user pointers with user pointers only.
//   * Multimem (NVLS) is never used.
// What is here:
//   device blocks  copy_range, copy_range_multi, peer_put/peer_get(_chunked), all_gather_push,
//                  all_to_all_push, reduce_scatter_pull<float|bf16>, ReadyFlags, flag_store_release,
//                  flag_load_acquire, flag_wait_geq, LsaBarrier<I>, WorldBarrier<I> (GIN),
//                  gin_all_gather_inplace (GIN)
//   kernels        all_gather_kernel, all_to_all_kernel, reduce_scatter_kernel,
//                  all_gather_flagged_kernel + wait_chunks_copy_kernel (per-chunk pipeline),
//                  all_gather_bulk_kernel (TMA bulk copies), gin_all_gather_kernel, wait_flag_kernel
//   host           launch_all_gather(all_gather_auto_config(shard, sms), ...), barrier_count,
//                  resident_ctas, StreamMemOps, launch_wait_flag/launch_set_flag,
//                  host_lsa_pointers, copy_engine_all_gather, CopyEngineAllGather, ZeroCtaComm
// Measured on 2 x H200 (NVLink, bench/device/allgather-results.md): all_gather_kernel with the auto
// launch takes 0.52-0.83 of ncclAllGather's time from 1 MiB to 1 GiB shards, 358-360 GB/s at
// 256 MiB (SM stores stop near 365 GB/s); CopyEngineAllGather (copy engines, no SM) with release()
// reaches 380-382 GB/s at 256 MiB and 390 at 1 GiB, the better choice from 64 MiB up when SMs are
// busy computing.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include <dirent.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "braid/runtime.cuh"

namespace braid::dev {

constexpr int kMaxLsaPeers = 8;
constexpr int kMaxPeersBulk = kMaxLsaPeers;

enum class Backend { Lsa, Gin };
enum class Issuer { Thread, Warp, Cta };
enum class Placement { SeparateKernel, FusedPrologue, FusedEpilogue, PerTile, SpecializedWarps, SecondStream };

// What the platform offers, decided once per run by the harness (or a test).
struct Platform {
  bool gin = false;       // the device communicator can connect GIN (an RDMA NIC exists)
  int lsa_size = 1;       // ranks reachable by loads and stores
  int sm_count = 0;
};

// GIN needs an RDMA (verbs) device; without one every devComm that asks for GIN fails, so the
// platform reports no GIN. NCCL_GIN_ENABLE=0 turns it off as well.
inline bool rdma_device_present() {
  const char* en = std::getenv("NCCL_GIN_ENABLE");
  if (en != nullptr && std::string(en) == "0") return false;
  DIR* d = opendir("/sys/class/infiniband");
  if (d == nullptr) return false;
  bool any = false;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') any = true;
  closedir(d);
  return any;
}

inline Backend effective_backend(Backend wanted, const Platform& p) {
  return (wanted == Backend::Gin && !p.gin) ? Backend::Lsa : wanted;
}

// ---------------------------------------------------------------------------------------------
// Issuer groups
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// Copies (16-byte accesses)
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// Flags: release/acquire at system scope
// ---------------------------------------------------------------------------------------------

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

// Stream memory operations (no SM used): the stream waits until *flag >= value, or writes a value
// after all earlier work of the stream (with a memory barrier). `flag` may be a peer's symmetric
// address obtained through host_lsa_pointers. Driver entry points are looked up at run time so
// that no libcuda link is needed.
class StreamMemOps {
 public:
  StreamMemOps() {
    cudaDriverEntryPointQueryResult q{};
    BRAID_CUDA(cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", reinterpret_cast<void**>(&wait_), 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || wait_ == nullptr) throw DeviceError("cuStreamWaitValue32 not available");
    BRAID_CUDA(cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", reinterpret_cast<void**>(&write_), 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || write_ == nullptr) throw DeviceError("cuStreamWriteValue32 not available");
    BRAID_CUDA(cudaGetDriverEntryPointByVersion("cuStreamBatchMemOp", reinterpret_cast<void**>(&batch_), 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess) batch_ = nullptr;
  }
  void wait_geq(cudaStream_t s, uint32_t* flag, uint32_t value) const {
    check(wait_(reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(flag), value, CU_STREAM_WAIT_VALUE_GEQ), "cuStreamWaitValue32");
  }
  // Always with the memory barrier: CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER is refused
  // (CUDA_ERROR_INVALID_VALUE) for these flags on H200 with CUDA 13.
  void write(cudaStream_t s, uint32_t* flag, uint32_t value) const {
    check(write_(reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(flag), value, CU_STREAM_WRITE_VALUE_DEFAULT), "cuStreamWriteValue32");
  }

  // One submission of several operations, in order: writes (each after a memory barrier unless
  // `barrier` is false), then waits (>=). Returns false, enqueueing nothing, where the driver
  // refuses the batch (no cuStreamBatchMemOp, or unbarriered writes not allowed).
  struct Write {
    uint32_t* flag;
    uint32_t value;
  };
  bool try_batch(cudaStream_t s, const std::vector<Write>& writes, bool barrier, const std::vector<Write>& waits) const {
    if (batch_ == nullptr) return false;
    std::vector<CUstreamBatchMemOpParams> ops(writes.size() + waits.size());
    size_t i = 0;
    for (const Write& w : writes) {
      std::memset(&ops[i], 0, sizeof(ops[i]));
      ops[i].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
      ops[i].writeValue.address = reinterpret_cast<CUdeviceptr>(w.flag);
      ops[i].writeValue.value = w.value;
      ops[i++].writeValue.flags = barrier ? CU_STREAM_WRITE_VALUE_DEFAULT : CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER;
    }
    for (const Write& w : waits) {
      std::memset(&ops[i], 0, sizeof(ops[i]));
      ops[i].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
      ops[i].waitValue.address = reinterpret_cast<CUdeviceptr>(w.flag);
      ops[i].waitValue.value = w.value;
      ops[i++].waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
    }
    return batch_(reinterpret_cast<CUstream>(s), (unsigned)ops.size(), ops.data(), 0) == CUDA_SUCCESS;
  }

 private:
  using Fn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
  using BatchFn = CUresult (*)(CUstream, unsigned int, CUstreamBatchMemOpParams*, unsigned int);
  static void check(CUresult r, const char* what) {
    if (r != CUDA_SUCCESS) throw DeviceError(std::string(what) + " failed with CUresult " + std::to_string((int)r));
  }
  Fn wait_ = nullptr;
  Fn write_ = nullptr;
  BatchFn batch_ = nullptr;
};

// ---------------------------------------------------------------------------------------------
// Barriers
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// LSA collective building blocks (no barriers inside; the caller places them)
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// LSA collective kernels (placement: own kernel). Each starts with a barrier (peers are ready to
// receive: done with the previous round) and ends with one (our stores are published, theirs
// acquired), on indices first_index + group id.
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// GIN building blocks (compile everywhere; run only where an RDMA NIC exists)
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// Host side: peer addresses for copy engines, zero-CTA collectives, launch sizing
// ---------------------------------------------------------------------------------------------

template <int kUnused = 0>
__global__ void lsa_pointers_kernel(ncclWindow_t win, size_t offset, int n, void** out) {
  for (int p = threadIdx.x; p < n; p += blockDim.x) out[p] = ncclGetLsaPointer(win, offset, p);
  if (threadIdx.x == 0) out[n] = ncclGetLocalPointer(win, offset);
}

// Every LSA peer's address of (win, offset), as host-usable pointers (ncclGetLsaPointer is
// device-only). Valid while the window stays registered; cudaMemcpyAsync to/from them moves data
// with the copy engines, StreamMemOps can wait on or write them. Entry `self` (this rank's LSA
// rank, when given) is ncclGetLocalPointer's address. Both are NCCL's own mappings: neither equals
// the pointer ncclMemAlloc returned for the same memory, so pointer comparison with a user's
// buffer says nothing (see CopyEngineAllGather's local_recv).
inline std::vector<void*> host_lsa_pointers(ncclWindow_t win, size_t offset, int lsa_size, cudaStream_t stream, int self = -1) {
  void** dev = nullptr;
  BRAID_CUDA(cudaMalloc(&dev, sizeof(void*) * (size_t)(lsa_size + 1)));
  lsa_pointers_kernel<><<<1, 32, 0, stream>>>(win, offset, lsa_size, dev);
  BRAID_LAUNCHED();
  std::vector<void*> out((size_t)lsa_size + 1);
  BRAID_CUDA(cudaMemcpyAsync(out.data(), dev, sizeof(void*) * out.size(), cudaMemcpyDeviceToHost, stream));
  BRAID_CUDA(cudaStreamSynchronize(stream));
  BRAID_CUDA(cudaFree(dev));
  if (self >= 0 && self < lsa_size) out[(size_t)self] = out[(size_t)lsa_size];
  out.pop_back();
  return out;
}

// Copy-engine all-gather over LSA addresses: my block is copied into every peer's slot with
// cudaMemcpyAsync. The caller orders it against the peers (a barrier before: peers ready; a
// barrier or flag after: data complete). An in-place source is recognised only when
// peer_recv_bases[me] is the caller's own pointer to its receive buffer.
inline void copy_engine_all_gather(const std::vector<void*>& peer_recv_bases, int me, size_t block_stride, const void* src,
                                   size_t bytes, cudaStream_t stream) {
  const int n = (int)peer_recv_bases.size();
  for (int k = 0; k < n; ++k) {
    const int peer = (me + k) % n;
    char* dst = static_cast<char*>(peer_recv_bases[(size_t)peer]) + (size_t)me * block_stride;
    if (dst != src) BRAID_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
  }
}

// One CTA meets the same index on every LSA peer (acq_rel): a stream-ordered cross-GPU barrier.
template <int kUnused = 0>
__global__ void lsa_barrier_kernel(ncclDevComm dc, uint32_t index) {
  ncclLsaBarrierSession<ncclCoopCta> bar(ncclCoopCta(), dc, ncclTeamTagLsa(), index);
  bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel);
}

// Copy-engine all-gather: copy engines move the data (cudaMemcpyAsync over LSA addresses), so no
// SM copies. Per call, on `stream`: every peer is ready (done with the previous contents), my
// block is copied into each peer's slot, every peer's block has landed. How the two handshakes
// are made:
//   Sync::StreamWrite  flags written with cuStreamWriteValue32, waited with cuStreamWaitValue32:
//                      no SM at all;
//   Sync::KernelFlag   flags written by a one-thread kernel, waited with cuStreamWaitValue32;
//   Sync::Barrier      a one-CTA LSA barrier kernel before and after the copies (needs the
//                      devComm and one barrier index, `barrier_index`);
//   Sync::Batch        as StreamWrite, each handshake one cuStreamBatchMemOp; the push "ready"
//                      flags skip the memory barrier (nothing written before them needs
//                      ordering: they only say earlier reads of the receive buffer are done)
//                      where the driver allows it, else they keep it.
//   Sync::KernelWait   flags written with cuStreamWriteValue32, waited by a one-thread kernel
//                      spinning on them (holds one SM slot while it waits).
// Flags are epochs in a zeroed symmetric state region of flag_bytes(lsa_size) bytes, so they are
// never reset (one region per instance: a new instance restarts its epochs at 1).
// Options: set_direction(Pull) reads the peers' blocks instead of writing mine (the copy engines
// of the receiving GPU move the data); set_lanes(L) splits every block copy over L streams.
// Split phase (push, flag handshakes): release(stream), called once this rank is done with its
// receive buffer (after the kernels that read the last result), announces "ready" for the next
// call there, so that call waits only for peers still busy instead of paying a flag round trip
// after its start. run() without an earlier release() announces it itself, as before.
// Measured at 256 MiB on 2 x H200 (bench/device/allgather-results.md): push, 1 lane, memop flags,
// release() after each call 380.4-382.2 GB/s (5 runs; without release() 375.9-381.7); more lanes,
// pull, batched memops, kernel waits, or a share of the block copied by SMs do not add.
class CopyEngineAllGather {
 public:
  enum class Sync { StreamWrite, KernelFlag, Barrier, Batch, KernelWait };
  static size_t flag_bytes(int lsa_size) { return 2u * (size_t)lsa_size * sizeof(uint32_t); }

  // local_recv: this rank's own pointer to the receive region (the window's memory as allocated,
  // + recv_off). With it, run(src) where src is this rank's own slot skips the local copy; without
  // it the own slot is written through NCCL's mapping, which for an in-place src copies the block
  // onto itself (measured at 256 MiB: 320 instead of 385 GB/s).
  CopyEngineAllGather(ncclWindow_t recv_win, size_t recv_off, size_t block_stride, ncclWindow_t flag_win, size_t flag_off, int lsa_rank,
                      int lsa_size, cudaStream_t stream, Sync sync = Sync::StreamWrite, void* local_recv = nullptr)
      : me_(lsa_rank), n_(lsa_size), stride_(block_stride), sync_(sync) {
    recv_ = host_lsa_pointers(recv_win, recv_off, lsa_size, stream, lsa_rank);
    if (local_recv != nullptr) recv_[(size_t)me_] = local_recv;
    flags_ = host_lsa_pointers(flag_win, flag_off, lsa_size, stream, lsa_rank);
  }
  // Sync::Barrier form: no flag region; barrier index `barrier_index` of dc.
  CopyEngineAllGather(ncclWindow_t recv_win, size_t recv_off, size_t block_stride, ncclDevComm const& dc, uint32_t barrier_index,
                      cudaStream_t stream, void* local_recv = nullptr)
      : me_(dc.lsaRank), n_(dc.lsaSize), stride_(block_stride), sync_(Sync::Barrier), dc_(dc), barrier_index_(barrier_index) {
    recv_ = host_lsa_pointers(recv_win, recv_off, n_, stream, me_);
    if (local_recv != nullptr) recv_[(size_t)me_] = local_recv;
  }

  ~CopyEngineAllGather() {
    for (cudaStream_t s : lane_streams_) cudaStreamDestroy(s);
    for (cudaEvent_t e : lane_events_) cudaEventDestroy(e);
  }
  CopyEngineAllGather(const CopyEngineAllGather&) = delete;
  CopyEngineAllGather& operator=(const CopyEngineAllGather&) = delete;

  // Split each block copy into `lanes` slices issued on as many streams (forked from and joined
  // back into the caller's stream), so several copy engines share one block. 1 = one copy per peer.
  void set_lanes(int lanes) {
    if (lanes < 1 || lanes > 16) throw DeviceError("CopyEngineAllGather lanes must be 1..16");
    while ((int)lane_streams_.size() < lanes - 1) {
      cudaStream_t s = nullptr;
      BRAID_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      lane_streams_.push_back(s);
    }
    while ((int)lane_events_.size() < lanes) {
      cudaEvent_t e = nullptr;
      BRAID_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      lane_events_.push_back(e);
    }
    lanes_ = lanes;
  }
  int lanes() const { return lanes_; }

  // Push (default): my block is written into every peer's slot. Pull: every peer's block is read
  // from its own slot into mine; src is first copied into my own slot unless it is that slot
  // (the peers read from there). The handshakes are the same: everyone ready, everyone done.
  enum class Direction { Push, Pull };
  // Not between release() and run(): the peers took that "ready" in push's meaning.
  void set_direction(Direction d) {
    if (d != direction_ && released_ > epoch_) throw DeviceError("CopyEngineAllGather: set_direction between release() and run()");
    direction_ = d;
  }
  Direction direction() const { return direction_; }

  // Push with flags: tell the peers, in `stream` order, that this rank's receive buffer may be
  // overwritten by the next run(). Without effect for Pull and Sync::Barrier (their first
  // handshake also says "my block is written", which only run() knows).
  void release(cudaStream_t stream) {
    if (direction_ != Direction::Push || sync_ == Sync::Barrier || released_ > epoch_) return;
    released_ = epoch_ + 1;
    announce(0, released_, stream, sync_ == Sync::Batch);
  }

  void run(const void* src, size_t bytes, cudaStream_t stream) {
    ++epoch_;
    char* own = static_cast<char*>(recv_[(size_t)me_]) + (size_t)me_ * stride_;
    if (direction_ == Direction::Pull && src != own) BRAID_CUDA(cudaMemcpyAsync(own, src, bytes, cudaMemcpyDefault, stream));
    if (released_ == epoch_) await(0, stream);  // "ready" already announced by release() (push, flags)
    else handshake(0, stream);
    if (lanes_ > 1) BRAID_CUDA(cudaEventRecord(lane_events_[0], stream));
    for (int lane = 0; lane < lanes_; ++lane) {
      // Slices are 16-byte aligned; lane 0 is the caller's stream and takes the remainder.
      const size_t slice = lanes_ == 1 ? bytes : bytes / (size_t)lanes_ / 16 * 16;
      const size_t begin = lane == 0 ? 0 : bytes - (size_t)(lanes_ - lane) * slice;
      const size_t len = lane == 0 ? bytes - (size_t)(lanes_ - 1) * slice : slice;
      cudaStream_t s = lane == 0 ? stream : lane_streams_[(size_t)lane - 1];
      if (lane > 0) BRAID_CUDA(cudaStreamWaitEvent(s, lane_events_[0], 0));
      for (int k = 1; k <= n_ && len > 0; ++k) {
        const int peer = (me_ + k) % n_;  // me last: my own block (push, not in place)
        if (direction_ == Direction::Push) {
          char* dst = static_cast<char*>(recv_[(size_t)peer]) + (size_t)me_ * stride_ + begin;
          const char* from = static_cast<const char*>(src) + begin;
          if (dst != from) BRAID_CUDA(cudaMemcpyAsync(dst, from, len, cudaMemcpyDefault, s));
        } else if (peer != me_) {
          const size_t at = (size_t)peer * stride_ + begin;
          BRAID_CUDA(cudaMemcpyAsync(static_cast<char*>(recv_[(size_t)me_]) + at, static_cast<const char*>(recv_[(size_t)peer]) + at, len,
                                     cudaMemcpyDefault, s));
        }
      }
    }
    for (int lane = 1; lane < lanes_; ++lane) {
      BRAID_CUDA(cudaEventRecord(lane_events_[(size_t)lane], lane_streams_[(size_t)lane - 1]));
      BRAID_CUDA(cudaStreamWaitEvent(stream, lane_events_[(size_t)lane], 0));
    }
    handshake(1, stream);
  }

 private:
  uint32_t* flag(int owner, int phase, int source) const { return static_cast<uint32_t*>(flags_[(size_t)owner]) + phase * n_ + source; }
  void handshake(int phase, cudaStream_t stream) {
    if (sync_ == Sync::Barrier) {
      lsa_barrier_kernel<><<<1, 32, 0, stream>>>(dc_, barrier_index_);
      BRAID_LAUNCHED();
      return;
    }
    if (sync_ == Sync::Batch) {
      std::vector<StreamMemOps::Write> writes, waits;
      for (int p = 0; p < n_; ++p)
        if (p != me_) {
          writes.push_back({flag(p, phase, me_), epoch_});
          waits.push_back({flag(me_, phase, p), epoch_});
        }
      // Pull's "ready" says my block is written: that needs the barrier, as does every "done".
      const bool unbarriered = phase == 0 && direction_ == Direction::Push && unbarriered_ok_;
      if (unbarriered && memops_.try_batch(stream, writes, false, waits)) return;
      if (unbarriered) unbarriered_ok_ = false;
      if (memops_.try_batch(stream, writes, true, waits)) return;
      throw DeviceError("CopyEngineAllGather Sync::Batch: cuStreamBatchMemOp refused the handshake");
    }
    announce(phase, epoch_, stream, false);
    await(phase, stream);
  }
  // Write this rank's flag of `phase` at every peer (value `epoch`); `batched`: one batch of
  // writes, push's "ready" ones without a memory barrier where the driver takes it.
  void announce(int phase, uint32_t epoch, cudaStream_t stream, bool batched) {
    if (batched) {
      std::vector<StreamMemOps::Write> writes;
      for (int p = 0; p < n_; ++p)
        if (p != me_) writes.push_back({flag(p, phase, me_), epoch});
      const bool unbarriered = phase == 0 && direction_ == Direction::Push && unbarriered_ok_;
      if (unbarriered && memops_.try_batch(stream, writes, false, {})) return;
      if (unbarriered) unbarriered_ok_ = false;
      if (memops_.try_batch(stream, writes, true, {})) return;
    }
    for (int p = 0; p < n_; ++p) {
      if (p == me_) continue;
      if (sync_ == Sync::KernelFlag) launch_set_flag(stream, flag(p, phase, me_), epoch);
      else memops_.write(stream, flag(p, phase, me_), epoch);
    }
  }
  // Wait until every peer's flag of `phase` here has reached the current epoch.
  void await(int phase, cudaStream_t stream) {
    for (int q = 0; q < n_; ++q) {
      if (q == me_) continue;
      if (sync_ == Sync::KernelWait) launch_wait_flag(stream, flag(me_, phase, q), epoch_);
      else memops_.wait_geq(stream, flag(me_, phase, q), epoch_);
    }
  }

  int me_, n_;
  size_t stride_;
  Sync sync_;
  ncclDevComm dc_{};
  uint32_t barrier_index_ = 0;
  uint32_t epoch_ = 0;
  uint32_t released_ = 0;  // last epoch whose "ready" release() has announced
  std::vector<void*> recv_, flags_;
  StreamMemOps memops_;
  int lanes_ = 1;
  Direction direction_ = Direction::Push;
  bool unbarriered_ok_ = true;  // Sync::Batch: the driver took unbarriered flag writes (so far)
  std::vector<cudaStream_t> lane_streams_;
  std::vector<cudaEvent_t> lane_events_;
};

// NCCL's host collectives with NCCL_CTA_POLICY_ZERO: a communicator split from `parent` that uses
// copy engines and no SMs where it can. Buffers passed to its collectives should be registered
// on *this* communicator with register_window (symmetric registration enables the CE path).
class ZeroCtaComm {
 public:
  explicit ZeroCtaComm(ncclComm_t parent, int rank) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.CTAPolicy = NCCL_CTA_POLICY_ZERO;
    BRAID_NCCL(ncclCommSplit(parent, 0, rank, &comm_, &cfg));
  }
  ~ZeroCtaComm() {
    for (ncclWindow_t w : windows_) ncclCommWindowDeregister(comm_, w);
    if (comm_ != nullptr) ncclCommDestroy(comm_);
  }
  ZeroCtaComm(const ZeroCtaComm&) = delete;
  ZeroCtaComm& operator=(const ZeroCtaComm&) = delete;
  ncclComm_t get() const { return comm_; }
  ncclWindow_t register_window(void* ptr, size_t bytes) {
    ncclWindow_t w = nullptr;
    BRAID_NCCL(ncclCommWindowRegister(comm_, ptr, bytes, &w, NCCL_WIN_COLL_SYMMETRIC));
    windows_.push_back(w);
    return w;
  }
  void all_gather(const void* send, void* recv, size_t count, ncclDataType_t type, cudaStream_t stream) {
    BRAID_NCCL(ncclAllGather(send, recv, count, type, comm_, stream));
  }

 private:
  ncclComm_t comm_ = nullptr;
  std::vector<ncclWindow_t> windows_;
};

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
