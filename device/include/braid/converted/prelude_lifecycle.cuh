//! Part of braid convert's prelude: teardown and the communicator creation/destruction wrappers
//! (stage A). prelude.cuh includes it inside namespace braid_converted, after the parts before it:
//! a fragment, not a header of its own. The embedding (cmake/embed_templates.cmake) writes it out
//! in place and drops these //! lines.
// Kernels load when CUDA starts. A converted collective's kernel spins until its peers' kernels
// arrive, and under lazy module loading (CUDA's default on Linux since 12.2) the first launch of a
// kernel may wait for the running ones to finish. Two threads (or streams) issuing collectives on two
// communicators in different orders on two ranks then deadlock: each rank's next launch waits behind
// a kernel that waits for the other rank's (seen: a gradient thread and a statistics thread, 4 ranks,
// under load). NCCL loads its own kernels when a communicator is made; the converted program asks
// for every kernel at start-up, before its first CUDA call, unless the user chose a loading mode.
struct EagerModuleLoading {
  EagerModuleLoading() { setenv("CUDA_MODULE_LOADING", "EAGER", 0); }
};
inline const EagerModuleLoading eager_module_loading;
// cudaMallocPitch on symmetric memory. The pitch is the one the device's own cudaMallocPitch gives
// for this width (asked with a one-row allocation, freed at once and not counted by the gate's
// shim), so the program's rows lie where they did; the window holds pitch x height bytes.
inline cudaError_t device_pitch(size_t width, size_t* pitch) {
  void* probe = nullptr;
  snapshot_next(-1);
  const cudaError_t e = cudaMallocPitch(&probe, pitch, width, 1);
  return e != cudaSuccess ? e : cudaFree(probe);
}
template <typename T>
inline cudaError_t sym_malloc_pitch(T** ptr, size_t* pitch, size_t width, size_t height) {
  const cudaError_t e = device_pitch(width, pitch);
  return e != cudaSuccess ? e : sym_malloc(ptr, *pitch * height);
}
template <typename T>
inline cudaError_t sym_malloc_pitch_agreed(T** ptr, size_t* pitch, size_t width, size_t height) {
  const cudaError_t e = device_pitch(width, pitch);
  return e != cudaSuccess ? e : sym_malloc_agreed(ptr, *pitch * height);
}
// The program's frees (sym_release decides which allocator made the pointer).
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
  bool ours = false;
  {
    CrossThreads guard;
    size_t i = 0;
    ours = holder_of(ptr, &i) != nullptr;
  }
  if (!ours) return cudaFreeAsync(ptr, stream);
  cudaStreamSynchronize(stream);  // work queued on the stream may still use it
  ncclResult_t r;
  sym_release(ptr, &r);
  return r == ncclSuccess ? cudaSuccess : cudaErrorInvalidValue;
}
inline ncclResult_t sym_nccl_free(void* ptr) {
  ncclResult_t r;
  if (sym_release(ptr, &r)) return r;
  return ncclMemFree(ptr);
}

// The p2p plans of a binding, its sites' own and those made for other streams (plan_memory).
inline void free_plans(Binding& b) {
  const uintptr_t own = (uintptr_t)b.dev_plans,
                  own_end = own + sizeof(P2pOp) * (size_t)kMaxP2pOps * kCallSites * kPlanStreams;
  for (auto& e : b.stream_plans)  // the sites' own plans are slices of dev_plans
    if ((uintptr_t)e.second < own || (uintptr_t)e.second >= own_end) cudaFree(e.second);
  if (b.dev_plans != nullptr) cudaFree(b.dev_plans);
  b.dev_plans = nullptr;
  b.stream_plans.clear();
}
// Teardown in the order NCCL needs: device communicator, windows (allocation order), then the
// communicator; memory is freed by the program's own (converted) frees. Local to the communicator:
// with one thread driving every rank, each rank's destruction undoes its own binding.
inline void forget(State& s, std::list<Binding>::iterator it) {
  s.bound.erase(it);
  if (s.bound.empty()) s.bound_at_creation = false;
}
// Allocation `a`'s window on `comm` goes (deregistered first unless the communicator was aborted).
inline void forget_window(Allocation& a, ncclComm_t comm, bool deregister) {
  for (auto it = a.windows.begin(); it != a.windows.end(); ++it)
    if (it->comm == comm) {
      if (deregister && it->win != nullptr) ncclCommWindowDeregister(comm, it->win);
      a.windows.erase(it);
      return;
    }
}
// Every call here is local to this rank (none waits for a peer), so the lock may be held.
inline void teardown(ncclComm_t comm) {
  CrossThreads guard;
  state().nonblocking.erase(comm);  // a later communicator may reuse the handle
  State* holder = state_bound_to(comm);
  if (holder == nullptr) return;
  State& s = *holder;
  Binding* b = binding_of(s, comm);
  if (b->dc_made) ncclDevCommDestroy(comm, &b->dc);
  for (Allocation& a : s.allocations)
    if (!a.external) forget_window(a, comm, true);
  OnDevice on(*b);
  if (b->mailbox_win != nullptr) ncclCommWindowDeregister(comm, b->mailbox_win);
  if (b->mailbox != nullptr) ncclMemFree(b->mailbox);
  if (b->dev_windows != nullptr) cudaFree(b->dev_windows);
  free_plans(*b);
  for (auto it = s.bound.begin(); it != s.bound.end(); ++it)
    if (&*it == b) return forget(s, it);
}
// A communicator made non-blocking is remembered and never bound (State::nonblocking): its config
// says blocking = 0, or it leaves blocking unset and `unset` says non-blocking (for a new
// communicator NCCL_COMM_BLOCKING=0; for a split, its parent's mode).
inline bool nonblocking_config(const ncclConfig_t* config, bool unset) {
  return config != nullptr && config->blocking != NCCL_CONFIG_UNDEF_INT ? config->blocking == 0 : unset;
}
inline bool made_nonblocking(ncclResult_t r, ncclComm_t comm, bool nonblocking) {
  if (!nonblocking || comm == nullptr || (r != ncclSuccess && r != ncclInProgress)) return false;
  state().nonblocking.insert(comm);
  return true;
}
// Creation of the converted communicator: every rank passes here, so the runtime binds to it now
// (windows of the symmetric allocations so far, the mailbox, the device communicator), and later
// symmetric allocations register at once. Point-to-point calls, which run on some ranks only,
// then never need a collective step of their own.
// With one thread driving every rank, a creation inside the program's group is only complete at
// the group's end (group_end binds them all together); outside a group it binds alone.
inline ncclResult_t bind_created(ncclResult_t r, ncclComm_t comm) {
  if (r != ncclSuccess || comm == nullptr) return r;  // NCCL_SPLIT_NOCOLOR: this rank has no communicator
  State& s = state();
  if (kOneThreadDrivesRanks) {
    if (s.group_depth > 0) s.created_in_group.push_back(comm);
    else bind_together({comm});
    return r;
  }
  if (binding_of(comm) != nullptr) return r;
  if (s.creation_group_depth > 0) {  // NCCL completes it at the group's end: bound there
    s.created_in_group.push_back(comm);
    return r;
  }
  s.bound_at_creation = true;
  bind(comm);  // not ensure(): its creation's own mode (blocking or not) was checked by the caller
  return r;
}
// One rank per process, the program's own NCCL group around its creations (a data- and a
// statistics-communicator made together): the group stays an NCCL group, and its communicators
// are bound at its end, in creation order (the same on every rank).
inline ncclResult_t creation_group_start() {
  ++state().creation_group_depth;
  return ncclGroupStart();
}
inline ncclResult_t creation_group_end() {
  State& s = state();
  const ncclResult_t r = ncclGroupEnd();
  if (s.creation_group_depth > 0 && --s.creation_group_depth > 0) return r;
  std::vector<ncclComm_t> created;
  created.swap(s.created_in_group);
  for (ncclComm_t comm : created)
    if (r == ncclSuccess) bind_created(r, comm);
  return r;
}
// ncclCommInitAll: one thread, a rank per listed GPU, every communicator bound at once.
inline ncclResult_t comm_init_all(ncclComm_t* comms, int ndev, const int* devlist) {
  const ncclResult_t r = ncclCommInitAll(comms, ndev, devlist);
  if (r != ncclSuccess) return r;
  if (env_nonblocking()) {
    for (int i = 0; i < ndev; ++i) state().nonblocking.insert(comms[i]);
    return r;
  }
  bind_together(std::vector<ncclComm_t>(comms, comms + ndev));
  return r;
}
inline ncclResult_t comm_init_rank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  const ncclResult_t r = ncclCommInitRank(comm, nranks, id, rank);
  if (made_nonblocking(r, *comm, env_nonblocking())) return r;
  return bind_created(r, *comm);
}
inline ncclResult_t comm_init_rank_config(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
  const ncclResult_t r = ncclCommInitRankConfig(comm, nranks, id, rank, config);
  if (made_nonblocking(r, *comm, nonblocking_config(config, env_nonblocking()))) return r;
  return bind_created(r, *comm);
}
inline ncclResult_t comm_init_rank_scalable(ncclComm_t* comm, int nranks, int rank, int nIds, ncclUniqueId* ids,
                                            ncclConfig_t* config) {
  const ncclResult_t r = ncclCommInitRankScalable(comm, nranks, rank, nIds, ids, config);
  if (made_nonblocking(r, *comm, nonblocking_config(config, env_nonblocking()))) return r;
  return bind_created(r, *comm);
}
inline ncclResult_t comm_split(ncclComm_t parent, int color, int key, ncclComm_t* comm, ncclConfig_t* config) {
  const ncclResult_t r = ncclCommSplit(parent, color, key, comm, config);
  if (made_nonblocking(r, *comm, nonblocking_config(config, state().nonblocking.count(parent) > 0))) return r;
  return bind_created(r, *comm);
}
inline ncclResult_t comm_destroy(ncclComm_t comm) {
  teardown(comm);
  return ncclCommDestroy(comm);
}
// An aborted communicator (an error path, a failed peer) takes no more calls: nothing is
// deregistered or destroyed on it (those are collective, and its peers may be gone); the runtime
// forgets it, so later frees of symmetric allocations only ncclMemFree them.
inline ncclResult_t comm_abort(ncclComm_t comm) {
  {
    CrossThreads guard;
    state().nonblocking.erase(comm);
    if (State* s = state_bound_to(comm))
      for (auto it = s->bound.begin(); it != s->bound.end(); ++it) {
        if (it->comm != comm) continue;
        for (Allocation& a : s->allocations)
          if (!a.external) forget_window(a, comm, false);
        OnDevice on(*it);
        if (it->dev_windows != nullptr) cudaFree(it->dev_windows);
        free_plans(*it);
        forget(*s, it);  // its mailbox stays allocated: its window went with the aborted communicator
        break;
      }
  }
  return ncclCommAbort(comm);
}
inline ncclResult_t comm_finalize(ncclComm_t comm) {
  teardown(comm);
  return ncclCommFinalize(comm);
}
// The program's own window on a buffer the rules made symmetric: the runtime registered that
// buffer's window at its allocation or at binding (in allocation order, the same on every rank),
// so the program gets that handle and no second window is made. The program's registration is a
// collective call every rank makes, so binding here, if the runtime is not bound yet, is too.
// Anything else (another communicator, a buffer the runtime does not hold) registers as asked.
inline ncclResult_t window_register(ncclComm_t comm, void* buf, size_t size, ncclWindow_t* win, int flags) {
  State& s = state();
  for (Allocation& a : s.allocations) {
    if (a.base != static_cast<char*>(buf) || a.external || size > a.bytes) continue;
    if (!kOneThreadDrivesRanks) ensure(comm);  // not a non-blocking one (ensure says so)
    const Binding* b = binding_of(comm);
    const Window* w = b != nullptr ? window_on(a, *b) : nullptr;
    if (w != nullptr && w->win != nullptr) {
      *win = w->win;
      return ncclSuccess;
    }
    break;
  }
  return ncclCommWindowRegister(comm, buf, size, win, flags);
}
// A window the runtime made is deregistered with its buffer's release (sym_free) or the
// communicator's teardown, in the same order on every rank; any other as the program asks.
inline ncclResult_t window_deregister(ncclComm_t comm, ncclWindow_t win) {
  const State& s = state();
  if (win != nullptr && binding_of(comm) != nullptr)
    for (const Allocation& a : s.allocations)
      for (const Window& w : a.windows)
        if (w.win == win && !a.external) return ncclSuccess;
  return ncclCommWindowDeregister(comm, win);
}
