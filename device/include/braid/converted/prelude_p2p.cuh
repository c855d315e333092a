//! Part of braid convert's prelude: send/recv and group replacements: pending operations flushed as
//! one p2p kernel. prelude.cuh includes it inside namespace braid_converted, after the parts before
//! it: a fragment, not a header of its own. The embedding (cmake/embed_templates.cmake) writes it
//! out in place and drops these //! lines.
inline ncclResult_t host_p2p(const std::vector<PendingP2p>& ops) {
  ncclResult_t r = ncclGroupStart();
  for (const PendingP2p& p : ops) {
    if (r != ncclSuccess) break;
    r = p.is_send ? ncclSend(p.buf, p.count, p.type, p.peer, p.comm, p.stream) : ncclRecv(p.buf, p.count, p.type, p.peer, p.comm, p.stream);
  }
  const ncclResult_t e = ncclGroupEnd();
  return r != ncclSuccess ? r : e;
}

// One communicator's sends and receives of a group, planned for the p2p kernel: "" when they can
// run on the device, else why not (the caller stops the program: the peer waits for a posting).
inline const char* plan_p2p(int site, Binding& b, const std::vector<PendingP2p>& ops, std::vector<P2pOp>& plan) {
  std::vector<braid::convert_p2p::P2pRequest> requests;
  for (const PendingP2p& p : ops) {
    if (p.stream != ops.front().stream) return "members on several streams";
    requests.push_back(braid::convert_p2p::P2pRequest{p.is_send, p.peer, p.count * type_bytes(p.type)});
  }
  std::vector<braid::convert_p2p::P2pPlanned> planned;
  if (const char* why = b.sequencer.plan(requests, planned); why[0] != '\0') return why;
  plan.resize(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    const braid::convert_p2p::P2pPlanned& q = planned[i];
    P2pOp& op = plan[i];
    op = P2pOp{ops[i].buf, 0, q.bytes, q.seq, 0, q.peer, q.slot, q.is_send ? 1 : 0, 0u, 0u};
    if (!q.is_send) {
      size_t off = 0;
      const Window* win = window_of(b, ops[i].buf, q.bytes, &off);
      if (win == nullptr || win->slot < 0) return "a receive buffer is outside the symmetric windows";
      op.window = win->slot;
      op.offset = off;
    }
  }
  (void)site;
  return "";
}

// Device memory for the plan of `site`'s launch on `stream`, a plan of its own per stream: for the
// site's first kPlanStreams streams, slices made with the binding; for any further stream, one made
// at its first launch there. A launch's plan is rewritten only by the next launch on its stream,
// which runs after it.
inline P2pOp* plan_memory(Binding& b, int site, cudaStream_t stream) {
  P2pOp*& plan = b.stream_plans[{site, stream}];
  if (plan != nullptr) return plan;
  const auto streams = std::count_if(b.stream_plans.begin(), b.stream_plans.end(),
                                     [&](const auto& e) { return e.first.first == site && e.second != nullptr; });
  if (streams < kPlanStreams)
    return plan = b.dev_plans + ((size_t)site * kPlanStreams + (size_t)streams) * kMaxP2pOps;
  snapshot_next(-1);
  BRAID_CUDA(cudaMalloc(reinterpret_cast<void**>(&plan), sizeof(P2pOp) * kMaxP2pOps));
  return plan;
}

// Runs the pending sends and receives of a group as pairwise p2p_kernel launches per communicator
// (one, several where the mailbox or the plan would overflow: p2p_rounds; one,
// or one per GPU when one thread drives every rank). Host NCCL only for a communicator that is not
// bound or ranks beyond one LSA team (the same answer on every rank; with one thread driving every
// rank, all of the group's communicators go to the device or all to host NCCL); a receive outside
// the windows or a group the plan cannot hold stops the program with a message (its peer would wait
// for a posting that never comes).
template <Issuer ISSUER = Issuer::Cta, int CTAS = 0, size_t CHUNK_BYTES = 0>
inline ncclResult_t flush_p2p(int site) {
  State& s = state();
  std::vector<PendingP2p> ops;
  ops.swap(s.pending);
  if (ops.empty()) return ncclSuccess;  // nothing to launch: no other rank waits for this one
  // The group's communicators in order of first use, each with its operations.
  std::vector<std::pair<ncclComm_t, std::vector<PendingP2p>>> by_comm;
  for (const PendingP2p& p : ops) {
    auto it = std::find_if(by_comm.begin(), by_comm.end(), [&](const auto& e) { return e.first == p.comm; });
    if (it == by_comm.end()) by_comm.push_back({p.comm, {}}), it = by_comm.end() - 1;
    it->second.push_back(p);
  }
  if (by_comm.size() > 1 && !kOneThreadDrivesRanks) fatal(site, "ncclSend/ncclRecv group", "members on several communicators");
  // Not bound at creation: the rules converted this group only where every rank reaches it, so
  // the first one binds here (a collective step) on every rank.
  std::vector<Binding*> bindings;
  for (const auto& e : by_comm) bindings.push_back(ensure(e.first));
  if (std::find(bindings.begin(), bindings.end(), nullptr) != bindings.end()) {
    fell_back(site, "ncclSend/ncclRecv", "another communicator, or ranks beyond one LSA team");
    return host_p2p(ops);
  }
  // Each communicator's group in launches the plan and the mailbox hold (p2p_rounds), run in order.
  std::vector<std::vector<P2pOp>> plans;
  std::vector<size_t> plan_comm;
  for (size_t k = 0; k < by_comm.size(); ++k)
    for (const std::vector<PendingP2p>& round : braid::convert_p2p::p2p_rounds(by_comm[k].second)) {
      plans.emplace_back();
      plan_comm.push_back(k);
      if (const char* why = plan_p2p(site, *bindings[k], round, plans.back()); why[0] != '\0')
        fatal(site, "ncclSend/ncclRecv group", why);
    }
  for (size_t i = 0; i < plans.size(); ++i) {
    const size_t k = plan_comm[i];
    Binding& b = *bindings[k];
    const cudaStream_t stream = by_comm[k].second.front().stream;
    OnDevice on(b);
    P2pOp* dev = plan_memory(b, site, stream);
    BRAID_CUDA(cudaMemcpyAsync(dev, plans[i].data(), sizeof(P2pOp) * plans[i].size(), cudaMemcpyHostToDevice, stream));
    const int ctas = braid::convert_p2p::p2p_ctas(CTAS, s.sms);  // never a function of the volume
    const size_t chunk = CHUNK_BYTES > 0 ? std::max<size_t>(16, CHUNK_BYTES / 16 * 16) : (size_t)64 * 1024;
    p2p_kernel<ISSUER><<<ctas, kThreads, 0, stream>>>(dev, (int)plans[i].size(), b.mailbox_win, b.dev_windows, b.rank, chunk);
    BRAID_LAUNCHED();
  }
  return ncclSuccess;
}

// A process with one rank opens no NCCL group: window registration and device-communicator
// creation (first use) must not run inside one, and every member of a converted group is a device
// launch already (a run-time fallback runs as a plain host call, in the same order on every rank).
// One thread driving every rank opens one: its host NCCL calls (creations, fallbacks) for several
// ranks complete only together; its windows are registered first (register_pending), so none is
// left for the group's end.
inline ncclResult_t group_start() {
  State& s = state();
  if (kOneThreadDrivesRanks) {
    register_pending();
    if (s.group_depth == 0) s.site_on_device.clear();
    const ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess) return r;
    s.nccl_group_open = true;
  }
  ++s.group_depth;
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
  ncclResult_t r = ncclSuccess;
  if (s.group_depth > 0 && --s.group_depth == 0) r = flush_p2p<ISSUER, CTAS, CHUNK_BYTES>(SITE);
  if (!kOneThreadDrivesRanks) return r;
  const ncclResult_t e = ncclGroupEnd();  // the host calls of every rank, fallbacks included, complete here
  if (s.group_depth == 0) {
    s.nccl_group_open = false;
    s.site_on_device.clear();
    std::vector<ncclComm_t> created;
    created.swap(s.created_in_group);
    if (e == ncclSuccess) bind_together(created);
  }
  return r != ncclSuccess ? r : e;
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
