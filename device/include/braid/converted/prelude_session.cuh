//! Part of braid convert's prelude: runtime state, symmetric allocations, windows and the binding
//! to the converted communicator (stage A). prelude.cuh includes it inside namespace
//! braid_converted, after the parts before it: a fragment, not a header of its own. The embedding
//! (cmake/embed_templates.cmake) writes it out in place and drops these //! lines.
constexpr uint32_t kBarriersPerSite = 132;  // LsaBarrier indices per call site: >= CTAs of a launch
constexpr int kThreads = 512;
constexpr int kMaxWindows = 1024;
// p2p plans made with the binding per call site: its first streams' (plan_memory). A plan allocated
// later, while a p2p kernel spins on another stream, could hold back the next launch (CUDA lets a
// device allocation serialise the commands issued around it).
constexpr int kPlanStreams = 2;

// An allocation's window on one bound communicator: a process converts every communicator its
// converted calls use (data- and tensor-parallel ones side by side), so one buffer may be a window
// on several, registered with each in the same order on every rank of that communicator.
struct Window {
  ncclComm_t comm = nullptr;  // null: the harness's window (it runs one communicator)
  ncclWindow_t win = nullptr;
  int slot = -1;  // its entry in that binding's window table for the p2p kernel (set when published)
};
struct Allocation {
  char* base = nullptr;
  size_t bytes = 0;
  std::vector<Window> windows;  // one per communicator it is registered with
  bool external = false;        // registered by someone else (the harness): never deregistered here
  int device = 0;               // where it was made: with one thread driving every rank, the rank it belongs to
  bool agreed = false;          // its size was made the largest of the ranks' (sym_malloc_agreed) ...
  std::vector<ncclComm_t> agreed_over;  // ... over these communicators' ranks
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

// A communicator the runtime is bound to: its rank, its GPU and what the device code needs. One per
// communicator the process's converted calls use, or, when one thread drives every rank of the
// process (kOneThreadDrivesRanks: ncclCommInitAll, a group of ncclCommInitRank), one per GPU.
struct Binding {
  ncclComm_t comm = nullptr;
  int device = 0, rank = 0, nranks = 1;
  ncclDevComm dc{};
  bool dc_made = false;
  char* mailbox = nullptr;
  ncclWindow_t mailbox_win = nullptr;
  ncclWindow_t* dev_windows = nullptr;  // window handles by slot, for the p2p kernel
  P2pOp* dev_plans = nullptr;  // kPlanStreams plans per call site, for its first streams (plan_memory)
  std::map<std::pair<int, cudaStream_t>, P2pOp*> stream_plans;
  braid::convert_p2p::P2pSequencer sequencer;
  // Slots of the window table in use. A receiver posts its window's slot and the sender looks it up
  // in its own table, so the same window must have the same slot on every rank: each registration
  // takes the lowest free slot, and every rank registers and releases in the same order. (Not the
  // allocation's index: with one thread driving every rank, each GPU's windows sit at different
  // indices of the process's allocations, and indices move when an allocation is freed.)
  std::vector<bool> slot_used = std::vector<bool>(kMaxWindows, false);
};

struct State {
  std::vector<Allocation> allocations;  // allocation order: the same on every rank
  std::list<Binding> bound;             // a list: NCCL writes windows and device communicators into them at a group's end
  // A binding was made at a creation, which every rank passes: from then on each symmetric
  // allocation (made by every rank, in the same order) registers with every binding at once.
  bool bound_at_creation = false;
  int sms = 0;                          // of the bound GPUs (launch shapes are the same on every rank)
  int group_depth = 0;
  bool nccl_group_open = false;  // kOneThreadDrivesRanks: the program's group is open in NCCL too
  std::vector<PendingP2p> pending;
  std::vector<ncclComm_t> created_in_group;  // kOneThreadDrivesRanks: bound when the group that creates them ends
  int creation_group_depth = 0;  // one rank per process: inside the program's group of creations (creation_group_start)
  std::map<int, bool> site_on_device;        // kOneThreadDrivesRanks: each site's choice within the open group
  std::set<int> warned;
  // Made non-blocking (ncclConfig_t.blocking = 0, or split from such a one): never bound, so its
  // converted calls run as host NCCL on every rank. NCCL 2.28 refused window registration on one
  // ("invalid argument", 2 x H100, also with every earlier call waited out).
  std::set<ncclComm_t> nonblocking;
};
// A rank per thread (kRankPerThread: a std::thread, pthread or OpenMP thread per GPU, each making
// its own communicator): each thread is a rank, and its state is its own, as a process's is. The
// states live as long as the process (a thread may end before the main thread frees what it
// allocated), listed in a registry whose lock guards what crosses threads: allocations, releases
// of another thread's buffer, buffers the main thread made for a GPU. The lock is never held across
// a collective NCCL call (a registration waits for every rank's thread).
struct Registry {
  std::mutex mu;
  std::list<State> states;
};
inline Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: threads may outlive main's statics
  return *r;
}
inline State& state() {
  if constexpr (kRankPerThread) {
    thread_local State* mine = nullptr;
    if (mine == nullptr) {
      std::lock_guard<std::mutex> lock(registry().mu);
      mine = &registry().states.emplace_back();
    }
    return *mine;
  }
  static State s;
  return s;
}
// Holds the registry's lock. The thread's own state is made first: state() takes the lock to make it
// (the main thread's first call may be a release of its workers' buffers, under this lock).
struct CrossThreads {
  std::unique_lock<std::mutex> lock;
  CrossThreads() {
    if constexpr (kRankPerThread) {
      state();
      lock = std::unique_lock<std::mutex>(registry().mu);
    }
  }
};
inline Binding* binding_of(State& s, ncclComm_t comm) {
  for (Binding& b : s.bound)
    if (b.comm == comm) return &b;
  return nullptr;
}
inline Binding* binding_of(ncclComm_t comm) { return binding_of(state(), comm); }
// The state bound to `comm`: this thread's, or with a rank per thread another's (the main thread
// destroying the communicators its workers made). Called under the lock (CrossThreads).
inline State* state_bound_to(ncclComm_t comm) {
  if (binding_of(state(), comm) != nullptr) return &state();
  if constexpr (kRankPerThread)
    for (State& o : registry().states)
      if (binding_of(o, comm) != nullptr) return &o;
  return nullptr;
}
// Whether binding `b` registers allocation `a`: every binding of the process (of the thread, with a
// rank per thread) does, or, when one thread drives every rank, the one on the allocation's GPU.
inline bool serves(const Binding& b, const Allocation& a) { return !kOneThreadDrivesRanks || b.device == a.device; }
// The window of `a` on binding `b`'s communicator (the harness's own serves the one it runs), or null.
inline Window* window_on(Allocation& a, const Binding& b) {
  for (Window& w : a.windows)
    if (w.comm == b.comm || (a.external && w.comm == nullptr)) return &w;
  return nullptr;
}
inline const Window* window_on(const Allocation& a, const Binding& b) { return window_on(const_cast<Allocation&>(a), b); }
// The launch that follows runs on the binding's GPU; the program's current device is restored after.
struct OnDevice {
  int old = -1;
  explicit OnDevice(const Binding& b) {
    if (!kOneThreadDrivesRanks) return;
    cudaGetDevice(&old);
    if (old != b.device) cudaSetDevice(b.device);
  }
  ~OnDevice() {
    int now = -1;
    if (old >= 0 && cudaGetDevice(&now) == cudaSuccess && now != old) cudaSetDevice(old);
  }
};

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

// A background thread's converted calls may fall back beside the main thread's: the set is shared.
inline std::mutex& warned_mutex() {
  static std::mutex mu;
  return mu;
}
inline void fell_back(int site, const char* what, const char* why) {
  std::lock_guard<std::mutex> lock(warned_mutex());
  if (state().warned.insert(site).second) std::fprintf(stderr, "braid_converted: site %d: %s ran as host NCCL (%s)\n", site, what, why);
}
[[noreturn]] inline void fatal(int site, const char* what, const char* why) {
  std::fprintf(stderr, "braid_converted: site %d: %s cannot run: %s (a host fallback on this rank alone would hang its peer)\n", site,
               what, why);
  std::abort();
}
// One thread driving every rank reaches a site once per rank inside one group: every rank must take
// the same path (a device kernel waiting in a barrier for a rank that went to host NCCL never
// returns). The first rank's choice holds for the group; a rank that cannot follow it stops the
// program with the reason instead of hanging. A process with one rank always follows its own.
inline bool same_choice(int site, const char* what, bool on_device) {
  State& s = state();
  if (!kOneThreadDrivesRanks || s.group_depth == 0) return on_device;
  const auto made = s.site_on_device.emplace(site, on_device).first;
  if (made->second != on_device)
    fatal(site, what, on_device ? "another rank of this process ran it as host NCCL" : "another rank of this process ran it on the device");
  return on_device;
}
inline void register_windows(Allocation& a);

// The differential gate's snapshot shim (device/snapshot/snapshot_shim.cpp), when preloaded,
// numbers the program's device allocations: -1 says the next allocation is the prelude's own state
// (not numbered), a size says what the program asked for (symmetric allocations are rounded up).
// Weak: without the shim it is null and nothing is called.
extern "C" __attribute__((weak)) void braid_snapshot_next(long long requested_bytes);
inline void snapshot_next(long long requested_bytes) {
  if (braid_snapshot_next != nullptr) braid_snapshot_next(requested_bytes);
}

// A window's slot is free again once the window is gone (the same order on every rank).
inline void release_slot(Binding* b, Window& w) {
  if (b != nullptr && w.slot >= 0 && w.slot < (int)b->slot_used.size()) b->slot_used[(size_t)w.slot] = false;
  w.slot = -1;
}

// `v` reduced with `op` over the ranks of binding `b`'s communicator: a host all-reduce (every rank
// calls it at the same point), waited for on a stream of the runtime's own (per thread: a rank per
// thread has its own GPU).
inline uint64_t reduce_over(Binding& b, uint64_t v, ncclRedOp_t op) {
  thread_local uint64_t* scratch = nullptr;
  thread_local cudaStream_t stream = nullptr;
  OnDevice on(b);
  if (scratch == nullptr) {
    snapshot_next(-1);
    BRAID_CUDA(cudaMalloc(&scratch, sizeof(uint64_t)));
    BRAID_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  }
  BRAID_CUDA(cudaMemcpyAsync(scratch, &v, sizeof v, cudaMemcpyHostToDevice, stream));
  const ncclResult_t reduced = ncclAllReduce(scratch, scratch, 1, ncclUint64, op, b.comm, stream);
  BRAID_NCCL(reduced);
  BRAID_CUDA(cudaMemcpyAsync(&v, scratch, sizeof v, cudaMemcpyDeviceToHost, stream));
  BRAID_CUDA(cudaStreamSynchronize(stream));
  return v;
}

// Stage A: symmetric allocation (the window is registered once the communicator is known).
// Zero bytes is what cudaMalloc makes of it: success and a null pointer, no allocation and no
// window (ncclMemAlloc refuses zero bytes, and a call on it has nothing to move: host NCCL).
// `allocated` (>= bytes) is what is allocated and registered.
template <typename T>
inline cudaError_t sym_malloc(T** ptr, size_t bytes, size_t allocated = 0) {
  allocated = std::max(allocated, bytes);
  if (allocated == 0) {
    *ptr = nullptr;
    return cudaSuccess;
  }
  void* p = nullptr;
  snapshot_next((long long)bytes);
  if (ncclMemAlloc(&p, round_window(allocated)) != ncclSuccess) return cudaErrorMemoryAllocation;
  *ptr = static_cast<T*>(p);
  State& s = state();
  int device = 0;
  cudaGetDevice(&device);
  {
    CrossThreads guard;
    s.allocations.push_back(Allocation{static_cast<char*>(p), round_window(allocated), {}, false, device});
  }
  // Every rank allocates here too; with one thread driving every rank, the others have not yet:
  // registered at the next converted call (register_pending).
  if (s.bound_at_creation && !kOneThreadDrivesRanks) register_windows(s.allocations.back());
  return cudaSuccess;
}
inline ncclResult_t sym_nccl_alloc(void** ptr, size_t bytes) {
  return sym_malloc(reinterpret_cast<char**>(ptr), bytes) == cudaSuccess ? ncclSuccess : ncclSystemError;
}
// An allocation whose size depends on the rank (the rows of an uneven domain split): a window has
// one size on every rank, so every rank allocates the largest any rank of the bound communicators
// asks for (two sweeps when there are several: a tensor- by data-parallel grid) and uses its own
// part. Every rank reaches it at the same point (the rules convert it only after its
// communicator's creation). Nothing bound yet, or one thread driving every rank: plain memory of
// the program's own allocator (not a window: calls on it run as host NCCL on every rank).
template <typename T>
inline cudaError_t sym_malloc_agreed(T** ptr, size_t bytes) {
  State& s = state();
  if (kOneThreadDrivesRanks || !s.bound_at_creation || s.bound.empty()) return cudaMalloc(reinterpret_cast<void**>(ptr), bytes);
  uint64_t agreed = bytes;
  std::vector<ncclComm_t> over;
  for (int sweep = 0; sweep < (s.bound.size() > 1 ? 2 : 1); ++sweep)
    for (Binding& b : s.bound) agreed = reduce_over(b, agreed, ncclMax), over.push_back(b.comm);
  const cudaError_t e = sym_malloc(ptr, bytes, (size_t)agreed);
  if (e == cudaSuccess && agreed > 0) {
    CrossThreads guard;
    s.allocations.back().agreed = true;
    s.allocations.back().agreed_over = over;
  }
  return e;
}
inline ncclResult_t sym_nccl_alloc_agreed(void** ptr, size_t bytes) {
  State& s = state();
  if (kOneThreadDrivesRanks || !s.bound_at_creation || s.bound.empty()) return ncclMemAlloc(ptr, bytes);
  return sym_malloc_agreed(reinterpret_cast<char**>(ptr), bytes) == cudaSuccess ? ncclSuccess : ncclSystemError;
}
// The state holding symmetric allocation `ptr` (ours, not the harness's) and its index there, or
// null. With a rank per thread it may be another thread's (the main thread freeing what its workers
// allocated). Called under the lock (CrossThreads).
inline State* holder_of(const void* ptr, size_t* index) {
  State& mine = state();
  std::vector<State*> states = {&mine};
  if constexpr (kRankPerThread)
    for (State& o : registry().states)
      if (&o != &mine) states.push_back(&o);
  for (State* s : states)
    for (size_t i = 0; i < s->allocations.size(); ++i)
      if (s->allocations[i].base == ptr && !s->allocations[i].external) {
        *index = i;
        return s;
      }
  return nullptr;
}
// Every release goes to the allocator that made the pointer: a symmetric allocation (ours) is
// deregistered and ncclMemFree'd; anything else goes to the program's own free. Decided by
// looking the pointer up, so no static mapping of names can pair a free with the wrong allocator.
// Deregistration and ncclMemFree are local calls (no rank waits for another): safe under the lock.
inline bool sym_release(void* ptr, ncclResult_t* result) {
  CrossThreads guard;
  size_t i = 0;
  State* s = holder_of(ptr, &i);
  if (s == nullptr) return false;
  for (Window& w : s->allocations[i].windows) {
    Binding* b = binding_of(*s, w.comm);
    if (b == nullptr) continue;  // its communicator was aborted: the window went with it
    // Said, not only returned: the program's check names only the free (seen once, rank 0 of 2, loaded GPUs).
    if (const ncclResult_t r = w.win != nullptr ? ncclCommWindowDeregister(w.comm, w.win) : ncclSuccess; r != ncclSuccess)
      std::fprintf(stderr, "braid_converted: ncclCommWindowDeregister: %s (%s)\n", ncclGetErrorString(r), ncclGetLastError(w.comm));
    release_slot(b, w);
  }
  s->allocations.erase(s->allocations.begin() + (long)i);
  if ((*result = ncclMemFree(ptr)) != ncclSuccess)
    std::fprintf(stderr, "braid_converted: ncclMemFree: %s (%s)\n", ncclGetErrorString(*result), ncclGetLastError(nullptr));
  return true;
}

// The window's handle in its binding's table for the p2p kernel, at the lowest free slot (none left:
// the allocation's receives cannot be posted, and flush_p2p says so). Waited for: a pageable
// cudaMemcpy may return before its DMA lands, and the program's non-blocking streams would not wait
// for it. Only this copy is waited for, never the program's kernels (one may be waiting on a peer).
inline void publish_window(Binding& b, Window& w) {
  if (b.dev_windows == nullptr || w.slot >= 0 || w.win == nullptr) return;
  const auto free_slot = std::find(b.slot_used.begin(), b.slot_used.end(), false);
  if (free_slot == b.slot_used.end()) return;
  *free_slot = true;
  w.slot = (int)(free_slot - b.slot_used.begin());
  OnDevice on(b);
  BRAID_CUDA(cudaMemcpyAsync(b.dev_windows + w.slot, &w.win, sizeof(ncclWindow_t), cudaMemcpyHostToDevice, cudaStreamPerThread));
  BRAID_CUDA(cudaStreamSynchronize(cudaStreamPerThread));
}

// A window for `a` on binding `b` (the harness's own come registered) and its slot in the p2p
// kernel's table. The registration is collective over b's communicator.
inline void register_on(Binding& b, Allocation& a) {
  Window* w = window_on(a, b);
  // A size agreed before this communicator was bound may differ among its ranks: every rank asks
  // (the same two reductions, the same answer everywhere) and none registers when they differ.
  if (w == nullptr && a.agreed && std::find(a.agreed_over.begin(), a.agreed_over.end(), b.comm) == a.agreed_over.end()) {
    if (reduce_over(b, a.bytes, ncclMax) != reduce_over(b, a.bytes, ncclMin)) return;
    a.agreed_over.push_back(b.comm);
  }
  if (w == nullptr) {
    a.windows.push_back(Window{b.comm, nullptr, -1});
    w = &a.windows.back();
    BRAID_NCCL(ncclCommWindowRegister(b.comm, a.base, a.bytes, &w->win, NCCL_WIN_COLL_SYMMETRIC));
  }
  publish_window(b, *w);
}
// `a` on every binding that serves it, in the order they were bound: the same on every rank, so
// the k-th registration of each communicator pairs with its peers' k-th.
inline void register_windows(Allocation& a) {
  for (Binding& b : state().bound)
    if (serves(b, a)) register_on(b, a);
}

// One thread driving every rank: the symmetric allocations not yet windows, registered together.
// Registration is collective and pairs the k-th registration of every communicator, so the k-th
// pending allocation of every GPU registers with the others' k-th, inside one NCCL group (one thread
// makes every rank's call), and only when every GPU has as many of them, of the same sizes; otherwise
// they stay plain memory and their calls run as host NCCL on every rank. Never inside the program's
// own group: its windows would only exist at that group's end, after the kernels that need them.
inline void register_pending() {
  State& s = state();
  if (!kOneThreadDrivesRanks || s.group_depth > 0 || s.nccl_group_open || s.bound.empty()) return;
  std::vector<std::vector<size_t>> unregistered(s.bound.size());
  bool any = false;
  for (size_t i = 0; i < s.allocations.size(); ++i) {
    const Allocation& a = s.allocations[i];
    if (a.external) continue;
    size_t k = 0;
    for (const Binding& b : s.bound) {
      if (b.device == a.device && window_on(a, b) == nullptr) unregistered[k].push_back(i), any = true;
      ++k;
    }
  }
  if (!any) return;
  for (const std::vector<size_t>& t : unregistered) {
    bool same = t.size() == unregistered[0].size();
    for (size_t j = 0; same && j < t.size(); ++j) same = s.allocations[t[j]].bytes == s.allocations[unregistered[0][j]].bytes;
    if (!same) {
      if (s.warned.insert(-1).second)
        std::fprintf(stderr, "braid_converted: the GPUs of this process made different symmetric allocations; the later ones stay plain memory (host NCCL)\n");
      return;
    }
  }
  // Each allocation gets one window here (its GPU's binding): the windows' addresses, which NCCL
  // fills at the group's end, stay put until then.
  size_t k = 0;
  for (const Binding& b : s.bound) {
    for (size_t i : unregistered[k]) s.allocations[i].windows.push_back(Window{b.comm, nullptr, -1});
    ++k;
  }
  BRAID_NCCL(ncclGroupStart());
  k = 0;
  for (const Binding& b : s.bound) {
    for (size_t i : unregistered[k]) {
      Allocation& a = s.allocations[i];
      BRAID_NCCL(ncclCommWindowRegister(b.comm, a.base, a.bytes, &window_on(a, b)->win, NCCL_WIN_COLL_SYMMETRIC));
    }
    ++k;
  }
  BRAID_NCCL(ncclGroupEnd());
  k = 0;
  for (Binding& b : s.bound) {
    for (size_t i : unregistered[k]) publish_window(b, *window_on(s.allocations[i], b));
    ++k;
  }
}

// NCCL_COMM_BLOCKING=0 makes every communicator created without a config non-blocking.
inline bool env_nonblocking() {
  const char* env = std::getenv("NCCL_COMM_BLOCKING");
  return env != nullptr && std::strcmp(env, "0") == 0;
}

// What a binding needs beside its windows: the p2p mailbox (a window), the window table and plans
// of the p2p kernel, and one device communicator with barriers for every site. Made on the
// communicator's GPU. Collective: the mailbox window and the device communicator are outputs
// NCCL fills at the end of the group when one thread binds every rank.
inline void make_binding(Binding& b) {
  State& s = state();
  ncclCommUserRank(b.comm, &b.rank);
  ncclCommCount(b.comm, &b.nranks);
  if (kOneThreadDrivesRanks) ncclCommCuDevice(b.comm, &b.device);
  else cudaGetDevice(&b.device);
  b.sequencer.resize(b.nranks);
  OnDevice on(b);
  if (s.sms == 0) cudaDeviceGetAttribute(&s.sms, cudaDevAttrMultiProcessorCount, b.device);
  static const bool lazy = [] {  // the user's choice overrides the eager loading asked at start-up (prelude_lifecycle)
    const char* m = std::getenv("CUDA_MODULE_LOADING");
    if (m != nullptr && std::strcmp(m, "LAZY") == 0)
      std::fprintf(stderr, "braid_converted: CUDA_MODULE_LOADING=LAZY: a kernel loaded while a converted collective spins can stall it; EAGER is safe\n");
    return true;
  }();
  (void)lazy;
  const size_t mail_bytes = round_window(kMailBytes);
  snapshot_next(-1);
  BRAID_NCCL(ncclMemAlloc(reinterpret_cast<void**>(&b.mailbox), mail_bytes));
  BRAID_CUDA(cudaMemset(b.mailbox, 0, mail_bytes));
  BRAID_NCCL(ncclCommWindowRegister(b.comm, b.mailbox, mail_bytes, &b.mailbox_win, NCCL_WIN_COLL_SYMMETRIC));
  snapshot_next(-1);
  BRAID_CUDA(cudaMalloc(reinterpret_cast<void**>(&b.dev_windows), sizeof(ncclWindow_t) * kMaxWindows));
  BRAID_CUDA(cudaMemset(b.dev_windows, 0, sizeof(ncclWindow_t) * kMaxWindows));
  snapshot_next(-1);
  BRAID_CUDA(cudaMalloc(reinterpret_cast<void**>(&b.dev_plans),
                        sizeof(P2pOp) * kMaxP2pOps * (size_t)kCallSites * kPlanStreams));
}
inline void make_device_comm(Binding& b) {
  if (b.dc_made) return;
  ncclDevCommRequirements r;
  std::memset(&r, 0, sizeof(r));
  r.lsaBarrierCount = (int)(kBarriersPerSite * (uint32_t)kCallSites);
  r.lsaMultimem = false;
  BRAID_NCCL(ncclDevCommCreate(b.comm, &r, &b.dc));
  b.dc_made = true;
}
inline bool lsa_reaches_every_rank(const Binding& b) { return b.dc.lsaSize == b.nranks && b.nranks <= kMaxLsaPeers; }

// One thread driving every rank: every communicator of the process bound in one NCCL group (each
// registration and device communicator is collective, and this one thread makes every rank's).
inline void bind_together(const std::vector<ncclComm_t>& comms) {
  State& s = state();
  std::vector<Binding*> made;
  for (ncclComm_t c : comms)
    if (c != nullptr && binding_of(c) == nullptr && !s.nonblocking.count(c)) {
      s.bound.emplace_back();
      s.bound.back().comm = c;
      made.push_back(&s.bound.back());
    }
  if (made.empty()) return;
  BRAID_NCCL(ncclGroupStart());
  for (Binding* b : made) {
    make_binding(*b);
    OnDevice on(*b);
    make_device_comm(*b);
  }
  BRAID_NCCL(ncclGroupEnd());
  s.bound_at_creation = true;
  register_pending();
}

// A rank per thread: buffers another thread made for this thread's GPU before any thread bound
// them (the main thread allocating every GPU's buffers, then starting a thread per GPU) belong to
// this rank, registered first, in the order they were made: every rank's thread adopts its own
// GPU's the same way, so the k-th windows pair up.
inline void adopt_for_gpu(State& s, int device) {
  if constexpr (!kRankPerThread) return;
  CrossThreads guard;
  std::vector<Allocation> adopted;
  for (State& o : registry().states) {
    if (&o == &s || !o.bound.empty()) continue;
    for (auto it = o.allocations.begin(); it != o.allocations.end();) {
      if (it->device != device || it->external || !it->windows.empty()) {
        ++it;
        continue;
      }
      adopted.push_back(*it);
      it = o.allocations.erase(it);
    }
  }
  s.allocations.insert(s.allocations.begin(), adopted.begin(), adopted.end());
}

// Binding to a communicator (a collective step over it: at its creation, or at its first converted
// collective): windows for every symmetric allocation so far (allocation order), the p2p
// mailbox, and one device communicator with barriers for every site. Each communicator the
// converted calls use gets its own (a collective site given two, in a helper, finds its windows and
// barriers on the one of each launch; a communicator's first converted call is one every rank of
// it reaches). Collective steps over two communicators (registrations, launches) come in the
// program's order, the same on every rank, as host NCCL requires of calls on two communicators too.
inline Binding& bind(ncclComm_t comm) {
  State& s = state();
  Binding* b = binding_of(comm);
  if (b == nullptr) {
    b = &s.bound.emplace_back();
    b->comm = comm;
    make_binding(*b);
    if (s.bound.size() == 1) adopt_for_gpu(s, b->device);
  }
  for (Allocation& a : s.allocations) register_on(*b, a);
  make_device_comm(*b);
  return *b;
}
// The binding of a converted call's communicator, or null when the call runs as host NCCL: a
// communicator whose creation braid did not see may be non-blocking through the environment. With
// one thread driving every rank: one per GPU, bound where they are created.
inline Binding* ensure(ncclComm_t comm) {
  State& s = state();
  if (kOneThreadDrivesRanks) {
    Binding* b = binding_of(comm);
    if (b == nullptr) return nullptr;
    register_pending();
    return lsa_reaches_every_rank(*b) ? b : nullptr;
  }
  // Not bound yet: its creation was not seen (a creation braid rewrote binds there), so the
  // environment may have made it non-blocking.
  if (binding_of(comm) == nullptr && env_nonblocking()) s.nonblocking.insert(comm);
  if (s.nonblocking.count(comm)) return nullptr;
  Binding& b = bind(comm);
  return lsa_reaches_every_rank(b) ? &b : nullptr;
}

// The window of binding `b` holding [p, p + bytes) and p's offset in it, or null.
inline const Window* window_of(const Binding& b, const void* p, size_t bytes, size_t* offset) {
  const char* c = static_cast<const char*>(p);
  for (const Allocation& a : state().allocations) {
    const Window* w = window_on(a, b);
    if (w != nullptr && w->win != nullptr && c >= a.base && c + bytes <= a.base + a.bytes) {
      *offset = (size_t)(c - a.base);
      return w;
    }
  }
  return nullptr;
}

inline int ctas_for(size_t bytes, size_t min_chunk) {
  return braid::convert_p2p::rule_ctas(bytes, min_chunk, state().sms, (int)kBarriersPerSite);
}
inline uint32_t first_barrier(int site) { return (uint32_t)site * kBarriersPerSite; }
