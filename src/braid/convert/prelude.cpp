// The text that `braid convert` inserts after a program's includes: stage A infrastructure
// (symmetric allocation, window registration, one device communicator, ordered teardown) and the
// stage B replacements, drop-in functions with NCCL's signatures built from braid's primitives
// (device/include/braid/comm.cuh). A call that cannot run on the device at run time (a buffer
// outside every window, ranks beyond one LSA team, an uneven all-reduce) goes to the host NCCL
// call it replaced and says so once on stderr, so a conversion is never wrong, only slower.
#include "braid/convert/transform.hpp"

#include <fmt/format.h>

namespace braid::convert {

std::string converted_prelude(int call_sites, bool harness) {
  static const char* const kBody = R"PRELUDE(
// ==== braid convert: device-initiated replacements (stage A: symmetric memory, windows, device
// communicator, teardown; stage B: collectives on braid's LSA primitives). Generated. ====
#include <nccl_device.h>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <set>
#include <vector>
#include "braid/comm.cuh"

namespace braid_converted {
using namespace braid::dev;

constexpr uint32_t kBarriersPerSite = 132;  // LsaBarrier indices per call site: >= CTAs of a launch
constexpr int kThreads = 512;
constexpr int kMaxP2p = 16;                  // sends (and receives) per peer in one group
constexpr int kMaxP2pOps = 32;               // sends (and receives) in one group
constexpr int kMaxWindows = 32;

struct Allocation {
  char* base = nullptr;
  size_t bytes = 0;
  ncclWindow_t win = nullptr;
  bool external = false;  // registered by someone else (the harness): never deregistered here
};

struct MailEntry {  // where a receiver wants the k-th message from a peer
  unsigned long long window = 0, offset = 0, bytes = 0, valid = 0;
};

struct SendOp { const void* src; size_t bytes; int peer; int seq; };
struct RecvOp { int window; size_t offset; size_t bytes; int peer; int seq; };
struct P2pPlan {
  ncclWindow_t windows[kMaxWindows];
  SendOp sends[kMaxP2pOps];
  RecvOp recvs[kMaxP2pOps];
  int nsends = 0, nrecvs = 0;
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
  ncclDevComm dc{};
  bool dc_made = false;
  int rank = 0, nranks = 1, sms = 0;
  char* mailbox = nullptr;
  ncclWindow_t mailbox_win = nullptr;
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

// Stage A: symmetric allocation (the window is registered once the communicator is known).
template <typename T>
inline cudaError_t sym_malloc(T** ptr, size_t bytes) {
  void* p = nullptr;
  if (ncclMemAlloc(&p, round_window(bytes)) != ncclSuccess) return cudaErrorMemoryAllocation;
  *ptr = static_cast<T*>(p);
  state().allocations.push_back(Allocation{static_cast<char*>(p), round_window(bytes), nullptr, false});
  return cudaSuccess;
}
inline ncclResult_t sym_nccl_alloc(void** ptr, size_t bytes) {
  return sym_malloc(reinterpret_cast<char**>(ptr), bytes) == cudaSuccess ? ncclSuccess : ncclSystemError;
}
inline ncclResult_t sym_release(void* ptr) {
  State& s = state();
  for (size_t i = 0; i < s.allocations.size(); ++i) {
    if (s.allocations[i].base != ptr) continue;
    if (s.allocations[i].win != nullptr && s.comm != nullptr) ncclCommWindowDeregister(s.comm, s.allocations[i].win);
    s.allocations.erase(s.allocations.begin() + (long)i);
    return ncclMemFree(ptr);
  }
  return ncclMemFree(ptr);
}
inline cudaError_t sym_free(void* ptr) { return sym_release(ptr) == ncclSuccess ? cudaSuccess : cudaErrorInvalidValue; }
inline ncclResult_t sym_nccl_free(void* ptr) { return sym_release(ptr); }

// First use on a communicator: windows for every symmetric allocation (in allocation order, a
// collective call), the p2p mailbox, and one device communicator with barriers for every site.
inline bool ensure(ncclComm_t comm) {
  State& s = state();
  if (s.comm != nullptr && s.comm != comm) return false;  // one communicator is converted
  if (s.comm == nullptr) {
    s.comm = comm;
    ncclCommUserRank(comm, &s.rank);
    ncclCommCount(comm, &s.nranks);
    int dev = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&s.sms, cudaDevAttrMultiProcessorCount, dev);
    const size_t mail_bytes = round_window(sizeof(MailEntry) * kMaxLsaPeers * kMaxP2p * (size_t)kCallSites);
    BRAID_NCCL(ncclMemAlloc(reinterpret_cast<void**>(&s.mailbox), mail_bytes));
    BRAID_CUDA(cudaMemset(s.mailbox, 0, mail_bytes));
    BRAID_NCCL(ncclCommWindowRegister(comm, s.mailbox, mail_bytes, &s.mailbox_win, NCCL_WIN_COLL_SYMMETRIC));
  }
  for (Allocation& a : s.allocations)
    if (a.win == nullptr) BRAID_NCCL(ncclCommWindowRegister(comm, a.base, a.bytes, &a.win, NCCL_WIN_COLL_SYMMETRIC));
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
  const size_t want = (bytes + min_chunk - 1) / min_chunk;
  const int cap = std::min<int>(state().sms > 0 ? state().sms : 32, (int)kBarriersPerSite);
  return (int)std::max<size_t>(1, std::min<size_t>(want, (size_t)cap));
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
  s.mailbox = nullptr;
  s.mailbox_win = nullptr;
  s.comm = nullptr;
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

// Broadcast: every rank pulls the root's send window into its own receive buffer.
template <Issuer I = Issuer::Cta>
__global__ void __launch_bounds__(1024) broadcast_kernel(ncclDevComm dc, ncclWindow_t send_win, size_t send_off, int root, char* recv,
                                                         size_t bytes, size_t chunk_bytes, uint32_t first_index) {
  using G = IssuerGroup<I>;
  LsaBarrier<Issuer::Cta> bar(dc, first_index);
  bar.sync(cuda::memory_order_acq_rel);
  const char* src = static_cast<const char*>(ncclGetLsaPointer(send_win, send_off, root));
  if (src != recv) {
    const size_t n = chunk_count(bytes, chunk_bytes);
    for (size_t c = G::id(); c < n; c += G::count()) {
      const ChunkRange r = chunk_at(c, bytes, chunk_bytes);
      copy_range<I>(recv + r.begin, src + r.begin, r.end - r.begin);
    }
  }
  if constexpr (I != Issuer::Cta) __syncthreads();
  bar.sync(cuda::memory_order_acq_rel);
}

// Grouped send/recv: receivers publish where each message goes (window, offset) in their
// mailbox; after a barrier, senders read the peer's mailbox and push into the peer's window.
template <Issuer I = Issuer::Cta>
__global__ void __launch_bounds__(1024) p2p_kernel(ncclDevComm dc, ncclWindow_t mail_win, size_t mail_off, P2pPlan plan, size_t chunk_bytes,
                                                   uint32_t first_index) {
  using G = IssuerGroup<I>;
  LsaBarrier<Issuer::Cta> bar(dc, first_index);
  MailEntry* box = static_cast<MailEntry*>(ncclGetLsaPointer(mail_win, mail_off, dc.lsaRank));
  // Every CTA writes the same entries: a peer's CTA k reads after meeting our CTA k's barrier.
  for (int i = threadIdx.x; i < plan.nrecvs; i += blockDim.x) {
    const RecvOp& r = plan.recvs[i];
    box[r.peer * kMaxP2p + r.seq] = MailEntry{(unsigned long long)r.window, r.offset, r.bytes, 1ull};
  }
  __syncthreads();
  bar.sync(cuda::memory_order_acq_rel);
  for (int i = 0; i < plan.nsends; ++i) {
    const SendOp& op = plan.sends[i];
    const MailEntry* peer_box = static_cast<const MailEntry*>(ncclGetLsaPointer(mail_win, mail_off, op.peer));
    const MailEntry e = peer_box[dc.lsaRank * kMaxP2p + op.seq];
    char* dst = static_cast<char*>(ncclGetLsaPointer(plan.windows[e.window], e.offset, op.peer));
    const size_t bytes = op.bytes < e.bytes ? op.bytes : e.bytes;
    const size_t n = chunk_count(bytes, chunk_bytes);
    for (size_t c = G::id(); c < n; c += G::count()) {
      const ChunkRange r = chunk_at(c, bytes, chunk_bytes);
      copy_range<I>(dst + r.begin, static_cast<const char*>(op.src) + r.begin, r.end - r.begin);
    }
  }
  if constexpr (I != Issuer::Cta) __syncthreads();
  bar.sync(cuda::memory_order_acq_rel);
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
  const bool ok_type = (type == ncclFloat32 || type == ncclBfloat16) && op == ncclSum;
  if (!ok_type || !ensure(comm) || count % (size_t)state().nranks != 0) {
    fell_back(SITE, "ncclAllReduce", "element count not a multiple of the ranks, or a type/op without a device rule");
    return ncclAllReduce(send, recv, count, type, op, comm, stream);
  }
  const int sw = window_of(send, count * esize, &send_off), rw = window_of(recv, count * esize, &recv_off);
  if (sw < 0 || rw < 0) {
    fell_back(SITE, "ncclAllReduce", "buffer outside the symmetric windows");
    return ncclAllReduce(send, recv, count, type, op, comm, stream);
  }
  const State& s = state();
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
  const bool ok_type = (type == ncclFloat32 || type == ncclBfloat16) && op == ncclSum;
  int sw = -1;
  if (ok_type && ensure(comm)) sw = window_of(send, recvcount * esize * (size_t)state().nranks, &send_off);
  if (sw < 0) {
    fell_back(SITE, "ncclReduceScatter", "send buffer outside the symmetric windows, or a type/op without a device rule");
    return ncclReduceScatter(send, recv, recvcount, type, op, comm, stream);
  }
  const State& s = state();
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
  size_t send_off = 0;
  int sw = -1;
  if (ensure(comm)) sw = window_of(send, bytes, &send_off);
  if (sw < 0) {
    fell_back(SITE, "ncclBroadcast", "send buffer outside the symmetric windows");
    return ncclBroadcast(send, recv, count, type, root, comm, stream);
  }
  const State& s = state();
  const int ctas = tuned_ctas(CTAS, ctas_for(bytes, 256 * 1024));
  const size_t chunk = rule_shape<ISSUER, CTAS, CHUNK_BYTES>() ? ((bytes + (size_t)ctas - 1) / (size_t)ctas + 15) / 16 * 16
                                                                : tuned_chunk<ISSUER>(CHUNK_BYTES, bytes, ctas, 16);
  broadcast_kernel<ISSUER><<<ctas, kThreads, 0, stream>>>(s.dc, s.allocations[(size_t)sw].win, send_off, root, static_cast<char*>(recv), bytes, chunk,
                                                  first_barrier(SITE));
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

inline ncclResult_t host_p2p(const std::vector<PendingP2p>& ops) {
  ncclResult_t r = ncclGroupStart();
  for (const PendingP2p& p : ops) {
    if (r != ncclSuccess) break;
    r = p.is_send ? ncclSend(p.buf, p.count, p.type, p.peer, p.comm, p.stream) : ncclRecv(p.buf, p.count, p.type, p.peer, p.comm, p.stream);
  }
  const ncclResult_t e = ncclGroupEnd();
  return r != ncclSuccess ? r : e;
}

// Runs the pending sends and receives of a group as one p2p_kernel (or host NCCL when a buffer
// is outside the windows, streams differ, or the group is larger than the plan holds).
template <Issuer ISSUER = Issuer::Cta, int CTAS = 0, size_t CHUNK_BYTES = 0>
inline ncclResult_t flush_p2p(int site) {
  State& s = state();
  std::vector<PendingP2p> ops;
  ops.swap(s.pending);
  if (ops.empty()) return ncclSuccess;
  bool device = ensure(ops.front().comm);
  P2pPlan plan{};
  int seq_send[kMaxLsaPeers] = {}, seq_recv[kMaxLsaPeers] = {};
  for (size_t i = 0; i < s.allocations.size() && i < (size_t)kMaxWindows; ++i) plan.windows[i] = s.allocations[i].win;
  for (const PendingP2p& p : ops) {
    if (!device) break;
    const size_t bytes = p.count * type_bytes(p.type);
    if (p.stream != ops.front().stream || p.comm != ops.front().comm || p.peer < 0 || p.peer >= kMaxLsaPeers) device = false;
    else if (p.is_send) {
      if (plan.nsends == kMaxP2pOps || seq_send[p.peer] == kMaxP2p) device = false;
      else plan.sends[plan.nsends++] = SendOp{p.buf, bytes, p.peer, seq_send[p.peer]++};
    } else {
      size_t off = 0;
      const int w = window_of(p.buf, bytes, &off);
      if (w < 0 || w >= kMaxWindows || plan.nrecvs == kMaxP2pOps || seq_recv[p.peer] == kMaxP2p) device = false;
      else plan.recvs[plan.nrecvs++] = RecvOp{w, off, bytes, p.peer, seq_recv[p.peer]++};
    }
  }
  if (!device) {
    fell_back(site, "ncclSend/ncclRecv group", "buffer outside the windows, several streams, or more messages than a plan holds");
    return host_p2p(ops);
  }
  size_t total = 0;
  for (int i = 0; i < plan.nsends; ++i) total += plan.sends[i].bytes;
  const int ctas = tuned_ctas(CTAS, ctas_for(total, 256 * 1024));
  const size_t mail_off = sizeof(MailEntry) * kMaxLsaPeers * kMaxP2p * (size_t)site;
  const size_t chunk = CHUNK_BYTES > 0 ? std::max<size_t>(16, CHUNK_BYTES / 16 * 16) : (size_t)64 * 1024;
  p2p_kernel<ISSUER><<<ctas, kThreads, 0, ops.front().stream>>>(s.dc, s.mailbox_win, mail_off, plan, chunk, first_barrier(site));
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
)PRELUDE";
  // Only programs built on the harness know Context and Buffer.
  static const char* const kHarness = R"HARNESS(
namespace braid_converted {
// The harness owns windows and the communicator: adopt its symmetric buffers (every run()), and
// destroy our device communicator in teardown() before the harness frees them.
inline void adopt_harness(Context& c) {
  State& s = state();
  s.allocations.erase(std::remove_if(s.allocations.begin(), s.allocations.end(), [](const Allocation& a) { return a.external; }),
                      s.allocations.end());
  for (Buffer& b : c.buffers())
    if (b.win != nullptr) s.allocations.push_back(Allocation{static_cast<char*>(b.ptr), round_window(b.bytes), b.win, true});
}
inline void release_harness(Context&) {
  State& s = state();
  if (s.dc_made) ncclDevCommDestroy(s.comm, &s.dc);
  if (s.mailbox_win != nullptr) ncclCommWindowDeregister(s.comm, s.mailbox_win);
  if (s.mailbox != nullptr) ncclMemFree(s.mailbox);
  s = State{};
}

}  // namespace braid_converted
)HARNESS";
  return fmt::format("\nnamespace braid_converted {{ constexpr int kCallSites = {}; }}\n", call_sites < 1 ? 1 : call_sites) + kBody +
         (harness ? kHarness : "");
}

}  // namespace braid::convert
