//! Part of braid convert's prelude: runtime state, symmetric allocations, windows and the binding
//! to the converted communicator (stage A). prelude.cuh includes it inside namespace
//! braid_converted, after the parts before it: a fragment, not a header of its own. The embedding
//! (cmake/embed_templates.cmake) writes it out in place and drops these //! lines.
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
  // Made non-blocking (ncclConfig_t.blocking = 0, or split from such a one): never bound, so its
  // converted calls run as host NCCL on every rank. NCCL 2.28 refused window registration on one
  // ("invalid argument", 2 x H100, also with every earlier call waited out).
  std::set<ncclComm_t> nonblocking;
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

// The differential gate's snapshot shim (device/snapshot/snapshot_shim.cpp), when preloaded,
// numbers the program's device allocations: -1 says the next allocation is the prelude's own state
// (not numbered), a size says what the program asked for (symmetric allocations are rounded up).
// Weak: without the shim it is null and nothing is called.
extern "C" __attribute__((weak)) void braid_snapshot_next(long long requested_bytes);
inline void snapshot_next(long long requested_bytes) {
  if (braid_snapshot_next != nullptr) braid_snapshot_next(requested_bytes);
}

// Stage A: symmetric allocation (the window is registered once the communicator is known).
template <typename T>
inline cudaError_t sym_malloc(T** ptr, size_t bytes) {
  void* p = nullptr;
  snapshot_next((long long)bytes);
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
// The rules never make a cudaMallocAsync site symmetric (each allocation would be a collective window
// registration, per step, with sizes not proven equal on every rank: transform_plan.cpp); a
// symmetric pointer reaches here when the LLM loop moved its allocation to sym_malloc, and is
// released only once the work queued on the stream is done (ncclMemFree is not stream-ordered).
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
  if (s.dev_windows != nullptr && index < (size_t)kMaxWindows) {
    // Waited for: a pageable cudaMemcpy may return before its DMA lands, and the program's
    // non-blocking streams would not wait for it. Only this copy is waited for, never the
    // program's kernels (one may be waiting on a peer).
    BRAID_CUDA(cudaMemcpyAsync(s.dev_windows + index, &a.win, sizeof(ncclWindow_t), cudaMemcpyHostToDevice, cudaStreamPerThread));
    BRAID_CUDA(cudaStreamSynchronize(cudaStreamPerThread));
  }
}

// NCCL_COMM_BLOCKING=0 makes every communicator created without a config non-blocking.
inline bool env_nonblocking() {
  const char* env = std::getenv("NCCL_COMM_BLOCKING");
  return env != nullptr && std::strcmp(env, "0") == 0;
}

// Binding to a communicator (a collective step: at its creation, or at the first converted
// collective): windows for every symmetric allocation so far (allocation order), the p2p
// mailbox, and one device communicator with barriers for every site. A communicator whose
// creation braid did not see may be non-blocking through the environment: it is not bound.
inline bool ensure(ncclComm_t comm) {
  State& s = state();
  if (s.comm == nullptr && !s.bound_at_creation && env_nonblocking()) s.nonblocking.insert(comm);
  if (s.nonblocking.count(comm)) return false;
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
    snapshot_next(-1);
    BRAID_NCCL(ncclMemAlloc(reinterpret_cast<void**>(&s.mailbox), mail_bytes));
    BRAID_CUDA(cudaMemset(s.mailbox, 0, mail_bytes));
    BRAID_NCCL(ncclCommWindowRegister(comm, s.mailbox, mail_bytes, &s.mailbox_win, NCCL_WIN_COLL_SYMMETRIC));
    snapshot_next(-1);
    BRAID_CUDA(cudaMalloc(reinterpret_cast<void**>(&s.dev_windows), sizeof(ncclWindow_t) * kMaxWindows));
    BRAID_CUDA(cudaMemset(s.dev_windows, 0, sizeof(ncclWindow_t) * kMaxWindows));
    snapshot_next(-1);
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
