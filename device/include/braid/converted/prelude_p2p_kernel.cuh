//! Part of braid convert's prelude: the pairwise point-to-point kernel over the mailbox window.
//! prelude.cuh includes it inside namespace braid_converted, after the parts before it: a fragment,
//! not a header of its own. The embedding (cmake/embed_templates.cmake) writes it out in place and
//! drops these //! lines.
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
      // The slot's previous message (seq - kSlots) must be done before its posting is replaced. On
      // one stream it always is (a launch ends when its messages are); launches of one site on two
      // streams (a helper given either) may overlap, and then this waits instead of overwriting.
      if (op.seq > (unsigned long long)kSlots)
        while (done[op.peer * kSlots + op.slot] < op.seq - kSlots) {
        }
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
        while (done[ops[i].peer * kSlots + ops[i].slot] < ops[i].seq) {  // a later message may follow
        }
    __threadfence_system();
  }
}
