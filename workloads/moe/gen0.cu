// MoE layer (dispatch, SwiGLU experts, combine), annotated for `braid evolve`. See moe.cuh for
// the shape, buffers, router, reference, baseline and bound. The defaults reproduce seed.cu:
// counts by ncclAlltoAll and a host read-back, one grouped ncclSend/ncclRecv each way, permutes
// between source-major and expert-major rows, grouped expert GEMMs, one stream.
//
// The knobs (EVOLVE-BLOCK "knobs"); the strategy itself (EVOLVE-BLOCK "strategy") is free to change:
//   kSchedule      Serial: receive everything, compute, return everything. PerSource: the
//                  exchange runs on a second stream in ring steps (step j: send to rank+j, receive
//                  from rank-j; step 0 is the local copy), and each source's rows are multiplied as
//                  soon as its step has landed, so local rows compute while remote rows move.
//                  PerExpertGroup: the local experts split into kExpertGroups contiguous groups;
//                  on the second stream group g's rows are received from every peer at once (one
//                  NCCL group per expert group); as soon as group g has landed, its experts run
//                  once over every source's rows (each expert's weights read once, blocks as tall
//                  as in Serial) while later groups land, and the comm stream returns group g's
//                  results as soon as they are computed (after every dispatch was enqueued), so
//                  the return of early groups overlaps the compute of later ones.
//   kLayout        Permute: receive source-major, permute to expert-major, permute back (seed).
//                  Direct (token packing at the receiver): one ncclRecv per (source, expert) block
//                  straight into the expert-major position, and the return sent block by block
//                  from there: no permute kernels, more p2p operations.
//   kGemm          Grouped: cublasGemmGroupedBatchedEx, one group per expert block (3 launches per
//                  phase). PerBlock: one cublasGemmEx per block. Auto (the seed's): grouped for
//                  small blocks, per block for large ones (moe::ExpertGemm::Path::Auto).
//   kExpertGroups  PerExpertGroup: the number of expert groups (at most the local experts).
//   kPipelineMinTokens  PerSource, PerExpertGroup: calls with fewer tokens per rank run the Serial
//                  schedule (decode-sized calls are weight-bound, and the pipeline's extra
//                  launches cost more than the exchange it hides; measured on 2 x H100).
//   kReturnEarly   PerSource: each source's results go back as soon as its GEMMs are done
//                  (combine overlapped with the remaining expert compute) instead of after all.
//                  (PerExpertGroup always returns each group as soon as it is computed.)
//   kGemmSmMargin  PerSource, PerExpertGroup: SMs withheld from cuBLAS (cublasSetSmCountTarget)
//                  while the exchange is in flight, so NCCL's kernels are not starved; the last
//                  source or group gets every SM.
//   kCommHighPriority  PerSource, PerExpertGroup: the exchange stream gets the highest priority.
#include <cublas_v2.h>

#include <algorithm>

#include "braid/harness.cuh"
#include "moe.cuh"

using namespace braid::dev;
using moe::bf16;

enum class Schedule { Serial, PerSource, PerExpertGroup };
enum class Layout { Permute, Direct };
enum class Gemm { Auto, Grouped, PerBlock };

// EVOLVE-BLOCK-START knobs
constexpr Schedule kSchedule = Schedule::Serial;  // braid:knob Schedule::Serial|Schedule::PerSource|Schedule::PerExpertGroup
constexpr Layout kLayout = Layout::Permute;  // braid:knob Layout::Permute|Layout::Direct
constexpr Gemm kGemm = Gemm::Auto;  // braid:knob Gemm::Auto|Gemm::Grouped|Gemm::PerBlock
constexpr int kExpertGroups = 2;  // braid:knob 2|4|8
constexpr int kPipelineMinTokens = 0;  // braid:knob 0|512|2048
constexpr bool kReturnEarly = false;  // braid:knob
constexpr int kGemmSmMargin = 0;  // braid:knob 0|8|16|32
constexpr bool kCommHighPriority = false;  // braid:knob
// Knobs a schedule ignores stay at their defaults (no duplicate programs):
// braid:require kSchedule != Schedule::Serial || (kGemmSmMargin == 0 && kCommHighPriority == false)
// braid:require kSchedule == Schedule::PerSource || kReturnEarly == false
// braid:require kSchedule == Schedule::PerExpertGroup || kExpertGroups == 2
// braid:require kSchedule != Schedule::Serial || kPipelineMinTokens == 0
// EVOLVE-BLOCK-END

// EVOLVE-BLOCK-START strategy
namespace {

constexpr bool kPipelined = kSchedule != Schedule::Serial;  // a second stream carries the exchange

struct State {
  int32_t *counts_send = nullptr, *counts_recv = nullptr, *offsets = nullptr, *slot = nullptr, *pinned = nullptr;
  moe::RowMove *moves_dev = nullptr, *moves_host = nullptr;
  bf16 *send = nullptr, *recv = nullptr, *expert_in = nullptr, *h = nullptr, *a = nullptr, *expert_out = nullptr, *ret_send = nullptr,
       *ret_recv = nullptr;
  moe::ExpertGemm overlap_gemm, tail_gemm;  // overlap: SMs withheld while the exchange runs
  cudaStream_t comm = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
  std::vector<cudaEvent_t> landed, computed;  // per source (PerSource) or expert group (PerExpertGroup)
};

State& st(Context& c) { return *static_cast<State*>(c.candidate_state); }

Requirements requirements(const Problem&) { return {}; }

void setup(Context& c) {
  auto* s = new State;
  c.candidate_state = s;
  const moe::Shape sh = moe::shape_of(c);
  const size_t R = (size_t)sh.max_recv_rows(), Tk = (size_t)sh.pairs(), H = (size_t)sh.hidden, I = (size_t)sh.inter, E = (size_t)sh.experts;
  s->counts_send = c.alloc("counts_send", E * 4, Role::Intermediate, DType::I32).as<int32_t>();
  s->counts_recv = c.alloc("counts_recv", E * 4, Role::Receive, DType::I32).as<int32_t>();
  s->offsets = c.alloc("offsets", E * 4, Role::Intermediate, DType::I32).as<int32_t>();
  s->slot = c.alloc("slot", Tk * 4, Role::Intermediate, DType::I32).as<int32_t>();
  s->send = c.alloc("send", Tk * H * 2, Role::Intermediate, DType::BF16).as<bf16>();
  s->recv = c.alloc("recv", R * H * 2, Role::Receive, DType::BF16).as<bf16>();
  s->expert_in = c.alloc("expert_in", R * H * 2, Role::Receive, DType::BF16).as<bf16>();
  s->h = c.alloc("h", R * 2 * I * 2, Role::Intermediate, DType::BF16).as<bf16>();
  s->a = c.alloc("a", R * I * 2, Role::Intermediate, DType::BF16).as<bf16>();
  s->expert_out = c.alloc("expert_out", R * H * 2, Role::Intermediate, DType::BF16).as<bf16>();
  s->ret_send = c.alloc("ret_send", R * H * 2, Role::Intermediate, DType::BF16).as<bf16>();
  s->ret_recv = c.alloc("ret_recv", Tk * H * 2, Role::Receive, DType::BF16).as<bf16>();
  BRAID_CUDA(cudaMallocHost(&s->pinned, E * 2 * sizeof(int32_t)));
  const size_t max_moves = E * (size_t)c.world + 1;
  BRAID_CUDA(cudaMalloc(&s->moves_dev, max_moves * 2 * sizeof(moe::RowMove)));
  BRAID_CUDA(cudaMallocHost(&s->moves_host, max_moves * 2 * sizeof(moe::RowMove)));
  const auto path = kGemm == Gemm::Grouped    ? moe::ExpertGemm::Path::Grouped
                    : kGemm == Gemm::PerBlock ? moe::ExpertGemm::Path::PerBlock
                                              : moe::ExpertGemm::Path::Auto;
  s->overlap_gemm.create(sh.experts_per_rank(), path, kGemmSmMargin > 0 ? std::max(1, c.sm_count - kGemmSmMargin) : 0);
  s->tail_gemm.create(sh.experts_per_rank(), path);
  if constexpr (kPipelined) {
    int least = 0, greatest = 0;
    BRAID_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    BRAID_CUDA(cudaStreamCreateWithPriority(&s->comm, cudaStreamNonBlocking, kCommHighPriority ? greatest : least));
  }
  BRAID_CUDA(cudaEventCreateWithFlags(&s->fork, cudaEventDisableTiming));
  BRAID_CUDA(cudaEventCreateWithFlags(&s->join, cudaEventDisableTiming));
  s->landed.resize((size_t)std::max(c.world, kExpertGroups));
  s->computed.resize((size_t)std::max(c.world, kExpertGroups));
  for (auto& e : s->landed) BRAID_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  for (auto& e : s->computed) BRAID_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
}

// Row positions of one call, from the host counts. Expert-major: expert e's rows, source by
// source; block (p, e) holds the rows source p sent to local expert e.
struct Plan {
  moe::Counts k;
  std::vector<int64_t> em_row;    // [p * El + e]: first expert-major row of block (p, e)
  std::vector<int64_t> sm_row;    // [p * El + e]: first source-major row of block (p, e) in "recv"
  std::vector<int64_t> send_row;  // [q * El + e]: first row, in "send" / "ret_recv", of my picks for q's expert e
  std::vector<int64_t> expert_rows, expert_row0;  // per local expert
};

Plan make_plan(const moe::Counts& k, int P, int El) {
  Plan pl;
  pl.k = k;
  pl.em_row.assign((size_t)P * El, 0);
  pl.sm_row.assign((size_t)P * El, 0);
  pl.send_row.assign((size_t)P * El, 0);
  pl.expert_rows.assign((size_t)El, 0);
  pl.expert_row0.assign((size_t)El, 0);
  int64_t row = 0;
  for (int e = 0; e < El; ++e) {
    pl.expert_row0[(size_t)e] = row;
    for (int p = 0; p < P; ++p) {
      pl.em_row[(size_t)(p * El + e)] = row;
      row += k.recv[(size_t)(p * El + e)];
    }
    pl.expert_rows[(size_t)e] = row - pl.expert_row0[(size_t)e];
  }
  for (int p = 0; p < P; ++p) {
    int64_t r = k.recv_off[(size_t)p], q = k.send_off[(size_t)p];
    for (int e = 0; e < El; ++e) {
      pl.sm_row[(size_t)(p * El + e)] = r;
      r += k.recv[(size_t)(p * El + e)];
      pl.send_row[(size_t)(p * El + e)] = q;
      q += k.send[(size_t)(p * El + e)];
    }
  }
  return pl;
}

// A contiguous run [first, last) of local experts: every one, or one group of PerExpertGroup.
struct Experts {
  int first = 0, last = 0;
};

// Groups of PerExpertGroup: kExpertGroups (at most El, so none is empty), sizes within one.
int groups_of(int El) { return std::max(1, std::min(kExpertGroups, El)); }
Experts group_of(int g, int groups, int El) { return Experts{g * El / groups, (g + 1) * El / groups}; }

// Rows of rank p's blocks of experts x in a per-(rank, local expert) count table (k.send, k.recv).
int64_t rows_in(const std::vector<int32_t>& counts, int p, int El, Experts x) {
  int64_t n = 0;
  for (int e = x.first; e < x.last; ++e) n += counts[(size_t)(p * El + e)];
  return n;
}

// Dispatch of experts x, one step or all: my picks for rank `to`'s experts x, and rank `from`'s
// picks for my experts x. Permute: source-major, where a rank's rows of a run of experts are
// contiguous on both sides (one op each way); Direct: one op per (rank, expert) block.
void dispatch_ops(Context& c, const Plan& pl, int to, int from, Experts x, cudaStream_t q) {
  State& s = st(c);
  const int El = moe::shape_of(c).experts_per_rank();
  const int64_t H = moe::shape_of(c).hidden;
  if (x.first >= x.last) return;
  if constexpr (kLayout == Layout::Permute) {
    const int64_t n_send = rows_in(pl.k.send, to, El, x), n_recv = rows_in(pl.k.recv, from, El, x);
    if (n_send > 0)
      BRAID_NCCL(ncclSend(s.send + pl.send_row[(size_t)(to * El + x.first)] * H, (size_t)(n_send * H), ncclBfloat16, to, c.comm, q));
    if (n_recv > 0)
      BRAID_NCCL(ncclRecv(s.recv + pl.sm_row[(size_t)(from * El + x.first)] * H, (size_t)(n_recv * H), ncclBfloat16, from, c.comm, q));
  } else {
    for (int e = x.first; e < x.last; ++e) {
      const int64_t n_send = pl.k.send[(size_t)(to * El + e)], n_recv = pl.k.recv[(size_t)(from * El + e)];
      if (n_send > 0) BRAID_NCCL(ncclSend(s.send + pl.send_row[(size_t)(to * El + e)] * H, (size_t)(n_send * H), ncclBfloat16, to, c.comm, q));
      if (n_recv > 0) BRAID_NCCL(ncclRecv(s.expert_in + pl.em_row[(size_t)(from * El + e)] * H, (size_t)(n_recv * H), ncclBfloat16, from, c.comm, q));
    }
  }
}

// Return of experts x, one step or all: results for rank `to` (its picks of my experts x), and my
// picks' results from rank `from`'s experts x.
void return_ops(Context& c, const Plan& pl, int to, int from, Experts x, cudaStream_t q) {
  State& s = st(c);
  const int El = moe::shape_of(c).experts_per_rank();
  const int64_t H = moe::shape_of(c).hidden;
  if (x.first >= x.last) return;
  if constexpr (kLayout == Layout::Permute) {
    const int64_t n_send = rows_in(pl.k.recv, to, El, x), n_recv = rows_in(pl.k.send, from, El, x);
    if (n_send > 0)
      BRAID_NCCL(ncclSend(s.ret_send + pl.sm_row[(size_t)(to * El + x.first)] * H, (size_t)(n_send * H), ncclBfloat16, to, c.comm, q));
    if (n_recv > 0)
      BRAID_NCCL(ncclRecv(s.ret_recv + pl.send_row[(size_t)(from * El + x.first)] * H, (size_t)(n_recv * H), ncclBfloat16, from, c.comm, q));
  } else {
    for (int e = x.first; e < x.last; ++e) {
      const int64_t n_send = pl.k.recv[(size_t)(to * El + e)], n_recv = pl.k.send[(size_t)(from * El + e)];
      if (n_send > 0) BRAID_NCCL(ncclSend(s.expert_out + pl.em_row[(size_t)(to * El + e)] * H, (size_t)(n_send * H), ncclBfloat16, to, c.comm, q));
      if (n_recv > 0) BRAID_NCCL(ncclRecv(s.ret_recv + pl.send_row[(size_t)(from * El + e)] * H, (size_t)(n_recv * H), ncclBfloat16, from, c.comm, q));
    }
  }
}

// Moves of source p's blocks of experts x between "recv" (source-major) and expert-major (p < 0:
// every source).
std::vector<moe::RowMove> moves_of(const Plan& pl, int P, int El, int p, Experts x) {
  std::vector<moe::RowMove> m;
  for (int q = 0; q < P; ++q) {
    if (p >= 0 && q != p) continue;
    for (int e = x.first; e < x.last; ++e) {
      const int64_t n = pl.k.recv[(size_t)(q * El + e)];
      if (n > 0) m.push_back(moe::RowMove{pl.sm_row[(size_t)(q * El + e)], pl.em_row[(size_t)(q * El + e)], n});
    }
  }
  return m;
}

// Expert blocks of source p for experts x (p < 0: whole experts, every source's rows at once).
std::vector<moe::ExpertBlock> blocks_of(const Plan& pl, int El, int p, Experts x) {
  std::vector<moe::ExpertBlock> b;
  for (int e = x.first; e < x.last; ++e) {
    if (p < 0) b.push_back(moe::ExpertBlock{e, pl.expert_row0[(size_t)e], pl.expert_rows[(size_t)e]});
    else b.push_back(moe::ExpertBlock{e, pl.em_row[(size_t)(p * El + e)], pl.k.recv[(size_t)(p * El + e)]});
  }
  return b;
}

// One call's plan and what its steps share: row moves staged in pinned memory (each launch takes
// its own slice) and the expert compute on the call's buffers.
struct Call {
  Context& c;
  State& s;
  Plan pl;
  int P = 1, El = 1;
  int64_t H = 0, I = 0;
  size_t staged = 0;

  void move(const std::vector<moe::RowMove>& m, const bf16* src, bf16* dst, cudaStream_t q) {
    moe::launch_moves(q, m, s.moves_host + staged, s.moves_dev + staged, src, dst, H);
    staged += m.size();
  }
  void experts(moe::ExpertGemm& g, cudaStream_t q, const std::vector<moe::ExpertBlock>& blocks) {
    g.forward(q, blocks, s.expert_in, c.buffer("w13").as<bf16>(), c.buffer("w2").as<bf16>(), s.h, s.a, s.expert_out, H, I);
  }
  Experts all() const { return Experts{0, El}; }
};

// Route, count, exchange the counts and read them on the host (cuBLAS and the p2p sizes need
// them), then pack my picks by destination expert.
Plan plan_call(Context& c, cudaStream_t stream) {
  State& s = st(c);
  const moe::Shape sh = moe::shape_of(c);
  const int El = sh.experts_per_rank();
  moe::route(c, stream);
  moe::launch_plan(stream, c.buffer("topk_ids").as<int32_t>(), sh.pairs(), sh.experts, s.counts_send, s.offsets, s.slot);
  BRAID_NCCL(ncclAlltoAll(s.counts_send, s.counts_recv, (size_t)El, ncclInt32, c.comm, stream));
  BRAID_CUDA(cudaMemcpyAsync(s.pinned, s.counts_send, (size_t)sh.experts * 4, cudaMemcpyDeviceToHost, stream));
  BRAID_CUDA(cudaMemcpyAsync(s.pinned + sh.experts, s.counts_recv, (size_t)sh.experts * 4, cudaMemcpyDeviceToHost, stream));
  BRAID_CUDA(cudaStreamSynchronize(stream));
  moe::Counts k;
  k.send.assign(s.pinned, s.pinned + sh.experts);
  k.recv.assign(s.pinned + sh.experts, s.pinned + 2 * sh.experts);
  k.derive(c.world, El);
  moe::launch_pack_rows(stream, c.buffer("x").as<bf16>(), s.slot, sh.pairs(), sh.hidden, s.send);
  return make_plan(k, c.world, El);
}

// Serial: everything there, every expert, everything back, on the timed stream.
void run_serial(Call& k, cudaStream_t stream) {
  State& s = k.s;
  BRAID_NCCL(ncclGroupStart());
  for (int p = 0; p < k.P; ++p) dispatch_ops(k.c, k.pl, p, p, k.all(), stream);
  BRAID_NCCL(ncclGroupEnd());
  const std::vector<moe::RowMove> m = moves_of(k.pl, k.P, k.El, -1, k.all());
  if constexpr (kLayout == Layout::Permute) k.move(m, s.recv, s.expert_in, stream);
  k.experts(s.tail_gemm, stream, blocks_of(k.pl, k.El, -1, k.all()));
  if constexpr (kLayout == Layout::Permute) k.move(moe::inverse(m), s.expert_out, s.ret_send, stream);
  BRAID_NCCL(ncclGroupStart());
  for (int p = 0; p < k.P; ++p) return_ops(k.c, k.pl, p, p, k.all(), stream);
  BRAID_NCCL(ncclGroupEnd());
}

// PerSource: the exchange on s.comm in ring steps; experts on the timed stream, source by source.
void run_per_source(Call& k, cudaStream_t stream) {
  State& s = k.s;
  const int P = k.P, rank = k.c.rank;
  BRAID_CUDA(cudaEventRecord(s.fork, stream));
  BRAID_CUDA(cudaStreamWaitEvent(s.comm, s.fork, 0));
  for (int j = 0; j < P; ++j) {
    const int to = (rank + j) % P, from = (rank - j + P) % P;
    BRAID_NCCL(ncclGroupStart());
    dispatch_ops(k.c, k.pl, to, from, k.all(), s.comm);
    BRAID_NCCL(ncclGroupEnd());
    BRAID_CUDA(cudaEventRecord(s.landed[(size_t)from], s.comm));
  }
  for (int j = 0; j < P; ++j) {
    const int from = (rank - j + P) % P;
    BRAID_CUDA(cudaStreamWaitEvent(stream, s.landed[(size_t)from], 0));
    const std::vector<moe::RowMove> m = moves_of(k.pl, P, k.El, from, k.all());
    if constexpr (kLayout == Layout::Permute) k.move(m, s.recv, s.expert_in, stream);
    k.experts(j == P - 1 ? s.tail_gemm : s.overlap_gemm, stream, blocks_of(k.pl, k.El, from, k.all()));
    if constexpr (kLayout == Layout::Permute) k.move(moe::inverse(m), s.expert_out, s.ret_send, stream);
    BRAID_CUDA(cudaEventRecord(s.computed[(size_t)from], stream));
  }
  if constexpr (kReturnEarly) {
    // Return step j carries source (rank - j)'s results, computed j-th.
    for (int j = 0; j < P; ++j) {
      const int to = (rank - j + P) % P, from = (rank + j) % P;
      BRAID_CUDA(cudaStreamWaitEvent(s.comm, s.computed[(size_t)to], 0));
      BRAID_NCCL(ncclGroupStart());
      return_ops(k.c, k.pl, to, from, k.all(), s.comm);
      BRAID_NCCL(ncclGroupEnd());
    }
    BRAID_CUDA(cudaEventRecord(s.join, s.comm));
    BRAID_CUDA(cudaStreamWaitEvent(stream, s.join, 0));
  } else {
    BRAID_CUDA(cudaEventRecord(s.join, s.comm));
    BRAID_CUDA(cudaStreamWaitEvent(stream, s.join, 0));
    BRAID_NCCL(ncclGroupStart());
    for (int p = 0; p < P; ++p) return_ops(k.c, k.pl, p, p, k.all(), stream);
    BRAID_NCCL(ncclGroupEnd());
  }
}

// PerExpertGroup: on s.comm every group's dispatch (all peers in one NCCL group each), then each
// group's return once it is computed; on the timed stream group g's experts over every source's
// rows as soon as g has landed. Every rank issues the same NCCL groups in the same order.
void run_per_group(Call& k, cudaStream_t stream) {
  State& s = k.s;
  const int G = groups_of(k.El);
  BRAID_CUDA(cudaEventRecord(s.fork, stream));  // after the pack
  BRAID_CUDA(cudaStreamWaitEvent(s.comm, s.fork, 0));
  for (int g = 0; g < G; ++g) {
    BRAID_NCCL(ncclGroupStart());
    for (int p = 0; p < k.P; ++p) dispatch_ops(k.c, k.pl, p, p, group_of(g, G, k.El), s.comm);
    BRAID_NCCL(ncclGroupEnd());
    BRAID_CUDA(cudaEventRecord(s.landed[(size_t)g], s.comm));
  }
  for (int g = 0; g < G; ++g) {
    const Experts x = group_of(g, G, k.El);
    BRAID_CUDA(cudaStreamWaitEvent(stream, s.landed[(size_t)g], 0));
    const std::vector<moe::RowMove> m = moves_of(k.pl, k.P, k.El, -1, x);
    if constexpr (kLayout == Layout::Permute) k.move(m, s.recv, s.expert_in, stream);
    k.experts(g == G - 1 ? s.tail_gemm : s.overlap_gemm, stream, blocks_of(k.pl, k.El, -1, x));
    if constexpr (kLayout == Layout::Permute) k.move(moe::inverse(m), s.expert_out, s.ret_send, stream);
    BRAID_CUDA(cudaEventRecord(s.computed[(size_t)g], stream));
  }
  for (int g = 0; g < G; ++g) {
    BRAID_CUDA(cudaStreamWaitEvent(s.comm, s.computed[(size_t)g], 0));
    BRAID_NCCL(ncclGroupStart());
    for (int p = 0; p < k.P; ++p) return_ops(k.c, k.pl, p, p, group_of(g, G, k.El), s.comm);
    BRAID_NCCL(ncclGroupEnd());
  }
  BRAID_CUDA(cudaEventRecord(s.join, s.comm));
  BRAID_CUDA(cudaStreamWaitEvent(stream, s.join, 0));
}

void run(Context& c, cudaStream_t stream) {
  const moe::Shape sh = moe::shape_of(c);
  Call k{c, st(c), plan_call(c, stream), c.world, sh.experts_per_rank(), sh.hidden, sh.inter};
  if (kSchedule == Schedule::Serial || sh.tokens < kPipelineMinTokens) run_serial(k, stream);
  else if (kSchedule == Schedule::PerSource) run_per_source(k, stream);
  else run_per_group(k, stream);
  moe::launch_combine(stream, k.s.ret_recv, k.s.slot, c.buffer("topk_weights").as<float>(), sh.tokens, sh.hidden, c.buffer("y").as<bf16>());
}

void teardown(Context& c) {
  auto* s = static_cast<State*>(c.candidate_state);
  if (s == nullptr) return;
  cudaDeviceSynchronize();
  s->overlap_gemm.destroy();
  s->tail_gemm.destroy();
  if (s->comm != nullptr) cudaStreamDestroy(s->comm);
  cudaEventDestroy(s->fork);
  cudaEventDestroy(s->join);
  for (auto e : s->landed) cudaEventDestroy(e);
  for (auto e : s->computed) cudaEventDestroy(e);
  cudaFreeHost(s->pinned);
  cudaFreeHost(s->moves_host);
  cudaFree(s->moves_dev);
  delete s;
  c.candidate_state = nullptr;
}

}  // namespace
// EVOLVE-BLOCK-END

int main(int argc, char** argv) {
  return harness_main(argc, argv, moe::make_workload(), Candidate{requirements, setup, run, teardown});
}
