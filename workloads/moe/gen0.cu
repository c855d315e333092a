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
//   kLayout        Permute: receive source-major, permute to expert-major, permute back (seed).
//                  Direct (token packing at the receiver): one ncclRecv per (source, expert) block
//                  straight into the expert-major position, and the return sent block by block
//                  from there: no permute kernels, more p2p operations.
//   kGemm          Grouped: cublasGemmGroupedBatchedEx, one group per expert block (3 launches per
//                  phase). PerBlock: one cublasGemmEx per block. Auto (the seed's): grouped for
//                  small blocks, per block for large ones (moe::ExpertGemm::Path::Auto).
//   kReturnEarly   PerSource: each source's results go back as soon as its GEMMs are done
//                  (combine overlapped with the remaining expert compute) instead of after all.
//   kGemmSmMargin  PerSource: SMs withheld from cuBLAS (cublasSetSmCountTarget) while the exchange
//                  is in flight, so NCCL's kernels are not starved; the last phase gets every SM.
//   kCommHighPriority  PerSource: the exchange stream gets the highest stream priority.
#include <cublas_v2.h>

#include <algorithm>

#include "braid/harness.cuh"
#include "moe.cuh"

using namespace braid::dev;
using moe::bf16;

enum class Schedule { Serial, PerSource };
enum class Layout { Permute, Direct };
enum class Gemm { Auto, Grouped, PerBlock };

// EVOLVE-BLOCK-START knobs
constexpr Schedule kSchedule = Schedule::Serial;  // braid:knob Schedule::Serial|Schedule::PerSource
constexpr Layout kLayout = Layout::Permute;  // braid:knob Layout::Permute|Layout::Direct
constexpr Gemm kGemm = Gemm::Auto;  // braid:knob Gemm::Auto|Gemm::Grouped|Gemm::PerBlock
constexpr bool kReturnEarly = false;  // braid:knob
constexpr int kGemmSmMargin = 0;  // braid:knob 0|8|16|32
constexpr bool kCommHighPriority = false;  // braid:knob
// Knobs a schedule ignores stay at their defaults (no duplicate programs):
// braid:require kSchedule == Schedule::PerSource || (kReturnEarly == false && kGemmSmMargin == 0 && kCommHighPriority == false)
// EVOLVE-BLOCK-END

// EVOLVE-BLOCK-START strategy
namespace {

constexpr bool kPipelined = kSchedule == Schedule::PerSource;

struct State {
  int32_t *counts_send = nullptr, *counts_recv = nullptr, *offsets = nullptr, *slot = nullptr, *pinned = nullptr;
  moe::RowMove *moves_dev = nullptr, *moves_host = nullptr;
  bf16 *send = nullptr, *recv = nullptr, *expert_in = nullptr, *h = nullptr, *a = nullptr, *expert_out = nullptr, *ret_send = nullptr,
       *ret_recv = nullptr;
  moe::ExpertGemm overlap_gemm, tail_gemm;  // overlap: SMs withheld while the exchange runs
  cudaStream_t comm = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
  std::vector<cudaEvent_t> landed, computed;  // per source
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
  s->landed.resize((size_t)c.world);
  s->computed.resize((size_t)c.world);
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

// Dispatch, one step or all: my picks for rank `to`, and rank `from`'s picks for my experts.
void dispatch_ops(Context& c, const Plan& pl, int to, int from) {
  State& s = st(c);
  const int El = moe::shape_of(c).experts_per_rank();
  const int64_t H = moe::shape_of(c).hidden;
  if constexpr (kLayout == Layout::Permute) {
    if (pl.k.send_rows[(size_t)to] > 0)
      BRAID_NCCL(ncclSend(s.send + pl.k.send_off[(size_t)to] * H, (size_t)(pl.k.send_rows[(size_t)to] * H), ncclBfloat16, to, c.comm, kPipelined ? s.comm : c.stream));
    if (pl.k.recv_rows[(size_t)from] > 0)
      BRAID_NCCL(ncclRecv(s.recv + pl.k.recv_off[(size_t)from] * H, (size_t)(pl.k.recv_rows[(size_t)from] * H), ncclBfloat16, from, c.comm, kPipelined ? s.comm : c.stream));
  } else {
    cudaStream_t q = kPipelined ? s.comm : c.stream;
    for (int e = 0; e < El; ++e) {
      const int64_t n_send = pl.k.send[(size_t)(to * El + e)], n_recv = pl.k.recv[(size_t)(from * El + e)];
      if (n_send > 0) BRAID_NCCL(ncclSend(s.send + pl.send_row[(size_t)(to * El + e)] * H, (size_t)(n_send * H), ncclBfloat16, to, c.comm, q));
      if (n_recv > 0) BRAID_NCCL(ncclRecv(s.expert_in + pl.em_row[(size_t)(from * El + e)] * H, (size_t)(n_recv * H), ncclBfloat16, from, c.comm, q));
    }
  }
}

// Return, one step or all: results for rank `to` (its picks of my experts), and my picks' results
// from rank `from`.
void return_ops(Context& c, const Plan& pl, int to, int from, cudaStream_t q) {
  State& s = st(c);
  const int El = moe::shape_of(c).experts_per_rank();
  const int64_t H = moe::shape_of(c).hidden;
  if constexpr (kLayout == Layout::Permute) {
    if (pl.k.recv_rows[(size_t)to] > 0)
      BRAID_NCCL(ncclSend(s.ret_send + pl.k.recv_off[(size_t)to] * H, (size_t)(pl.k.recv_rows[(size_t)to] * H), ncclBfloat16, to, c.comm, q));
    if (pl.k.send_rows[(size_t)from] > 0)
      BRAID_NCCL(ncclRecv(s.ret_recv + pl.k.send_off[(size_t)from] * H, (size_t)(pl.k.send_rows[(size_t)from] * H), ncclBfloat16, from, c.comm, q));
  } else {
    for (int e = 0; e < El; ++e) {
      const int64_t n_send = pl.k.recv[(size_t)(to * El + e)], n_recv = pl.k.send[(size_t)(from * El + e)];
      if (n_send > 0) BRAID_NCCL(ncclSend(s.expert_out + pl.em_row[(size_t)(to * El + e)] * H, (size_t)(n_send * H), ncclBfloat16, to, c.comm, q));
      if (n_recv > 0) BRAID_NCCL(ncclRecv(s.ret_recv + pl.send_row[(size_t)(from * El + e)] * H, (size_t)(n_recv * H), ncclBfloat16, from, c.comm, q));
    }
  }
}

// Moves of source p's blocks between "recv" (source-major) and expert-major (p < 0: every source).
std::vector<moe::RowMove> moves_of(const Plan& pl, int P, int El, int p) {
  std::vector<moe::RowMove> m;
  for (int q = 0; q < P; ++q) {
    if (p >= 0 && q != p) continue;
    for (int e = 0; e < El; ++e) {
      const int64_t n = pl.k.recv[(size_t)(q * El + e)];
      if (n > 0) m.push_back(moe::RowMove{pl.sm_row[(size_t)(q * El + e)], pl.em_row[(size_t)(q * El + e)], n});
    }
  }
  return m;
}

// Expert blocks of source p (p < 0: whole experts, every source).
std::vector<moe::ExpertBlock> blocks_of(const Plan& pl, int El, int p) {
  std::vector<moe::ExpertBlock> b;
  for (int e = 0; e < El; ++e) {
    if (p < 0) b.push_back(moe::ExpertBlock{e, pl.expert_row0[(size_t)e], pl.expert_rows[(size_t)e]});
    else b.push_back(moe::ExpertBlock{e, pl.em_row[(size_t)(p * El + e)], pl.k.recv[(size_t)(p * El + e)]});
  }
  return b;
}

void run(Context& c, cudaStream_t stream) {
  State& s = st(c);
  const moe::Shape sh = moe::shape_of(c);
  const int P = c.world, El = sh.experts_per_rank();
  const int64_t H = sh.hidden, I = sh.inter;
  const auto* w13 = c.buffer("w13").as<bf16>();
  const auto* w2 = c.buffer("w2").as<bf16>();

  moe::route(c, stream);
  moe::launch_plan(stream, c.buffer("topk_ids").as<int32_t>(), sh.pairs(), sh.experts, s.counts_send, s.offsets, s.slot);
  BRAID_NCCL(ncclAlltoAll(s.counts_send, s.counts_recv, (size_t)El, ncclInt32, c.comm, stream));
  BRAID_CUDA(cudaMemcpyAsync(s.pinned, s.counts_send, (size_t)sh.experts * 4, cudaMemcpyDeviceToHost, stream));
  BRAID_CUDA(cudaMemcpyAsync(s.pinned + sh.experts, s.counts_recv, (size_t)sh.experts * 4, cudaMemcpyDeviceToHost, stream));
  BRAID_CUDA(cudaStreamSynchronize(stream));
  moe::Counts k;
  k.send.assign(s.pinned, s.pinned + sh.experts);
  k.recv.assign(s.pinned + sh.experts, s.pinned + 2 * sh.experts);
  k.derive(P, El);
  const Plan pl = make_plan(k, P, El);
  moe::launch_pack_rows(stream, c.buffer("x").as<bf16>(), s.slot, sh.pairs(), H, s.send);
  size_t staged = 0;  // moves staged in pinned memory this call (each launch takes its own slice)
  auto move = [&](const std::vector<moe::RowMove>& m, const bf16* src, bf16* dst, cudaStream_t q) {
    moe::launch_moves(q, m, s.moves_host + staged, s.moves_dev + staged, src, dst, H);
    staged += m.size();
  };

  if constexpr (!kPipelined) {
    BRAID_NCCL(ncclGroupStart());
    for (int p = 0; p < P; ++p) dispatch_ops(c, pl, p, p);
    BRAID_NCCL(ncclGroupEnd());
    const std::vector<moe::RowMove> m = moves_of(pl, P, El, -1);
    if constexpr (kLayout == Layout::Permute) move(m, s.recv, s.expert_in, stream);
    s.tail_gemm.forward(stream, blocks_of(pl, El, -1), s.expert_in, w13, w2, s.h, s.a, s.expert_out, H, I);
    if constexpr (kLayout == Layout::Permute) move(moe::inverse(m), s.expert_out, s.ret_send, stream);
    BRAID_NCCL(ncclGroupStart());
    for (int p = 0; p < P; ++p) return_ops(c, pl, p, p, stream);
    BRAID_NCCL(ncclGroupEnd());
  } else {
    // Exchange on s.comm in ring steps; experts on the timed stream, source by source.
    BRAID_CUDA(cudaEventRecord(s.fork, stream));
    BRAID_CUDA(cudaStreamWaitEvent(s.comm, s.fork, 0));
    for (int j = 0; j < P; ++j) {
      const int to = (c.rank + j) % P, from = (c.rank - j + P) % P;
      BRAID_NCCL(ncclGroupStart());
      dispatch_ops(c, pl, to, from);
      BRAID_NCCL(ncclGroupEnd());
      BRAID_CUDA(cudaEventRecord(s.landed[(size_t)from], s.comm));
    }
    for (int j = 0; j < P; ++j) {
      const int from = (c.rank - j + P) % P;
      BRAID_CUDA(cudaStreamWaitEvent(stream, s.landed[(size_t)from], 0));
      const std::vector<moe::RowMove> m = moves_of(pl, P, El, from);
      if constexpr (kLayout == Layout::Permute) move(m, s.recv, s.expert_in, stream);
      moe::ExpertGemm& g = j == P - 1 ? s.tail_gemm : s.overlap_gemm;
      g.forward(stream, blocks_of(pl, El, from), s.expert_in, w13, w2, s.h, s.a, s.expert_out, H, I);
      if constexpr (kLayout == Layout::Permute) move(moe::inverse(m), s.expert_out, s.ret_send, stream);
      BRAID_CUDA(cudaEventRecord(s.computed[(size_t)from], stream));
    }
    if constexpr (kReturnEarly) {
      // Return step j carries source (rank - j)'s results, computed j-th.
      for (int j = 0; j < P; ++j) {
        const int to = (c.rank - j + P) % P, from = (c.rank + j) % P;
        BRAID_CUDA(cudaStreamWaitEvent(s.comm, s.computed[(size_t)to], 0));
        BRAID_NCCL(ncclGroupStart());
        return_ops(c, pl, to, from, s.comm);
        BRAID_NCCL(ncclGroupEnd());
      }
      BRAID_CUDA(cudaEventRecord(s.join, s.comm));
      BRAID_CUDA(cudaStreamWaitEvent(stream, s.join, 0));
    } else {
      BRAID_CUDA(cudaEventRecord(s.join, s.comm));
      BRAID_CUDA(cudaStreamWaitEvent(stream, s.join, 0));
      BRAID_NCCL(ncclGroupStart());
      for (int p = 0; p < P; ++p) return_ops(c, pl, p, p, stream);
      BRAID_NCCL(ncclGroupEnd());
    }
  }
  moe::launch_combine(stream, s.ret_recv, s.slot, c.buffer("topk_weights").as<float>(), sh.tokens, H, c.buffer("y").as<bf16>());
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
