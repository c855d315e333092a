// A small communicator class: the communicator is a field created through the object, the
// collectives are member functions that name it bare.
#include <cstdio>
#include <mpi.h>
#include <cuda_runtime.h>
#include <nccl.h>

namespace braid_converted { constexpr int kCallSites = 2; }

// ==== braid convert: device-initiated replacements (stage A: symmetric memory, windows, device
// communicator, teardown; stage B: collectives on braid's LSA primitives). Generated. ====
#include <nccl_device.h>
#include <cuda_fp16.h>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <set>
#include <vector>
#include <cstdlib>
#include "braid/comm.cuh"
#include "braid/convert_p2p.hpp"

namespace braid_converted {
using namespace braid::dev;
using braid::convert_p2p::kMaxP2pOps;
using braid::convert_p2p::kSlots;

constexpr uint32_t kBarriersPerSite = 132;  // LsaBarrier indices per call site: >= CTAs of a launch
constexpr int kThreads = 512;
constexpr int kMaxWindows = 1024;

struct Allocation {
  char* base = nullptr;
  size_t bytes = 0;
  ncclWindow_t win = nullptr;
  bool external = false;  // registered by someone else (the harness): never deregistered here
};

// Mailbox of a rank (one window): posts[sender][slot] written by this rank when it receives,
// read by the sender; done[sender][slot] written by the sender when the message has landed.
struct MailEntry {
  unsigned long long window, offset, bytes, seq;
};
constexpr size_t kPostsBytes = sizeof(MailEntry) * kMaxLsaPeers * kSlots;
constexpr size_t kMailBytes = kPostsBytes + sizeof(unsigned long long) * kMaxLsaPeers * kSlots;

// One send or receive of a converted group, as the p2p kernel reads it (device memory).
struct P2pOp {
  const void* src;
  unsigned long long offset, bytes, seq;
  int window, peer, slot, is_send;
  unsigned int finished;  // CTAs done with this send (the last one signals the receiver)
  unsigned int pad;
};

struct PendingP2p {
  bool is_send;
  void* buf;
  size_t count;
  ncclDataType_t type;
  int peer;
  ncclComm_t comm;
  cudaStream_t stream;
};

struct State {
  std::vector<Allocation> allocations;  // allocation order: the same on every rank
  ncclComm_t comm = nullptr;
  bool bound_at_creation = false;       // windows are registered where every rank passes
  ncclDevComm dc{};
  bool dc_made = false;
  int rank = 0, nranks = 1, sms = 0;
  char* mailbox = nullptr;
  ncclWindow_t mailbox_win = nullptr;
  ncclWindow_t* dev_windows = nullptr;  // window handles by allocation index, for the p2p kernel
  P2pOp* dev_plans = nullptr;           // one plan per call site
  braid::convert_p2p::P2pSequencer sequencer;
  int group_depth = 0;
  std::vector<PendingP2p> pending;
  std::set<int> warned;
};
inline State& state() {
  static State s;
  return s;
}

inline size_t type_bytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 1;
  }
}
inline size_t round_window(size_t bytes) { return (bytes + 4095) / 4096 * 4096; }

inline void fell_back(int site, const char* what, const char* why) {
  if (state().warned.insert(site).second) std::fprintf(stderr, "braid_converted: site %d: %s ran as host NCCL (%s)\n", site, what, why);
}
[[noreturn]] inline void fatal(int site, const char* what, const char* why) {
  std::fprintf(stderr, "braid_converted: site %d: %s cannot run: %s (a host fallback on this rank alone would hang its peer)\n", site,
               what, why);
  std::abort();
}
inline void register_window(Allocation& a);

// Stage A: symmetric allocation (the window is registered once the communicator is known).
template <typename T>
inline cudaError_t sym_malloc(T** ptr, size_t bytes) {
  void* p = nullptr;
  if (ncclMemAlloc(&p, round_window(bytes)) != ncclSuccess) return cudaErrorMemoryAllocation;
  *ptr = static_cast<T*>(p);
  State& s = state();
  s.allocations.push_back(Allocation{static_cast<char*>(p), round_window(bytes), nullptr, false});
  if (s.bound_at_creation) register_window(s.allocations.back());  // every rank allocates here too
  return cudaSuccess;
}
inline ncclResult_t sym_nccl_alloc(void** ptr, size_t bytes) {
  return sym_malloc(reinterpret_cast<char**>(ptr), bytes) == cudaSuccess ? ncclSuccess : ncclSystemError;
}
// Every release goes to the allocator that made the pointer: a symmetric allocation (ours) is
// deregistered and ncclMemFree'd; anything else goes to the program's own free. Decided by
// looking the pointer up, so no static mapping of names can pair a free with the wrong allocator.
inline bool sym_release(void* ptr, ncclResult_t* result) {
  State& s = state();
  for (size_t i = 0; i < s.allocations.size(); ++i) {
    if (s.allocations[i].base != ptr || s.allocations[i].external) continue;
    if (s.allocations[i].win != nullptr && s.comm != nullptr) ncclCommWindowDeregister(s.comm, s.allocations[i].win);
    s.allocations.erase(s.allocations.begin() + (long)i);
    *result = ncclMemFree(ptr);
    return true;
  }
  return false;
}
inline cudaError_t sym_free(void* ptr) {
  ncclResult_t r;
  if (sym_release(ptr, &r)) return r == ncclSuccess ? cudaSuccess : cudaErrorInvalidValue;
  return cudaFree(ptr);
}
inline cudaError_t sym_free_async(void* ptr, cudaStream_t stream) {
  ncclResult_t r;
  for (const Allocation& a : state().allocations)
    if (a.base == ptr && !a.external) {
      cudaStreamSynchronize(stream);  // work queued on the stream may still use it
      sym_release(ptr, &r);
      return r == ncclSuccess ? cudaSuccess : cudaErrorInvalidValue;
    }
  return cudaFreeAsync(ptr, stream);
}
inline ncclResult_t sym_nccl_free(void* ptr) {
  ncclResult_t r;
  if (sym_release(ptr, &r)) return r;
  return ncclMemFree(ptr);
}

inline void register_window(Allocation& a) {
  State& s = state();
  if (a.win != nullptr || s.comm == nullptr) return;
  BRAID_NCCL(ncclCommWindowRegister(s.comm, a.base, a.bytes, &a.win, NCCL_WIN_COLL_SYMMETRIC));
  const size_t index = (size_t)(&a - s.allocations.data());
  if (s.dev_windows != nullptr && index < (size_t)kMaxWindows)
    BRAID_CUDA(cudaMemcpy(s.dev_windows + index, &a.win, sizeof(ncclWindow_t), cudaMemcpyHostToDevice));
}

// Binding to a communicator (a collective step: at its creation, or at the first converted
// collective): windows for every symmetric allocation so far (allocation order), the p2p
// mailbox, and one device communicator with barriers for every site.
inline bool ensure(ncclComm_t comm) {
  State& s = state();
  if (s.comm != nullptr && s.comm != comm) return false;  // one communicator is converted
  if (s.comm == nullptr) {
    s.comm = comm;
    ncclCommUserRank(comm, &s.rank);
    ncclCommCount(comm, &s.nranks);
    s.sequencer.resize(s.nranks);
    int dev = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&s.sms, cudaDevAttrMultiProcessorCount, dev);
    const size_t mail_bytes = round_window(kMailBytes);
    BRAID_NCCL(ncclMemAlloc(reinterpret_cast<void**>(&s.mailbox), mail_bytes));
    BRAID_CUDA(cudaMemset(s.mailbox, 0, mail_bytes));
    BRAID_NCCL(ncclCommWindowRegister(comm, s.mailbox, mail_bytes, &s.mailbox_win, NCCL_WIN_COLL_SYMMETRIC));
    BRAID_CUDA(cudaMalloc(reinterpret_cast<void**>(&s.dev_windows), sizeof(ncclWindow_t) * kMaxWindows));
    BRAID_CUDA(cudaMemset(s.dev_windows, 0, sizeof(ncclWindow_t) * kMaxWindows));
    BRAID_CUDA(cudaMalloc(reinterpret_cast<void**>(&s.dev_plans), sizeof(P2pOp) * kMaxP2pOps * (size_t)kCallSites));
  }
  for (Allocation& a : s.allocations) register_window(a);
  if (!s.dc_made) {
    ncclDevCommRequirements r;
    std::memset(&r, 0, sizeof(r));
    r.lsaBarrierCount = (int)(kBarriersPerSite * (uint32_t)kCallSites);
    r.lsaMultimem = false;
    BRAID_NCCL(ncclDevCommCreate(comm, &r, &s.dc));
    s.dc_made = true;
  }
  return s.dc.lsaSize == s.nranks && s.nranks <= kMaxLsaPeers;
}

// The window holding [p, p + bytes), or -1.
inline int window_of(const void* p, size_t bytes, size_t* offset) {
  const State& s = state();
  const char* c = static_cast<const char*>(p);
  for (size_t i = 0; i < s.allocations.size(); ++i) {
    const Allocation& a = s.allocations[i];
    if (a.win != nullptr && c >= a.base && c + bytes <= a.base + a.bytes) {
      *offset = (size_t)(c - a.base);
      return (int)i;
    }
  }
  return -1;
}

inline int ctas_for(size_t bytes, size_t min_chunk) {
  return braid::convert_p2p::rule_ctas(bytes, min_chunk, state().sms, (int)kBarriersPerSite);
}
inline uint32_t first_barrier(int site) { return (uint32_t)site * kBarriersPerSite; }

// ---- launch shape per call site, the knobs of an annotated program (braid::convert::annotate) ----
// Every replacement takes a Shape as its template argument after SITE (or one Site type, below);
// the default Shape<> (Issuer::Cta, 0, 0, Backend::Lsa) takes exactly the rules' launch. ISSUER: the thread group that copies one chunk;
// barriers stay one index per CTA whatever the issuer, so any issuer fits the site's
// kBarriersPerSite indices. CTAS: 0 = the rule's count, else capped by the SMs (co-residency of
// spinning grids) and kBarriersPerSite. CHUNK_BYTES: 0 = the rule's chunking (an even share per
// issuer group). BACKEND: the converted program's device communicator requests no GIN resources,
// so Gin runs on LSA (said once on stderr); annotate pins it to Lsa by a braid:require.
template <Issuer I = Issuer::Cta, int CTAS = 0, size_t CHUNK_BYTES = 0, Backend BACKEND = Backend::Lsa>
struct Shape {
  static constexpr Issuer issuer = I;
  static constexpr int ctas = CTAS;
  static constexpr size_t chunk_bytes = CHUNK_BYTES;
  static constexpr Backend backend = BACKEND;
};
// A call site with its shape, the one template argument of an annotated call: all_gather<S>(...)
// with S = Site<0, ...> is all_gather<0, Shape<...>>(...) without a comma, so the call still fits
// in a one-argument error-check macro (BRAID_NCCL(...)).
template <int SITE, Issuer I = Issuer::Cta, int CTAS = 0, size_t CHUNK_BYTES = 0, Backend BACKEND = Backend::Lsa>
struct Site {
  static constexpr int site = SITE;
  using shape = Shape<I, CTAS, CHUNK_BYTES, BACKEND>;
};
template <Issuer I>
constexpr size_t groups_per_cta() {
  return I == Issuer::Cta ? 1 : (I == Issuer::Warp ? (size_t)kThreads / 32 : (size_t)kThreads);
}
template <Issuer I, int CTAS, size_t CHUNK_BYTES>
constexpr bool rule_shape() {
  return I == Issuer::Cta && CTAS == 0 && CHUNK_BYTES == 0;
}
inline int tuned_ctas(int wanted, int rule) {
  if (wanted <= 0) return rule;
  const int cap = std::min<int>(state().sms > 0 ? state().sms : 32, (int)kBarriersPerSite);
  return std::max(1, std::min(wanted, cap));
}
// Chunk in bytes, a multiple of `align` (16 B accesses; 8 elements for the reductions).
template <Issuer I>
inline size_t tuned_chunk(size_t chunk_bytes, size_t total_bytes, int ctas, size_t align) {
  if (chunk_bytes > 0) return std::max(align, chunk_bytes / align * align);
  const size_t groups = (size_t)ctas * groups_per_cta<I>();
  return std::max(align, ((total_bytes + groups - 1) / groups + align - 1) / align * align);
}
template <int SITE, Backend B>
inline void note_backend() {
  if constexpr (B == Backend::Gin) {
    static bool said = false;
    if (!said) std::fprintf(stderr, "braid_converted: site %d: backend Gin requested; converted collectives have no GIN path, it runs on LSA\n", SITE);
    said = true;
  }
}

// Teardown in the order NCCL needs: device communicator, windows (allocation order), then the
// communicator; memory is freed by the program's own (converted) frees.
inline void teardown(ncclComm_t comm) {
  State& s = state();
  if (s.comm != comm) return;
  if (s.dc_made) ncclDevCommDestroy(comm, &s.dc);
  s.dc_made = false;
  for (Allocation& a : s.allocations)
    if (a.win != nullptr && !a.external) {
      ncclCommWindowDeregister(comm, a.win);
      a.win = nullptr;
    }
  if (s.mailbox_win != nullptr) ncclCommWindowDeregister(comm, s.mailbox_win);
  if (s.mailbox != nullptr) ncclMemFree(s.mailbox);
  if (s.dev_windows != nullptr) cudaFree(s.dev_windows);
  if (s.dev_plans != nullptr) cudaFree(s.dev_plans);
  s.dev_windows = nullptr;
  s.dev_plans = nullptr;
  s.mailbox = nullptr;
  s.mailbox_win = nullptr;
  s.comm = nullptr;
  s.bound_at_creation = false;
}
// Creation of the converted communicator: every rank passes here, so the runtime binds to it now
// (windows of the symmetric allocations so far, the mailbox, the device communicator), and later
// symmetric allocations register at once. Point-to-point calls, which run on some ranks only,
// then never need a collective step of their own.
inline ncclResult_t bind_created(ncclResult_t r, ncclComm_t comm) {
  if (r != ncclSuccess || comm == nullptr) return r;  // NCCL_SPLIT_NOCOLOR: this rank has no communicator
  State& s = state();
  if (s.comm != nullptr) return r;
  ensure(comm);
  s.bound_at_creation = true;
  return r;
}
inline ncclResult_t comm_init_rank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  const ncclResult_t r = ncclCommInitRank(comm, nranks, id, rank);
  return bind_created(r, *comm);
}
inline ncclResult_t comm_init_rank_config(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
  const ncclResult_t r = ncclCommInitRankConfig(comm, nranks, id, rank, config);
  return bind_created(r, *comm);
}
inline ncclResult_t comm_split(ncclComm_t parent, int color, int key, ncclComm_t* comm, ncclConfig_t* config) {
  const ncclResult_t r = ncclCommSplit(parent, color, key, comm, config);
  return bind_created(r, *comm);
}
inline ncclResult_t comm_destroy(ncclComm_t comm) {
  teardown(comm);
  return ncclCommDestroy(comm);
}
inline ncclResult_t comm_finalize(ncclComm_t comm) {
  teardown(comm);
  return ncclCommFinalize(comm);
}

// ---- kernels built from the primitives ----

// All-reduce (sum) = reduce-scatter pull of my slice from every peer's send window, then an
// all-gather push of the reduced slice into every peer's receive window. The CTA that reduced a
// chunk pushes it (same chunk dealing), so one __syncthreads orders the two.
template <typename T, Issuer I = Issuer::Cta>
__global__ void __launch_bounds__(1024) all_reduce_kernel(ncclDevComm dc, ncclWindow_t send_win, size_t send_off, ncclWindow_t recv_win,
                                                          size_t recv_off, T* recv_local, size_t slice, size_t chunk_elems, uint32_t first_index) {
  LsaBarrier<Issuer::Cta> bar(dc, first_index);
  bar.sync(cuda::memory_order_acq_rel);
  T* mine = recv_local + (size_t)dc.lsaRank * slice;
  reduce_scatter_pull<T, I>(dc, send_win, send_off, mine, slice, chunk_elems);
  __syncthreads();
  all_gather_push<I>(dc, recv_win, recv_off, slice * sizeof(T), mine, slice * sizeof(T), chunk_elems * sizeof(T));
  if constexpr (I != Issuer::Cta) __syncthreads();
  bar.sync(cuda::memory_order_acq_rel);
}

// Tuned launches: barriers per CTA (LsaBarrier<Cta>), copies by issuer group I.
template <Issuer I>
__global__ void __launch_bounds__(1024) tuned_all_gather_kernel(ncclDevComm dc, ncclWindow_t recv_win, size_t recv_off, size_t block_stride,
                                                                const void* src, size_t bytes, size_t chunk_bytes, uint32_t first_index) {
  LsaBarrier<Issuer::Cta> bar(dc, first_index);
  bar.sync(cuda::memory_order_acq_rel);
  all_gather_push<I>(dc, recv_win, recv_off, block_stride, src, bytes, chunk_bytes);
  __syncthreads();
  bar.sync(cuda::memory_order_acq_rel);
}
template <typename T, Issuer I>
__global__ void __launch_bounds__(1024) tuned_reduce_scatter_kernel(ncclDevComm dc, ncclWindow_t send_win, size_t send_off, T* out,
                                                                    size_t count, size_t chunk_elems, uint32_t first_index) {
  LsaBarrier<Issuer::Cta> bar(dc, first_index);
  bar.sync(cuda::memory_order_acq_rel);
  reduce_scatter_pull<T, I>(dc, send_win, send_off, out, count, chunk_elems);
  __syncthreads();
  bar.sync(cuda::memory_order_acq_rel);
}
template <Issuer I>
__global__ void __launch_bounds__(1024) tuned_all_to_all_kernel(ncclDevComm dc, ncclWindow_t recv_win, size_t recv_off, const void* src,
                                                                size_t bytes, size_t chunk_bytes, uint32_t first_index) {
  LsaBarrier<Issuer::Cta> bar(dc, first_index);
  bar.sync(cuda::memory_order_acq_rel);
  all_to_all_push<I>(dc, recv_win, recv_off, src, bytes, chunk_bytes);
  __syncthreads();
  bar.sync(cuda::memory_order_acq_rel);
}

// Broadcast: the root pushes its buffer into every rank's receive window (the receive buffer is
// significant on every rank; the send buffer only on the root).
template <Issuer I = Issuer::Cta>
__global__ void __launch_bounds__(1024) broadcast_kernel(ncclDevComm dc, ncclWindow_t recv_win, size_t recv_off, int root, const char* src,
                                                         size_t bytes, size_t chunk_bytes, uint32_t first_index) {
  using G = IssuerGroup<I>;
  LsaBarrier<Issuer::Cta> bar(dc, first_index);
  bar.sync(cuda::memory_order_acq_rel);
  if (dc.lsaRank == root) {
    const size_t n = chunk_count(bytes, chunk_bytes);
    for (int p = 0; p < dc.lsaSize; ++p) {
      char* dst = static_cast<char*>(ncclGetLsaPointer(recv_win, recv_off, p));
      if (dst == src) continue;
      for (size_t c = G::id(); c < n; c += G::count()) {
        const ChunkRange r = chunk_at(c, bytes, chunk_bytes);
        copy_range<I>(dst + r.begin, src + r.begin, r.end - r.begin);
      }
    }
  }
  if constexpr (I != Issuer::Cta) __syncthreads();
  bar.sync(cuda::memory_order_acq_rel);
}

// Scatter: the root pushes block p of its buffer into rank p's receive window.
__global__ void __launch_bounds__(1024) scatter_kernel(ncclDevComm dc, ncclWindow_t recv_win, size_t recv_off, int root, const char* src,
                                                       size_t bytes, size_t chunk_bytes, uint32_t first_index) {
  using G = IssuerGroup<Issuer::Cta>;
  LsaBarrier<Issuer::Cta> bar(dc, first_index);
  bar.sync(cuda::memory_order_acq_rel);
  if (dc.lsaRank == root) {
    const size_t n = chunk_count(bytes, chunk_bytes);
    for (int p = 0; p < dc.lsaSize; ++p) {
      char* dst = static_cast<char*>(ncclGetLsaPointer(recv_win, recv_off, p));
      for (size_t c = G::id(); c < n; c += G::count()) {
        const ChunkRange r = chunk_at(c, bytes, chunk_bytes);
        copy_range<Issuer::Cta>(dst + r.begin, src + (size_t)p * bytes + r.begin, r.end - r.begin);
      }
    }
  }
  bar.sync(cuda::memory_order_acq_rel);
}

// Gather: the root pulls every rank's send window into block p of its receive buffer.
__global__ void __launch_bounds__(1024) gather_kernel(ncclDevComm dc, ncclWindow_t send_win, size_t send_off, int root, char* dst,
                                                      size_t bytes, size_t chunk_bytes, uint32_t first_index) {
  using G = IssuerGroup<Issuer::Cta>;
  LsaBarrier<Issuer::Cta> bar(dc, first_index);
  bar.sync(cuda::memory_order_acq_rel);
  if (dc.lsaRank == root) {
    const size_t n = chunk_count(bytes, chunk_bytes);
    for (int p = 0; p < dc.lsaSize; ++p) {
      const char* src = static_cast<const char*>(ncclGetLsaPointer(send_win, send_off, p));
      for (size_t c = G::id(); c < n; c += G::count()) {
        const ChunkRange r = chunk_at(c, bytes, chunk_bytes);
        copy_range<Issuer::Cta>(dst + (size_t)p * bytes + r.begin, src + r.begin, r.end - r.begin);
      }
    }
  }
  bar.sync(cuda::memory_order_acq_rel);
}

// ---- element-wise reductions of any NCCL type and op (ncclSum/Prod/Max/Min/Avg) ----
// Accumulated in float for 16-bit floats, in the type itself otherwise; peers in rank order
// 0..n-1 on every rank, so every rank computes the same value.
template <typename T> struct Acc { using type = T; };
template <> struct Acc<__half> { using type = float; };
template <> struct Acc<__nv_bfloat16> { using type = float; };
template <typename T> __device__ __forceinline__ typename Acc<T>::type to_acc(T x) { return (typename Acc<T>::type)x; }
template <> __device__ __forceinline__ float to_acc<__half>(__half x) { return __half2float(x); }
template <> __device__ __forceinline__ float to_acc<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_acc(typename Acc<T>::type x) { return (T)x; }
template <> __device__ __forceinline__ __half from_acc<__half>(float x) { return __float2half(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
template <typename A>
__device__ __forceinline__ A combine(A a, A b, int op) {
  switch (op) {
    case ncclProd: return a * b;
    case ncclMax: return a > b ? a : b;
    case ncclMin: return a < b ? a : b;
    default: return a + b;  // ncclSum, ncclAvg (divided at the end)
  }
}
// out[i] (and, with push, every peer's recv window at the same place) = op over ranks of the
// send window at src_base + i, for i in [begin, end) of this rank's part. root >= 0: only the root
// reduces (ncclReduce); the others only meet the barriers.
template <typename T>
__global__ void __launch_bounds__(1024) reduce_kernel(ncclDevComm dc, ncclWindow_t send_win, size_t send_off, T* out, ncclWindow_t recv_win,
                                                      size_t recv_off, size_t begin, size_t end, int op, int root, bool push,
                                                      uint32_t first_index) {
  using A = typename Acc<T>::type;
  LsaBarrier<Issuer::Cta> bar(dc, first_index);
  bar.sync(cuda::memory_order_acq_rel);
  if (root < 0 || dc.lsaRank == root) {
    const int n = dc.lsaSize < kMaxLsaPeers ? dc.lsaSize : kMaxLsaPeers;
    const T* srcs[kMaxLsaPeers];
    T* dsts[kMaxLsaPeers];
    for (int p = 0; p < n; ++p) {
      srcs[p] = static_cast<const T*>(ncclGetLsaPointer(send_win, send_off, p));
      dsts[p] = push ? static_cast<T*>(ncclGetLsaPointer(recv_win, recv_off, p)) : nullptr;
    }
    for (size_t i = begin + (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < end; i += (size_t)gridDim.x * blockDim.x) {
      A acc = to_acc<T>(srcs[0][i]);
      for (int p = 1; p < n; ++p) acc = combine<A>(acc, to_acc<T>(srcs[p][i]), op);
      if (op == ncclAvg) acc = acc / (A)n;
      const T v = from_acc<T>(acc);
      if (push) {
        for (int p = 0; p < n; ++p) dsts[p][i] = v;
      } else {
        out[i - begin] = v;
      }
    }
  }
  bar.sync(cuda::memory_order_acq_rel);
}
// Launches reduce_kernel for an NCCL type value; false for a type without a device reduction.
inline bool launch_reduce(ncclDataType_t type, int ctas, cudaStream_t stream, const ncclDevComm& dc, ncclWindow_t send_win, size_t send_off,
                          void* out, ncclWindow_t recv_win, size_t recv_off, size_t begin, size_t end, int op, int root, bool push,
                          uint32_t first_index) {
#define BRAID_REDUCE_CASE(NCCL_TYPE, T)                                                                                       \
  case NCCL_TYPE:                                                                                                             \
    reduce_kernel<T><<<ctas, kThreads, 0, stream>>>(dc, send_win, send_off, static_cast<T*>(out), recv_win, recv_off, begin, end, op, \
                                                    root, push, first_index);                                                 \
    return true;
  switch (type) {
    BRAID_REDUCE_CASE(ncclFloat32, float)
    BRAID_REDUCE_CASE(ncclFloat16, __half)
    BRAID_REDUCE_CASE(ncclBfloat16, __nv_bfloat16)
    BRAID_REDUCE_CASE(ncclFloat64, double)
    BRAID_REDUCE_CASE(ncclInt32, int32_t)
    BRAID_REDUCE_CASE(ncclUint32, uint32_t)
    BRAID_REDUCE_CASE(ncclInt64, int64_t)
    BRAID_REDUCE_CASE(ncclUint64, uint64_t)
    BRAID_REDUCE_CASE(ncclInt8, int8_t)
    BRAID_REDUCE_CASE(ncclUint8, uint8_t)
    default: return false;
  }
#undef BRAID_REDUCE_CASE
}
inline bool float_type(ncclDataType_t t) {
  return t == ncclFloat32 || t == ncclFloat16 || t == ncclBfloat16 || t == ncclFloat64;
}
inline bool device_reduction(ncclDataType_t t, ncclRedOp_t op) {
  const bool known_op = op == ncclSum || op == ncclProd || op == ncclMax || op == ncclMin || (op == ncclAvg && float_type(t));
  return known_op && type_bytes(t) > 0 && t != ncclFloat8e4m3 && t != ncclFloat8e5m2;
}

// Point-to-point, pairwise (see braid/convert_p2p.hpp for why it cannot deadlock): receives are
// posted first (never waiting), sends wait only for their receiver's posting, then push and
// signal; receives wait only for their sender's signal. No world barrier, so ranks with other
// volumes, only receives, only sends or nothing at all never wait for each other.
template <Issuer I = Issuer::Cta>
__global__ void __launch_bounds__(1024) p2p_kernel(P2pOp* ops, int nops, ncclWindow_t mail_win, const ncclWindow_t* windows, int me,
                                                   size_t chunk_bytes) {
  using G = IssuerGroup<I>;
  MailEntry* posts = static_cast<MailEntry*>(ncclGetLsaPointer(mail_win, 0, me));
  volatile unsigned long long* done = static_cast<volatile unsigned long long*>(ncclGetLsaPointer(mail_win, kPostsBytes, me));
  if (blockIdx.x == 0)
    for (int i = threadIdx.x; i < nops; i += blockDim.x) {
      const P2pOp& op = ops[i];
      if (op.is_send) continue;
      MailEntry* e = posts + op.peer * kSlots + op.slot;
      e->window = (unsigned long long)op.window;
      e->offset = op.offset;
      e->bytes = op.bytes;
      __threadfence_system();
      reinterpret_cast<volatile unsigned long long*>(&e->seq)[0] = op.seq;
    }
  __shared__ MailEntry posted;
  for (int i = 0; i < nops; ++i) {
    P2pOp& op = ops[i];
    if (!op.is_send) continue;
    if (threadIdx.x == 0) {
      volatile MailEntry* remote = static_cast<volatile MailEntry*>(ncclGetLsaPointer(mail_win, 0, op.peer)) + me * kSlots + op.slot;
      while (remote->seq != op.seq) {
      }
      __threadfence_system();
      posted.window = remote->window;
      posted.offset = remote->offset;
      posted.bytes = remote->bytes;
    }
    __syncthreads();
    char* dst = static_cast<char*>(ncclGetLsaPointer(windows[posted.window], posted.offset, op.peer));
    const size_t bytes = op.bytes < posted.bytes ? op.bytes : posted.bytes;
    const size_t n = chunk_count(bytes, chunk_bytes);
    for (size_t c = G::id(); c < n; c += G::count()) {
      const ChunkRange r = chunk_at(c, bytes, chunk_bytes);
      copy_range<I>(dst + r.begin, static_cast<const char*>(op.src) + r.begin, r.end - r.begin);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence_system();
      if (atomicAdd(&op.finished, 1u) == gridDim.x - 1) {  // the last CTA of this send tells the receiver
        __threadfence_system();
        volatile unsigned long long* peer_done =
            static_cast<volatile unsigned long long*>(ncclGetLsaPointer(mail_win, kPostsBytes, op.peer));
        peer_done[me * kSlots + op.slot] = op.seq;
      }
    }
    __syncthreads();
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    for (int i = 0; i < nops; ++i)
      if (!ops[i].is_send)
        while (done[ops[i].peer * kSlots + ops[i].slot] != ops[i].seq) {
        }
    __threadfence_system();
  }
}

// ---- drop-in replacements (NCCL's signatures; SITE picks disjoint barrier indices) ----

template <int SITE, typename SHAPE = Shape<>>
inline ncclResult_t all_gather(const void* send, void* recv, size_t count, ncclDataType_t type, ncclComm_t comm, cudaStream_t stream) {
  constexpr Issuer ISSUER = SHAPE::issuer;
  constexpr int CTAS = SHAPE::ctas;
  constexpr size_t CHUNK_BYTES = SHAPE::chunk_bytes;
  constexpr Backend BACKEND = SHAPE::backend;
  note_backend<SITE, BACKEND>();
  const size_t bytes = count * type_bytes(type);
  size_t off = 0;
  if (!ensure(comm) || window_of(recv, bytes * (size_t)state().nranks, &off) < 0) {
    fell_back(SITE, "ncclAllGather", "receive buffer outside the symmetric windows or ranks beyond one LSA team");
    return ncclAllGather(send, recv, count, type, comm, stream);
  }
  const State& s = state();
  AllGatherConfig cfg = all_gather_auto_config(bytes, s.sms);
  cfg.ctas = std::min<int>(cfg.ctas, (int)kBarriersPerSite);
  ncclWindow_t win = s.allocations[(size_t)window_of(recv, bytes, &off)].win;
  if constexpr (rule_shape<ISSUER, CTAS, CHUNK_BYTES>()) {
    launch_all_gather(cfg, s.dc, win, off, bytes, send, bytes, first_barrier(SITE), stream);
  } else {
    const int ctas = tuned_ctas(CTAS, cfg.ctas);
    tuned_all_gather_kernel<ISSUER><<<ctas, kThreads, 0, stream>>>(s.dc, win, off, bytes, send, bytes,
                                                                   tuned_chunk<ISSUER>(CHUNK_BYTES, bytes, ctas, 16), first_barrier(SITE));
    BRAID_LAUNCHED();
  }
  return ncclSuccess;
}

template <int SITE, typename SHAPE = Shape<>>
inline ncclResult_t all_reduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  constexpr Issuer ISSUER = SHAPE::issuer;
  constexpr int CTAS = SHAPE::ctas;
  constexpr size_t CHUNK_BYTES = SHAPE::chunk_bytes;
  constexpr Backend BACKEND = SHAPE::backend;
  note_backend<SITE, BACKEND>();
  const size_t esize = type_bytes(type);
  size_t send_off = 0, recv_off = 0;
  if (!device_reduction(type, op) || !ensure(comm)) {
    fell_back(SITE, "ncclAllReduce", "a type/op without a device reduction, or another communicator");
    return ncclAllReduce(send, recv, count, type, op, comm, stream);
  }
  const int sw = window_of(send, count * esize, &send_off), rw = window_of(recv, count * esize, &recv_off);
  if (sw < 0 || rw < 0) {
    fell_back(SITE, "ncclAllReduce", "buffer outside the symmetric windows");
    return ncclAllReduce(send, recv, count, type, op, comm, stream);
  }
  const State& s = state();
  const bool fast = (type == ncclFloat32 || type == ncclBfloat16) && op == ncclSum && count % (size_t)s.nranks == 0;
  if (!fast) {  // any type and op, any count: rank r reduces part r and pushes it to every rank
    const size_t part = (count + (size_t)s.nranks - 1) / (size_t)s.nranks;
    const size_t begin = std::min(count, part * (size_t)s.rank), end = std::min(count, begin + part);
    const int ctas = tuned_ctas(CTAS, ctas_for(part * esize, 64 * 1024));  // from count and ranks: the same on every rank
    launch_reduce(type, ctas, stream, s.dc, s.allocations[(size_t)sw].win, send_off, recv, s.allocations[(size_t)rw].win, recv_off, begin,
                  end, (int)op, -1, true, first_barrier(SITE));
    BRAID_LAUNCHED();
    return ncclSuccess;
  }
  const size_t slice = count / (size_t)s.nranks;
  const int ctas = tuned_ctas(CTAS, ctas_for(slice * esize, 64 * 1024));
  const size_t chunk = rule_shape<ISSUER, CTAS, CHUNK_BYTES>() ? ((slice + (size_t)ctas - 1) / (size_t)ctas + 7) / 8 * 8
                                                                : tuned_chunk<ISSUER>(CHUNK_BYTES, slice * esize, ctas, 8 * esize) / esize;
  if (type == ncclFloat32)
    all_reduce_kernel<float, ISSUER><<<ctas, kThreads, 0, stream>>>(s.dc, s.allocations[(size_t)sw].win, send_off, s.allocations[(size_t)rw].win,
                                                           recv_off, static_cast<float*>(recv), slice, chunk, first_barrier(SITE));
  else
    all_reduce_kernel<__nv_bfloat16, ISSUER><<<ctas, kThreads, 0, stream>>>(s.dc, s.allocations[(size_t)sw].win, send_off,
                                                                   s.allocations[(size_t)rw].win, recv_off, static_cast<__nv_bfloat16*>(recv),
                                                                   slice, chunk, first_barrier(SITE));
  BRAID_LAUNCHED();
  return ncclSuccess;
}

template <int SITE, typename SHAPE = Shape<>>
inline ncclResult_t reduce_scatter(const void* send, void* recv, size_t recvcount, ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                                   cudaStream_t stream) {
  constexpr Issuer ISSUER = SHAPE::issuer;
  constexpr int CTAS = SHAPE::ctas;
  constexpr size_t CHUNK_BYTES = SHAPE::chunk_bytes;
  constexpr Backend BACKEND = SHAPE::backend;
  note_backend<SITE, BACKEND>();
  const size_t esize = type_bytes(type);
  size_t send_off = 0;
  int sw = -1;
  if (device_reduction(type, op) && ensure(comm)) sw = window_of(send, recvcount * esize * (size_t)state().nranks, &send_off);
  if (sw < 0) {
    fell_back(SITE, "ncclReduceScatter", "send buffer outside the symmetric windows, or a type/op without a device rule");
    return ncclReduceScatter(send, recv, recvcount, type, op, comm, stream);
  }
  const State& s = state();
  if (!((type == ncclFloat32 || type == ncclBfloat16) && op == ncclSum)) {
    const int ctas = tuned_ctas(CTAS, ctas_for(recvcount * esize, 64 * 1024));
    launch_reduce(type, ctas, stream, s.dc, s.allocations[(size_t)sw].win, send_off + (size_t)s.rank * recvcount * esize, recv, nullptr, 0, 0,
                  recvcount, (int)op, -1, false, first_barrier(SITE));
    BRAID_LAUNCHED();
    return ncclSuccess;
  }
  if constexpr (rule_shape<ISSUER, CTAS, CHUNK_BYTES>()) {
    const int ctas = ctas_for(recvcount * esize, 64 * 1024);
    const size_t chunk = ((recvcount + (size_t)ctas - 1) / (size_t)ctas + 7) / 8 * 8;
    if (type == ncclFloat32)
      reduce_scatter_kernel<float, Issuer::Cta><<<ctas, kThreads, 0, stream>>>(s.dc, s.allocations[(size_t)sw].win, send_off,
                                                                              static_cast<float*>(recv), recvcount, chunk, first_barrier(SITE));
    else
      reduce_scatter_kernel<__nv_bfloat16, Issuer::Cta><<<ctas, kThreads, 0, stream>>>(
          s.dc, s.allocations[(size_t)sw].win, send_off, static_cast<__nv_bfloat16*>(recv), recvcount, chunk, first_barrier(SITE));
  } else {
    const int ctas = tuned_ctas(CTAS, ctas_for(recvcount * esize, 64 * 1024));
    const size_t chunk = tuned_chunk<ISSUER>(CHUNK_BYTES, recvcount * esize, ctas, 8 * esize) / esize;
    if (type == ncclFloat32)
      tuned_reduce_scatter_kernel<float, ISSUER><<<ctas, kThreads, 0, stream>>>(s.dc, s.allocations[(size_t)sw].win, send_off,
                                                                               static_cast<float*>(recv), recvcount, chunk, first_barrier(SITE));
    else
      tuned_reduce_scatter_kernel<__nv_bfloat16, ISSUER><<<ctas, kThreads, 0, stream>>>(
          s.dc, s.allocations[(size_t)sw].win, send_off, static_cast<__nv_bfloat16*>(recv), recvcount, chunk, first_barrier(SITE));
  }
  BRAID_LAUNCHED();
  return ncclSuccess;
}

template <int SITE, typename SHAPE = Shape<>>
inline ncclResult_t broadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm, cudaStream_t stream) {
  constexpr Issuer ISSUER = SHAPE::issuer;
  constexpr int CTAS = SHAPE::ctas;
  constexpr size_t CHUNK_BYTES = SHAPE::chunk_bytes;
  constexpr Backend BACKEND = SHAPE::backend;
  note_backend<SITE, BACKEND>();
  const size_t bytes = count * type_bytes(type);
  size_t recv_off = 0;
  int rw = -1;
  if (ensure(comm)) rw = window_of(recv, bytes, &recv_off);
  if (rw < 0) {
    fell_back(SITE, "ncclBroadcast", "receive buffer outside the symmetric windows");
    return ncclBroadcast(send, recv, count, type, root, comm, stream);
  }
  const State& s = state();
  const int ctas = tuned_ctas(CTAS, ctas_for(bytes, 256 * 1024));
  const size_t chunk = rule_shape<ISSUER, CTAS, CHUNK_BYTES>() ? ((bytes + (size_t)ctas - 1) / (size_t)ctas + 15) / 16 * 16
                                                                : tuned_chunk<ISSUER>(CHUNK_BYTES, bytes, ctas, 16);
  broadcast_kernel<ISSUER><<<ctas, kThreads, 0, stream>>>(s.dc, s.allocations[(size_t)rw].win, recv_off, root, static_cast<const char*>(send),
                                                          bytes, chunk, first_barrier(SITE));
  BRAID_LAUNCHED();
  return ncclSuccess;
}
template <int SITE, typename SHAPE = Shape<>>
inline ncclResult_t bcast(void* buf, size_t count, ncclDataType_t type, int root, ncclComm_t comm, cudaStream_t stream) {
  return broadcast<SITE, SHAPE>(buf, buf, count, type, root, comm, stream);
}

template <int SITE, typename SHAPE = Shape<>>
inline ncclResult_t all_to_all(const void* send, void* recv, size_t count, ncclDataType_t type, ncclComm_t comm, cudaStream_t stream) {
  constexpr Issuer ISSUER = SHAPE::issuer;
  constexpr int CTAS = SHAPE::ctas;
  constexpr size_t CHUNK_BYTES = SHAPE::chunk_bytes;
  constexpr Backend BACKEND = SHAPE::backend;
  note_backend<SITE, BACKEND>();
  const size_t bytes = count * type_bytes(type);
  size_t off = 0;
  int rw = -1;
  if (ensure(comm)) rw = window_of(recv, bytes * (size_t)state().nranks, &off);
  if (rw < 0) {
    fell_back(SITE, "ncclAlltoAll", "receive buffer outside the symmetric windows");
    return ncclAlltoAll(send, recv, count, type, comm, stream);
  }
  const State& s = state();
  if constexpr (rule_shape<ISSUER, CTAS, CHUNK_BYTES>()) {
    const int ctas = ctas_for(bytes * (size_t)s.nranks, 256 * 1024);
    const size_t chunk = ((bytes * (size_t)s.nranks + (size_t)ctas - 1) / (size_t)ctas + 15) / 16 * 16;
    all_to_all_kernel<Issuer::Cta><<<ctas, kThreads, 0, stream>>>(s.dc, s.allocations[(size_t)rw].win, off, send, bytes, chunk, first_barrier(SITE));
  } else {
    const int ctas = tuned_ctas(CTAS, ctas_for(bytes * (size_t)s.nranks, 256 * 1024));
    const size_t chunk = tuned_chunk<ISSUER>(CHUNK_BYTES, bytes * (size_t)s.nranks, ctas, 16);
    tuned_all_to_all_kernel<ISSUER><<<ctas, kThreads, 0, stream>>>(s.dc, s.allocations[(size_t)rw].win, off, send, bytes, chunk, first_barrier(SITE));
  }
  BRAID_LAUNCHED();
  return ncclSuccess;
}

template <int SITE, typename SHAPE = Shape<>>
inline ncclResult_t reduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  note_backend<SITE, SHAPE::backend>();
  const size_t esize = type_bytes(type);
  size_t send_off = 0;
  int sw = -1;
  if (device_reduction(type, op) && ensure(comm)) sw = window_of(send, count * esize, &send_off);
  if (sw < 0) {
    fell_back(SITE, "ncclReduce", "send buffer outside the symmetric windows, or a type/op without a device reduction");
    return ncclReduce(send, recv, count, type, op, root, comm, stream);
  }
  const State& s = state();
  const int ctas = tuned_ctas(SHAPE::ctas, ctas_for(count * esize, 64 * 1024));
  launch_reduce(type, ctas, stream, s.dc, s.allocations[(size_t)sw].win, send_off, recv, nullptr, 0, 0, count, (int)op, root, false,
                first_barrier(SITE));
  BRAID_LAUNCHED();
  return ncclSuccess;
}

template <int SITE, typename SHAPE = Shape<>>
inline ncclResult_t gather(const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm, cudaStream_t stream) {
  note_backend<SITE, SHAPE::backend>();
  const size_t bytes = count * type_bytes(type);
  size_t send_off = 0;
  int sw = -1;
  if (ensure(comm)) sw = window_of(send, bytes, &send_off);
  if (sw < 0) {
    fell_back(SITE, "ncclGather", "send buffer outside the symmetric windows");
    return ncclGather(send, recv, count, type, root, comm, stream);
  }
  const State& s = state();
  const int ctas = tuned_ctas(SHAPE::ctas, ctas_for(bytes * (size_t)s.nranks, 256 * 1024));
  const size_t chunk = ((bytes + (size_t)ctas - 1) / (size_t)ctas + 15) / 16 * 16;
  gather_kernel<<<ctas, kThreads, 0, stream>>>(s.dc, s.allocations[(size_t)sw].win, send_off, root, static_cast<char*>(recv), bytes, chunk,
                                               first_barrier(SITE));
  BRAID_LAUNCHED();
  return ncclSuccess;
}

template <int SITE, typename SHAPE = Shape<>>
inline ncclResult_t scatter(const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm, cudaStream_t stream) {
  note_backend<SITE, SHAPE::backend>();
  const size_t bytes = count * type_bytes(type);
  size_t recv_off = 0;
  int rw = -1;
  if (ensure(comm)) rw = window_of(recv, bytes, &recv_off);
  if (rw < 0) {
    fell_back(SITE, "ncclScatter", "receive buffer outside the symmetric windows");
    return ncclScatter(send, recv, count, type, root, comm, stream);
  }
  const State& s = state();
  const int ctas = tuned_ctas(SHAPE::ctas, ctas_for(bytes * (size_t)s.nranks, 256 * 1024));
  const size_t chunk = ((bytes + (size_t)ctas - 1) / (size_t)ctas + 15) / 16 * 16;
  scatter_kernel<<<ctas, kThreads, 0, stream>>>(s.dc, s.allocations[(size_t)rw].win, recv_off, root, static_cast<const char*>(send), bytes,
                                                chunk, first_barrier(SITE));
  BRAID_LAUNCHED();
  return ncclSuccess;
}

// The same replacements called with one Site type (annotated programs).
template <typename S>
inline ncclResult_t all_gather(const void* send, void* recv, size_t count, ncclDataType_t type, ncclComm_t comm, cudaStream_t stream) {
  return all_gather<S::site, typename S::shape>(send, recv, count, type, comm, stream);
}
template <typename S>
inline ncclResult_t all_reduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  return all_reduce<S::site, typename S::shape>(send, recv, count, type, op, comm, stream);
}
template <typename S>
inline ncclResult_t reduce_scatter(const void* send, void* recv, size_t recvcount, ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                                   cudaStream_t stream) {
  return reduce_scatter<S::site, typename S::shape>(send, recv, recvcount, type, op, comm, stream);
}
template <typename S>
inline ncclResult_t broadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm, cudaStream_t stream) {
  return broadcast<S::site, typename S::shape>(send, recv, count, type, root, comm, stream);
}
template <typename S>
inline ncclResult_t bcast(void* buf, size_t count, ncclDataType_t type, int root, ncclComm_t comm, cudaStream_t stream) {
  return broadcast<S::site, typename S::shape>(buf, buf, count, type, root, comm, stream);
}
template <typename S>
inline ncclResult_t all_to_all(const void* send, void* recv, size_t count, ncclDataType_t type, ncclComm_t comm, cudaStream_t stream) {
  return all_to_all<S::site, typename S::shape>(send, recv, count, type, comm, stream);
}
template <typename S>
inline ncclResult_t reduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  return reduce<S::site, typename S::shape>(send, recv, count, type, op, root, comm, stream);
}
template <typename S>
inline ncclResult_t gather(const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm, cudaStream_t stream) {
  return gather<S::site, typename S::shape>(send, recv, count, type, root, comm, stream);
}
template <typename S>
inline ncclResult_t scatter(const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm, cudaStream_t stream) {
  return scatter<S::site, typename S::shape>(send, recv, count, type, root, comm, stream);
}

inline ncclResult_t host_p2p(const std::vector<PendingP2p>& ops) {
  ncclResult_t r = ncclGroupStart();
  for (const PendingP2p& p : ops) {
    if (r != ncclSuccess) break;
    r = p.is_send ? ncclSend(p.buf, p.count, p.type, p.peer, p.comm, p.stream) : ncclRecv(p.buf, p.count, p.type, p.peer, p.comm, p.stream);
  }
  const ncclResult_t e = ncclGroupEnd();
  return r != ncclSuccess ? r : e;
}

// Runs the pending sends and receives of a group as one pairwise p2p_kernel. Host NCCL only for
// another communicator or ranks beyond one LSA team (the same answer on every rank); a
// receive outside the windows or a group the plan cannot hold stops the program with a message
// (its peer would wait for a posting that never comes).
template <Issuer ISSUER = Issuer::Cta, int CTAS = 0, size_t CHUNK_BYTES = 0>
inline ncclResult_t flush_p2p(int site) {
  State& s = state();
  std::vector<PendingP2p> ops;
  ops.swap(s.pending);
  if (ops.empty()) return ncclSuccess;  // nothing to launch: no other rank waits for this one
  // Not bound at creation: the rules converted this group only where every rank reaches it, so
  // the first one binds here (a collective step) on every rank.
  if (!ensure(ops.front().comm)) {
    fell_back(site, "ncclSend/ncclRecv", "another communicator, or ranks beyond one LSA team");
    return host_p2p(ops);
  }
  std::vector<braid::convert_p2p::P2pRequest> requests;
  for (const PendingP2p& p : ops) {
    if (p.stream != ops.front().stream || p.comm != ops.front().comm) fatal(site, "ncclSend/ncclRecv group", "members on several streams or communicators");
    requests.push_back(braid::convert_p2p::P2pRequest{p.is_send, p.peer, p.count * type_bytes(p.type)});
  }
  std::vector<braid::convert_p2p::P2pPlanned> planned;
  if (const char* why = s.sequencer.plan(requests, planned); why[0] != '\0') fatal(site, "ncclSend/ncclRecv group", why);
  std::vector<P2pOp> plan(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    const braid::convert_p2p::P2pPlanned& q = planned[i];
    P2pOp& op = plan[i];
    op = P2pOp{ops[i].buf, 0, q.bytes, q.seq, 0, q.peer, q.slot, q.is_send ? 1 : 0, 0u, 0u};
    if (!q.is_send) {
      size_t off = 0;
      const int w = window_of(ops[i].buf, q.bytes, &off);
      if (w < 0 || w >= kMaxWindows) fatal(site, "ncclRecv", "its buffer is outside the symmetric windows");
      op.window = w;
      op.offset = off;
    }
  }
  P2pOp* dev = s.dev_plans + (size_t)site * kMaxP2pOps;
  BRAID_CUDA(cudaMemcpyAsync(dev, plan.data(), sizeof(P2pOp) * plan.size(), cudaMemcpyHostToDevice, ops.front().stream));
  const int ctas = braid::convert_p2p::p2p_ctas(CTAS, s.sms);  // never a function of the volume
  const size_t chunk = CHUNK_BYTES > 0 ? std::max<size_t>(16, CHUNK_BYTES / 16 * 16) : (size_t)64 * 1024;
  p2p_kernel<ISSUER><<<ctas, kThreads, 0, ops.front().stream>>>(dev, (int)plan.size(), s.mailbox_win, s.dev_windows, s.rank, chunk);
  BRAID_LAUNCHED();
  return ncclSuccess;
}

// No NCCL group is opened: window registration and device-communicator creation (first use)
// must not run inside one, and every member of a converted group is a device launch already
// (a run-time fallback runs as a plain host call, in the same order on every rank).
inline ncclResult_t group_start() {
  ++state().group_depth;
  return ncclSuccess;
}
template <int SITE, typename SHAPE = Shape<>>
inline ncclResult_t group_end() {
  constexpr Issuer ISSUER = SHAPE::issuer;
  constexpr int CTAS = SHAPE::ctas;
  constexpr size_t CHUNK_BYTES = SHAPE::chunk_bytes;
  constexpr Backend BACKEND = SHAPE::backend;
  note_backend<SITE, BACKEND>();
  State& s = state();
  if (s.group_depth > 0 && --s.group_depth == 0) return flush_p2p<ISSUER, CTAS, CHUNK_BYTES>(SITE);
  return ncclSuccess;
}
template <typename S>
inline ncclResult_t group_end() {
  return group_end<S::site, typename S::shape>();
}
template <int SITE>
inline ncclResult_t send(const void* buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream) {
  state().pending.push_back(PendingP2p{true, const_cast<void*>(buf), count, type, peer, comm, stream});
  return state().group_depth == 0 ? flush_p2p(SITE) : ncclSuccess;
}
template <int SITE>
inline ncclResult_t recv(void* buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream) {
  state().pending.push_back(PendingP2p{false, buf, count, type, peer, comm, stream});
  return state().group_depth == 0 ? flush_p2p(SITE) : ncclSuccess;
}

}  // namespace braid_converted
// ==== end of braid convert's replacements ====


struct Communicator {
  ncclComm_t comm;
  cudaStream_t stream;
  int rank = 0, size = 1;
  void all_reduce(float* buf, size_t n) { braid_converted::all_reduce<0>(buf, buf, n, ncclFloat, ncclSum, comm, stream); }
  void all_gather(const float* shard, float* full, size_t n) { braid_converted::all_gather<1>(shard, full, n, ncclFloat, comm, stream); }
  void sync() { cudaStreamSynchronize(stream); }
};

__global__ void init(float* x, size_t n, float v) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) x[i] = v;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Communicator c;
  MPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &c.size);
  cudaSetDevice(c.rank);
  ncclUniqueId id;
  if (c.rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  braid_converted::comm_init_rank(&c.comm, c.size, id, c.rank);
  cudaStreamCreate(&c.stream);
  const size_t n = 1 << 20;
  float *grad, *shard, *full;
  braid_converted::sym_malloc(&grad, n * sizeof(float));
  cudaMalloc(&shard, n / 8 * sizeof(float));
  braid_converted::sym_malloc(&full, n / 8 * c.size * sizeof(float));
  init<<<128, 256, 0, c.stream>>>(grad, n, 1.0f + c.rank);
  init<<<128, 256, 0, c.stream>>>(shard, n / 8, (float)c.rank);
  c.all_reduce(grad, n);
  c.all_gather(shard, full, n / 8);
  c.sync();
  float h[2];
  cudaMemcpy(&h[0], grad, sizeof(float), cudaMemcpyDeviceToHost);
  cudaMemcpy(&h[1], full + n / 8 * (c.size - 1), sizeof(float), cudaMemcpyDeviceToHost);
  std::printf("rank %d %f %f\n", c.rank, h[0], h[1]);
  braid_converted::sym_free(grad); braid_converted::sym_free(shard); braid_converted::sym_free(full);
  braid_converted::comm_destroy(c.comm);
  MPI_Finalize();
  return 0;
}
