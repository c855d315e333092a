//! Part of braid convert's prelude: drop-in replacements of NCCL's collectives (per SITE, and per
//! annotated Site type). prelude.cuh includes it inside namespace braid_converted, after the parts
//! before it: a fragment, not a header of its own. The embedding (cmake/embed_templates.cmake)
//! writes it out in place and drops these //! lines.
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
  Binding* b = ensure(comm);
  const Window* rw = b != nullptr ? window_of(*b, recv, bytes * (size_t)b->nranks, &off) : nullptr;
  if (!same_choice(SITE, "ncclAllGather", rw != nullptr)) {
    fell_back(SITE, "ncclAllGather", "receive buffer outside the symmetric windows or ranks beyond one LSA team");
    return ncclAllGather(send, recv, count, type, comm, stream);
  }
  const State& s = state();
  OnDevice on(*b);
  AllGatherConfig cfg = all_gather_auto_config(bytes, s.sms);
  cfg.ctas = std::min<int>(cfg.ctas, (int)kBarriersPerSite);
  ncclWindow_t win = rw->win;
  if constexpr (rule_shape<ISSUER, CTAS, CHUNK_BYTES>()) {
    launch_all_gather(cfg, b->dc, win, off, bytes, send, bytes, first_barrier(SITE), stream);
  } else {
    const int ctas = tuned_ctas(CTAS, cfg.ctas);
    tuned_all_gather_kernel<ISSUER><<<ctas, kThreads, 0, stream>>>(b->dc, win, off, bytes, send, bytes,
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
  Binding* b = device_reduction(type, op) ? ensure(comm) : nullptr;
  const Window* sw = b ? window_of(*b, send, count * esize, &send_off) : nullptr;
  const Window* rw = b ? window_of(*b, recv, count * esize, &recv_off) : nullptr;
  if (!same_choice(SITE, "ncclAllReduce", sw != nullptr && rw != nullptr)) {
    fell_back(SITE, "ncclAllReduce", "a type/op without a device reduction, another communicator, or a buffer outside the symmetric windows");
    return ncclAllReduce(send, recv, count, type, op, comm, stream);
  }
  const State& s = state();
  OnDevice on(*b);
  const bool fast = (type == ncclFloat32 || type == ncclBfloat16) && op == ncclSum && count % (size_t)b->nranks == 0;
  if (!fast) {  // any type and op, any count: rank r reduces part r and pushes it to every rank
    const size_t part = (count + (size_t)b->nranks - 1) / (size_t)b->nranks;
    const size_t begin = std::min(count, part * (size_t)b->rank), end = std::min(count, begin + part);
    const int ctas = tuned_ctas(CTAS, ctas_for(part * esize, 64 * 1024));  // from count and ranks: the same on every rank
    launch_reduce(type, ctas, stream, b->dc, sw->win, send_off, recv, rw->win, recv_off, begin,
                  end, (int)op, -1, true, first_barrier(SITE));
    BRAID_LAUNCHED();
    return ncclSuccess;
  }
  const size_t slice = count / (size_t)b->nranks;
  const int ctas = tuned_ctas(CTAS, ctas_for(slice * esize, 64 * 1024));
  const size_t chunk = rule_shape<ISSUER, CTAS, CHUNK_BYTES>() ? ((slice + (size_t)ctas - 1) / (size_t)ctas + 7) / 8 * 8
                                                                : tuned_chunk<ISSUER>(CHUNK_BYTES, slice * esize, ctas, 8 * esize) / esize;
  if (type == ncclFloat32)
    all_reduce_kernel<float, ISSUER><<<ctas, kThreads, 0, stream>>>(b->dc, sw->win, send_off, rw->win,
                                                           recv_off, static_cast<float*>(recv), slice, chunk, first_barrier(SITE));
  else
    all_reduce_kernel<__nv_bfloat16, ISSUER><<<ctas, kThreads, 0, stream>>>(b->dc, sw->win, send_off,
                                                                   rw->win, recv_off, static_cast<__nv_bfloat16*>(recv),
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
  const Window* sw = nullptr;
  Binding* b = device_reduction(type, op) ? ensure(comm) : nullptr;
  if (b != nullptr) sw = window_of(*b, send, recvcount * esize * (size_t)b->nranks, &send_off);
  if (!same_choice(SITE, "ncclReduceScatter", sw != nullptr)) {
    fell_back(SITE, "ncclReduceScatter", "send buffer outside the symmetric windows, or a type/op without a device rule");
    return ncclReduceScatter(send, recv, recvcount, type, op, comm, stream);
  }
  const State& s = state();
  OnDevice on(*b);
  if (!((type == ncclFloat32 || type == ncclBfloat16) && op == ncclSum)) {
    const int ctas = tuned_ctas(CTAS, ctas_for(recvcount * esize, 64 * 1024));
    launch_reduce(type, ctas, stream, b->dc, sw->win, send_off + (size_t)b->rank * recvcount * esize, recv, nullptr, 0, 0,
                  recvcount, (int)op, -1, false, first_barrier(SITE));
    BRAID_LAUNCHED();
    return ncclSuccess;
  }
  if constexpr (rule_shape<ISSUER, CTAS, CHUNK_BYTES>()) {
    const int ctas = ctas_for(recvcount * esize, 64 * 1024);
    const size_t chunk = ((recvcount + (size_t)ctas - 1) / (size_t)ctas + 7) / 8 * 8;
    if (type == ncclFloat32)
      reduce_scatter_kernel<float, Issuer::Cta><<<ctas, kThreads, 0, stream>>>(b->dc, sw->win, send_off,
                                                                              static_cast<float*>(recv), recvcount, chunk, first_barrier(SITE));
    else
      reduce_scatter_kernel<__nv_bfloat16, Issuer::Cta><<<ctas, kThreads, 0, stream>>>(
          b->dc, sw->win, send_off, static_cast<__nv_bfloat16*>(recv), recvcount, chunk, first_barrier(SITE));
  } else {
    const int ctas = tuned_ctas(CTAS, ctas_for(recvcount * esize, 64 * 1024));
    const size_t chunk = tuned_chunk<ISSUER>(CHUNK_BYTES, recvcount * esize, ctas, 8 * esize) / esize;
    if (type == ncclFloat32)
      tuned_reduce_scatter_kernel<float, ISSUER><<<ctas, kThreads, 0, stream>>>(b->dc, sw->win, send_off,
                                                                               static_cast<float*>(recv), recvcount, chunk, first_barrier(SITE));
    else
      tuned_reduce_scatter_kernel<__nv_bfloat16, ISSUER><<<ctas, kThreads, 0, stream>>>(
          b->dc, sw->win, send_off, static_cast<__nv_bfloat16*>(recv), recvcount, chunk, first_barrier(SITE));
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
  const Window* rw = nullptr;
  Binding* b = ensure(comm);
  if (b != nullptr) rw = window_of(*b, recv, bytes, &recv_off);
  if (!same_choice(SITE, "ncclBroadcast", rw != nullptr)) {
    fell_back(SITE, "ncclBroadcast", "receive buffer outside the symmetric windows");
    return ncclBroadcast(send, recv, count, type, root, comm, stream);
  }
  const State& s = state();
  OnDevice on(*b);
  const int ctas = tuned_ctas(CTAS, ctas_for(bytes, 256 * 1024));
  const size_t chunk = rule_shape<ISSUER, CTAS, CHUNK_BYTES>() ? ((bytes + (size_t)ctas - 1) / (size_t)ctas + 15) / 16 * 16
                                                                : tuned_chunk<ISSUER>(CHUNK_BYTES, bytes, ctas, 16);
  broadcast_kernel<ISSUER><<<ctas, kThreads, 0, stream>>>(b->dc, rw->win, recv_off, root, static_cast<const char*>(send),
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
  const Window* rw = nullptr;
  Binding* b = ensure(comm);
  if (b != nullptr) rw = window_of(*b, recv, bytes * (size_t)b->nranks, &off);
  if (!same_choice(SITE, "ncclAlltoAll", rw != nullptr)) {
    fell_back(SITE, "ncclAlltoAll", "receive buffer outside the symmetric windows");
    return ncclAlltoAll(send, recv, count, type, comm, stream);
  }
  const State& s = state();
  OnDevice on(*b);
  if constexpr (rule_shape<ISSUER, CTAS, CHUNK_BYTES>()) {
    const int ctas = ctas_for(bytes * (size_t)b->nranks, 256 * 1024);
    const size_t chunk = ((bytes * (size_t)b->nranks + (size_t)ctas - 1) / (size_t)ctas + 15) / 16 * 16;
    all_to_all_kernel<Issuer::Cta><<<ctas, kThreads, 0, stream>>>(b->dc, rw->win, off, send, bytes, chunk, first_barrier(SITE));
  } else {
    const int ctas = tuned_ctas(CTAS, ctas_for(bytes * (size_t)b->nranks, 256 * 1024));
    const size_t chunk = tuned_chunk<ISSUER>(CHUNK_BYTES, bytes * (size_t)b->nranks, ctas, 16);
    tuned_all_to_all_kernel<ISSUER><<<ctas, kThreads, 0, stream>>>(b->dc, rw->win, off, send, bytes, chunk, first_barrier(SITE));
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
  const Window* sw = nullptr;
  Binding* b = device_reduction(type, op) ? ensure(comm) : nullptr;
  if (b != nullptr) sw = window_of(*b, send, count * esize, &send_off);
  if (!same_choice(SITE, "ncclReduce", sw != nullptr)) {
    fell_back(SITE, "ncclReduce", "send buffer outside the symmetric windows, or a type/op without a device reduction");
    return ncclReduce(send, recv, count, type, op, root, comm, stream);
  }
  const State& s = state();
  OnDevice on(*b);
  const int ctas = tuned_ctas(SHAPE::ctas, ctas_for(count * esize, 64 * 1024));
  launch_reduce(type, ctas, stream, b->dc, sw->win, send_off, recv, nullptr, 0, 0, count, (int)op, root, false,
                first_barrier(SITE));
  BRAID_LAUNCHED();
  return ncclSuccess;
}

template <int SITE, typename SHAPE = Shape<>>
inline ncclResult_t gather(const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm, cudaStream_t stream) {
  note_backend<SITE, SHAPE::backend>();
  const size_t bytes = count * type_bytes(type);
  size_t send_off = 0;
  const Window* sw = nullptr;
  Binding* b = ensure(comm);
  if (b != nullptr) sw = window_of(*b, send, bytes, &send_off);
  if (!same_choice(SITE, "ncclGather", sw != nullptr)) {
    fell_back(SITE, "ncclGather", "send buffer outside the symmetric windows");
    return ncclGather(send, recv, count, type, root, comm, stream);
  }
  const State& s = state();
  OnDevice on(*b);
  const int ctas = tuned_ctas(SHAPE::ctas, ctas_for(bytes * (size_t)b->nranks, 256 * 1024));
  const size_t chunk = ((bytes + (size_t)ctas - 1) / (size_t)ctas + 15) / 16 * 16;
  gather_kernel<<<ctas, kThreads, 0, stream>>>(b->dc, sw->win, send_off, root, static_cast<char*>(recv), bytes, chunk,
                                               first_barrier(SITE));
  BRAID_LAUNCHED();
  return ncclSuccess;
}

template <int SITE, typename SHAPE = Shape<>>
inline ncclResult_t scatter(const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm, cudaStream_t stream) {
  note_backend<SITE, SHAPE::backend>();
  const size_t bytes = count * type_bytes(type);
  size_t recv_off = 0;
  const Window* rw = nullptr;
  Binding* b = ensure(comm);
  if (b != nullptr) rw = window_of(*b, recv, bytes, &recv_off);
  if (!same_choice(SITE, "ncclScatter", rw != nullptr)) {
    fell_back(SITE, "ncclScatter", "receive buffer outside the symmetric windows");
    return ncclScatter(send, recv, count, type, root, comm, stream);
  }
  const State& s = state();
  OnDevice on(*b);
  const int ctas = tuned_ctas(SHAPE::ctas, ctas_for(bytes * (size_t)b->nranks, 256 * 1024));
  const size_t chunk = ((bytes + (size_t)ctas - 1) / (size_t)ctas + 15) / 16 * 16;
  scatter_kernel<<<ctas, kThreads, 0, stream>>>(b->dc, rw->win, recv_off, root, static_cast<const char*>(send), bytes,
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
