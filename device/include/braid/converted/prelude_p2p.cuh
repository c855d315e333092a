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
