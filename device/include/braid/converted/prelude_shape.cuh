//! Part of braid convert's prelude: launch shape per call site: Shape, Site and the tuned CTA/chunk
//! rules an annotated program sets. prelude.cuh includes it inside namespace braid_converted, after
//! the parts before it: a fragment, not a header of its own. The embedding
//! (cmake/embed_templates.cmake) writes it out in place and drops these //! lines.
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
