//! Part of braid convert's prelude: collective kernels built from comm.cuh's LSA primitives (stage
//! B). prelude.cuh includes it inside namespace braid_converted, after the parts before it: a
//! fragment, not a header of its own. The embedding (cmake/embed_templates.cmake) writes it out in
//! place and drops these //! lines.
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
