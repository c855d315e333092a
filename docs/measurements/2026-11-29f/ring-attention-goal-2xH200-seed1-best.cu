// Ring attention, annotated for `braid evolve`. Rank r holds tokens [rL, (r+1)L) of Q, K, V and
// must write attention over the whole sequence for its queries into "out" (see ring_attention.cuh
// for buffers, reference, baseline and bound). The attention math is the frozen block kernel
// (attention_block.cuh: attention_tile / launch_attention_block, online-softmax state, global
// positions). The defaults reproduce seed.cu: P steps on one stream, each a group of ncclSend /
// ncclRecv of the next K/V block then the kernel on the block held.
//
// Three EVOLVE blocks: "knobs" (the settings below), "kernels" (the copy kernels and the fused
// attention + copy kernel) and "host" (setup, run, teardown: the orchestration). All three may be
// rewritten; the knobs only pick among the code paths written here.
//   kSchedule      Serial: transfer, then compute, on one stream (the seed). Overlapped: the next
//                  block moves while the current one is computed (double-buffered K/V stages;
//                  readiness by stream events or by flags in a symmetric window).
//   kMover         who moves the next block (every mover pulls it from rank r - 1, or NCCL pairs
//                  a send with a receive): Nccl (host ncclSend/ncclRecv on a comm stream),
//                  CopyEngine (cudaMemcpyAsync from the neighbour's window address; stream memory
//                  operations wait on and write the flags: no SM), Companion (one persistent copy
//                  kernel of kCommCtas CTAs for the whole call, spinning on device flags),
//                  FusedCtas (the attention launch itself carries kCommCtas extra CTAs that copy the
//                  next chunk while the other CTAs compute: communication issued from inside the
//                  attention kernel; extra warps inside an attention CTA do not fit, its 8 warps
//                  use the whole register file).
//   kChunks        a block moves and is computed in 1, 2 or 4 chunks of keys (each chunk's kernel
//                  can start as soon as that chunk has landed; more launches and state passes).
//   kCommCtas      Companion / FusedCtas: CTAs (256 threads) that copy, i.e. SMs given to the ring.
//   kCommHighPriority  the comm stream gets the highest stream priority (Nccl, CopyEngine, Companion).
//   kZigZag        causal shapes: swap the second half of the queries with the mirror rank P-1-r
//                  first and return that half's output at the end, so every rank does an even
//                  share of the causal work (ring_attention::zigzag_positions).
//   kSkipMasked    causal shapes: launch no kernel for a chunk every query of this rank is masked
//                  from (the chunk still travels on round the ring).
// Handshakes keep every pull correct: a rank copies chunk c of step s from rank r - 1 only once
// r - 1 has it (r - 1's landed flag), and overwrites a stage only once rank r + 1 has finished
// reading it (r + 1's landed flag of the step before) and its own kernel on it is done. Every flag
// is waited on where it lives: a rank that lands a chunk adds to its own flag and to the copies
// its two neighbours wait on (stream waits and device spins on local memory only).
#include <memory>
#include <vector>

#include "braid/harness.cuh"
#include "ring_attention.cuh"

using namespace braid::dev;
using ring_attention::BlockArgs;
using ring_attention::bf16;
using ring_attention::Positions;
using ring_attention::Shape;

enum class Schedule { Serial, Overlapped };
enum class Mover { Nccl, CopyEngine, Companion, FusedCtas };

// EVOLVE-BLOCK-START knobs
constexpr Schedule kSchedule = Schedule::Overlapped;  // braid:knob Schedule::Serial|Schedule::Overlapped
constexpr Mover kMover = Mover::CopyEngine;  // braid:knob Mover::Nccl|Mover::CopyEngine|Mover::Companion|Mover::FusedCtas
constexpr int kChunks = 1;  // braid:knob 1|2|4
constexpr int kCommCtas = 8;  // braid:knob 4|8|16|32
constexpr bool kCommHighPriority = true;  // braid:knob
constexpr bool kZigZag = true;  // braid:knob
constexpr bool kSkipMasked = true;  // braid:knob
// The seed's serial shape is NCCL, one chunk; knobs a mover ignores stay at their defaults (no two
// vectors describe one program):
// braid:require kSchedule == Schedule::Overlapped || (kMover == Mover::Nccl && kChunks == 1 && kCommHighPriority == false)
// braid:require kMover == Mover::Companion || kMover == Mover::FusedCtas || kCommCtas == 8
// braid:require kMover != Mover::FusedCtas || kCommHighPriority == false
// EVOLVE-BLOCK-END

// EVOLVE-BLOCK-START kernels
constexpr int kCopyThreads = ring_attention::kThreads;  // 256: the fused kernel's CTA size

// One transfer unit: chunk c of the block a rank holds at step s moves to rank r + 1 (pulled by it).
// Flags (uint32, a symmetric window of 4 arrays of units, index s * kChunks + c): landed (this rank
// holds the chunk it pulled at step s), prev_landed / next_landed (rank r - 1 / r + 1 holds its
// chunk of step s: written by that rank), computed (this rank's kernel on the unit is done;
// Companion).
struct CopyJob {
  const bf16* src_k = nullptr;  // the neighbour's chunk (LSA address)
  const bf16* src_v = nullptr;
  bf16* dst_k = nullptr;        // this rank's stage
  bf16* dst_v = nullptr;
  size_t bytes = 0;             // of K (and of V)
  uint32_t* wait_prev = nullptr;  // local prev_landed of the step before (null at step 0)
  uint32_t* wait_next = nullptr;  // local next_landed of the step before (null at step 0)
  uint32_t* wait_own = nullptr;   // local computed of the step before (Companion)
  uint32_t* landed = nullptr;     // this unit's landed flag: local, ...
  uint32_t* tell_next = nullptr;  // ... r + 1's prev_landed, ...
  uint32_t* tell_prev = nullptr;  // ... r - 1's next_landed
};

// Landed flags count copy CTAs: every CTA adds 1 per call, so a unit is in once the flag reaches
// epoch * kCommCtas (the copy engine path writes the epoch itself).
__host__ __device__ inline uint32_t landed_target(uint32_t epoch) {
  return kMover == Mover::CopyEngine ? epoch : epoch * (uint32_t)kCommCtas;
}

// This CTA's share (cta of ctas) of one unit: waits, K and V slices, then its count on the flag.
__device__ inline void copy_unit(const CopyJob& j, int cta, int ctas, uint32_t epoch) {
  if (threadIdx.x == 0) {
    if (j.wait_prev) flag_wait_geq(j.wait_prev, landed_target(epoch));
    if (j.wait_next) flag_wait_geq(j.wait_next, landed_target(epoch));
    if (j.wait_own) flag_wait_geq(j.wait_own, epoch);
  }
  __syncthreads();
  const size_t slice = ((j.bytes + ctas - 1) / ctas + 15) / 16 * 16;
  const size_t lo = slice * cta < j.bytes ? slice * cta : j.bytes;
  const size_t hi = lo + slice < j.bytes ? lo + slice : j.bytes;
  copy_range<Issuer::Cta, 4>(reinterpret_cast<char*>(j.dst_k) + lo, reinterpret_cast<const char*>(j.src_k) + lo, hi - lo);
  copy_range<Issuer::Cta, 4>(reinterpret_cast<char*>(j.dst_v) + lo, reinterpret_cast<const char*>(j.src_v) + lo, hi - lo);
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    uint32_t* const flags[3] = {j.landed, j.tell_next, j.tell_prev};
    for (uint32_t* f : flags) cuda::atomic_ref<uint32_t, cuda::thread_scope_system>(*f).fetch_add(1u, cuda::memory_order_release);
  }
}

// Companion: every unit of the call in order, kCommCtas CTAs.
template <int kUnused = 0>
__global__ void __launch_bounds__(kCopyThreads) companion_kernel(const CopyJob* jobs, int units, uint32_t epoch) {
  for (int u = 0; u < units; ++u) copy_unit(jobs[u], blockIdx.x, gridDim.x, epoch);
}

// FusedCtas: blocks [0, copy_ctas) copy `job` (launched first, so they hold their SMs first), the
// rest are the attention tiles of `a` (head-fastest, longest causal rows first).
template <bool kCausal>
__global__ void __launch_bounds__(ring_attention::kThreads, ring_attention::kCtasPerSm) fused_kernel(BlockArgs a, CopyJob job, int copy_ctas, uint32_t epoch) {
  if ((int)blockIdx.x < copy_ctas) {
    copy_unit(job, blockIdx.x, copy_ctas, epoch);
    return;
  }
  const int idx = blockIdx.x - copy_ctas, tiles = a.q_len / ring_attention::kBlockM;
  ring_attention::attention_tile<kCausal>(a, idx % a.hq, tiles - 1 - idx / a.hq);
}
// EVOLVE-BLOCK-END

namespace {

// EVOLVE-BLOCK-START host
constexpr bool kOverlap = kSchedule == Schedule::Overlapped;
constexpr bool kFlags = kOverlap && kMover != Mover::Nccl;  // flag window and LSA addresses

struct State {
  Shape shape;
  int chunk_keys = 0;
  bool zigzag = false;  // kZigZag on a causal shape
  cudaStream_t comm = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
  std::vector<cudaEvent_t> landed_ev, computed_ev;  // per unit
  std::unique_ptr<StreamMemOps> memops;
  uint32_t* flags = nullptr;       // this rank's flag window
  uint32_t* prev_flags = nullptr;  // rank r - 1's
  uint32_t* next_flags = nullptr;  // rank r + 1's
  const bf16* prev_k = nullptr;    // rank r - 1's "k", "v" and stages (LSA addresses)
  const bf16* prev_v = nullptr;
  const bf16* prev_stage = nullptr;
  CopyJob* jobs = nullptr;         // the Companion's units, in order (fixed addresses: made in setup)
  int job_count = 0;
};

State& st(Context& c) { return *static_cast<State*>(c.candidate_state); }

int units(const State& s) { return s.shape.world * kChunks; }
size_t landed_slot(int step, int chunk) { return (size_t)step * kChunks + chunk; }
// The flag arrays of the window, each units() long.
enum FlagArray { kLanded = 0, kPrevLanded = 1, kNextLanded = 2, kComputed = 3 };
size_t flag_slot(const State& s, FlagArray array, int step, int chunk) { return (size_t)array * units(s) + landed_slot(step, chunk); }

// Stage i holds K then V of one block: the block held at step s >= 1 sits in stage s % 2.
bf16* stage_k(Context& c, int step) { return c.buffer("kv_stage").as<bf16>() + (size_t)(step % 2) * 2 * st(c).shape.kv_elems(); }
const bf16* held_k(Context& c, int step) { return step == 0 ? c.buffer("k").as<bf16>() : stage_k(c, step); }
const bf16* held_v(Context& c, int step) { return step == 0 ? c.buffer("v").as<bf16>() : stage_k(c, step) + st(c).shape.kv_elems(); }

CopyJob copy_job(Context& c, int step, int chunk);

// Kernel launches are templates, so that a launch in a branch the knobs discard instantiates no
// kernel.
template <bool kCausal>
void launch_fused(const BlockArgs& a, const CopyJob& job, int copy_ctas, int tiles, uint32_t epoch, cudaStream_t stream) {
  fused_kernel<kCausal><<<copy_ctas + tiles, ring_attention::kThreads, tiles > 0 ? ring_attention::kBlockSmem : 0, stream>>>(a, job, copy_ctas,
                                                                                                                          epoch);
  BRAID_LAUNCHED();
}
template <int kUnused = 0>
void allow_fused_smem() {
  ring_attention::allow_block_smem((const void*)fused_kernel<false>);
  ring_attention::allow_block_smem((const void*)fused_kernel<true>);
}
template <int kUnused = 0>
void launch_companion(const CopyJob* jobs, int count, uint32_t epoch, cudaStream_t stream) {
  companion_kernel<><<<kCommCtas, kCopyThreads, 0, stream>>>(jobs, count, epoch);
  BRAID_LAUNCHED();
}

Requirements requirements(const Problem&) { return {}; }

void setup(Context& c) {
  auto* s = new State;
  c.candidate_state = s;
  s->shape = ring_attention::shape(c);
  const Shape& sh = s->shape;
  s->chunk_keys = sh.local() / kChunks;
  s->zigzag = kZigZag && sh.causal;
  if (s->chunk_keys % ring_attention::kBlockN != 0) throw DeviceError("ring_attention gen0: L / kChunks must be a multiple of 64");
  // Windows, in the same order on every rank.
  c.alloc_window("kv_stage", 2 * sh.kv_block_bytes(), Role::Intermediate, DType::BF16);
  c.alloc_window("q_zz", kZigZag ? sh.q_elems() * 2 : 0, Role::Intermediate, DType::BF16);
  c.alloc_window("out_zz", kZigZag ? sh.q_elems() * 2 : 0, Role::Intermediate, DType::BF16);
  Buffer& flags = c.alloc_window("flags", 4 * (size_t)sh.world * kChunks * 4, Role::State, DType::U32);
  c.alloc("o_acc", sh.q_elems() * 4, Role::Intermediate, DType::F32);
  c.alloc("row_max", (size_t)sh.local() * ring_attention::kQueryHeads * 4, Role::Intermediate, DType::F32);
  c.alloc("row_sum", (size_t)sh.local() * ring_attention::kQueryHeads * 4, Role::Intermediate, DType::F32);
  s->flags = flags.as<uint32_t>();
  BRAID_CUDA(cudaEventCreateWithFlags(&s->fork, cudaEventDisableTiming));
  BRAID_CUDA(cudaEventCreateWithFlags(&s->join, cudaEventDisableTiming));
  s->landed_ev.resize((size_t)units(*s));
  s->computed_ev.resize((size_t)units(*s));
  for (auto& e : s->landed_ev) BRAID_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  for (auto& e : s->computed_ev) BRAID_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  if constexpr (kOverlap) {
    int least = 0, greatest = 0;
    BRAID_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    BRAID_CUDA(cudaStreamCreateWithPriority(&s->comm, cudaStreamNonBlocking, kCommHighPriority ? greatest : least));
  }
  if constexpr (kMover == Mover::FusedCtas) allow_fused_smem<>();
  if constexpr (kFlags) {
    if (c.dev_comm.lsaSize != c.world || c.dev_comm.lsaRank != c.rank)
      throw DeviceError("the CopyEngine, Companion and FusedCtas movers need every rank in one NVLink (LSA) domain");
    s->memops = std::make_unique<StreamMemOps>();
    const int n = c.world, me = c.rank, prev = (me + n - 1) % n, next = (me + 1) % n;
    s->prev_flags = static_cast<uint32_t*>(host_lsa_pointers(flags.win, 0, n, c.stream, me)[(size_t)prev]);
    s->next_flags = static_cast<uint32_t*>(host_lsa_pointers(flags.win, 0, n, c.stream, me)[(size_t)next]);
    s->prev_k = static_cast<const bf16*>(host_lsa_pointers(c.buffer("k").win, 0, n, c.stream, me)[(size_t)prev]);
    s->prev_v = static_cast<const bf16*>(host_lsa_pointers(c.buffer("v").win, 0, n, c.stream, me)[(size_t)prev]);
    s->prev_stage = static_cast<const bf16*>(host_lsa_pointers(c.buffer("kv_stage").win, 0, n, c.stream, me)[(size_t)prev]);
  }
  if constexpr (kOverlap && kMover == Mover::Companion) {
    std::vector<CopyJob> jobs;
    for (int step = 0; step + 1 < sh.world; ++step)
      for (int ch = 0; ch < kChunks; ++ch) jobs.push_back(copy_job(c, step, ch));
    s->job_count = (int)jobs.size();
    BRAID_CUDA(cudaMalloc(&s->jobs, std::max<size_t>(jobs.size(), 1) * sizeof(CopyJob)));
    if (!jobs.empty()) BRAID_CUDA(cudaMemcpy(s->jobs, jobs.data(), jobs.size() * sizeof(CopyJob), cudaMemcpyHostToDevice));
    BRAID_CUDA(cudaDeviceSynchronize());  // a pageable copy may return before its DMA lands; the companion runs on another stream
  }
}

// The pull of unit (step, chunk): chunk `chunk` of what rank r - 1 holds at `step`, into this
// rank's stage for step + 1, with the flags that order it (kFlags movers).
CopyJob copy_job(Context& c, int step, int chunk) {
  State& s = st(c);
  const size_t n = s.shape.kv_elems(), off = (size_t)chunk * s.chunk_keys * s.shape.hkv * ring_attention::kHeadDim;
  CopyJob j;
  j.src_k = (step == 0 ? s.prev_k : s.prev_stage + (size_t)(step % 2) * 2 * n) + off;
  j.src_v = (step == 0 ? s.prev_v : s.prev_stage + (size_t)(step % 2) * 2 * n + n) + off;
  j.dst_k = stage_k(c, step + 1) + off;
  j.dst_v = stage_k(c, step + 1) + n + off;
  j.bytes = (size_t)s.chunk_keys * s.shape.hkv * ring_attention::kHeadDim * 2;
  if (step > 0) {
    j.wait_prev = s.flags + flag_slot(s, kPrevLanded, step - 1, chunk);
    j.wait_next = s.flags + flag_slot(s, kNextLanded, step - 1, chunk);
    if (kMover == Mover::Companion) j.wait_own = s.flags + flag_slot(s, kComputed, step - 1, chunk);
  }
  j.landed = s.flags + flag_slot(s, kLanded, step, chunk);
  j.tell_next = s.next_flags + flag_slot(s, kPrevLanded, step, chunk);
  j.tell_prev = s.prev_flags + flag_slot(s, kNextLanded, step, chunk);
  return j;
}

// Nccl: unit (step, chunk) as one group (send what this rank holds to r + 1, receive from r - 1).
void nccl_unit(Context& c, cudaStream_t stream, int step, int chunk) {
  State& s = st(c);
  const size_t n = s.shape.kv_elems(), cn = (size_t)s.chunk_keys * s.shape.hkv * ring_attention::kHeadDim, off = (size_t)chunk * cn;
  const int next = (c.rank + 1) % c.world, prev = (c.rank + c.world - 1) % c.world;
  bf16* recv = stage_k(c, step + 1);
  BRAID_NCCL(ncclGroupStart());
  BRAID_NCCL(ncclSend(held_k(c, step) + off, cn, ncclBfloat16, next, c.comm, stream));
  BRAID_NCCL(ncclSend(held_v(c, step) + off, cn, ncclBfloat16, next, c.comm, stream));
  BRAID_NCCL(ncclRecv(recv + off, cn, ncclBfloat16, prev, c.comm, stream));
  BRAID_NCCL(ncclRecv(recv + n + off, cn, ncclBfloat16, prev, c.comm, stream));
  BRAID_NCCL(ncclGroupEnd());
}

// CopyEngine: unit (step, chunk) on the comm stream, ordered by flags and the computed event.
void copy_engine_unit(Context& c, int step, int chunk) {
  State& s = st(c);
  const uint32_t epoch = c.iteration + 1;
  const CopyJob j = copy_job(c, step, chunk);
  if (step > 0) {
    BRAID_CUDA(cudaStreamWaitEvent(s.comm, s.computed_ev[landed_slot(step - 1, chunk)], 0));
    s.memops->wait_geq(s.comm, j.wait_prev, landed_target(epoch));
    s.memops->wait_geq(s.comm, j.wait_next, landed_target(epoch));
  }
  BRAID_CUDA(cudaMemcpyAsync(j.dst_k, j.src_k, j.bytes, cudaMemcpyDefault, s.comm));
  BRAID_CUDA(cudaMemcpyAsync(j.dst_v, j.src_v, j.bytes, cudaMemcpyDefault, s.comm));
  uint32_t* const flags[3] = {j.landed, j.tell_next, j.tell_prev};
  for (uint32_t* f : flags) s.memops->write(s.comm, f, epoch);
}

// Queries this rank computes: its own block, or (zig-zag) its first half and the mirror's second.
Positions query_positions(Context& c) {
  const State& s = st(c);
  return s.zigzag ? ring_attention::zigzag_positions(c.rank, s.shape) : ring_attention::block_positions(c.rank, s.shape);
}

// Zig-zag: q_zz = [own first half | mirror's second half] (and, at the end, the reverse for out).
void swap_halves(Context& c, cudaStream_t stream, const bf16* mine, bf16* into, const bf16* keep_from, bf16* keep_to) {
  const size_t half = st(c).shape.q_elems() / 2;
  const int mirror = ring_attention::mirror_of(c.rank, c.world);
  BRAID_CUDA(cudaMemcpyAsync(keep_to, keep_from, half * 2, cudaMemcpyDeviceToDevice, stream));
  if (mirror == c.rank) {
    BRAID_CUDA(cudaMemcpyAsync(into, mine, half * 2, cudaMemcpyDeviceToDevice, stream));
    return;
  }
  BRAID_NCCL(ncclGroupStart());
  BRAID_NCCL(ncclSend(mine, half, ncclBfloat16, mirror, c.comm, stream));
  BRAID_NCCL(ncclRecv(into, half, ncclBfloat16, mirror, c.comm, stream));
  BRAID_NCCL(ncclGroupEnd());
}

// The kernel of unit (step, chunk) on the block held at that step; FusedCtas also pulls the next
// step's chunk in the same launch.
void compute_unit(Context& c, cudaStream_t stream, int step, int chunk, bool first, bool last) {
  State& s = st(c);
  const Shape& sh = s.shape;
  const size_t off = (size_t)chunk * s.chunk_keys * sh.hkv * ring_attention::kHeadDim;
  const int owner = (c.rank - step + c.world) % c.world;
  const Positions kp = ring_attention::contiguous_positions(owner * sh.local() + chunk * s.chunk_keys, s.chunk_keys);
  const bf16* q = s.zigzag ? c.buffer("q_zz").as<bf16>() : c.buffer("q").as<bf16>();
  BlockArgs a = ring_attention::block_args(sh, q, held_k(c, step) + off, held_v(c, step) + off, s.chunk_keys, query_positions(c), kp);
  a.o_acc = c.buffer("o_acc").as<float>();
  a.m = c.buffer("row_max").as<float>();
  a.l = c.buffer("row_sum").as<float>();
  a.out = s.zigzag ? c.buffer("out_zz").as<bf16>() : c.buffer("out").as<bf16>();
  a.first = first;
  a.finalize = last;
  if constexpr (kOverlap && kMover == Mover::FusedCtas) {
    ring_attention::check_block_args(a);
    const bool moves = step + 1 < c.world;
    const CopyJob job = moves ? copy_job(c, step, chunk) : CopyJob{};
    const int copy_ctas = moves ? kCommCtas : 0;
    const int tiles = sh.local() / ring_attention::kBlockM * ring_attention::kQueryHeads;
    if (sh.causal) launch_fused<true>(a, job, copy_ctas, tiles, c.iteration + 1, stream);
    else launch_fused<false>(a, job, copy_ctas, tiles, c.iteration + 1, stream);
  } else {
    ring_attention::launch_attention_block(a, sh.causal, stream);
  }
}

// Whether every query this rank computes is masked from chunk (step, chunk) (causal only).
bool masked(Context& c, int step, int chunk) {
  const State& s = st(c);
  if (!s.shape.causal) return false;
  const Positions qp = query_positions(c);
  const int q_last = qp.global(s.shape.local() - 1) > qp.global(qp.len0 - 1) ? qp.global(s.shape.local() - 1) : qp.global(qp.len0 - 1);
  const int owner = (c.rank - step + c.world) % c.world;
  return owner * s.shape.local() + chunk * s.chunk_keys > q_last;
}

void run(Context& c, cudaStream_t stream) {
  State& s = st(c);
  const int P = c.world;
  const uint32_t epoch = c.iteration + 1;
  if (s.zigzag) swap_halves(c, stream, c.buffer("q").as<bf16>() + s.shape.q_elems() / 2, c.buffer("q_zz").as<bf16>() + s.shape.q_elems() / 2,
                            c.buffer("q").as<bf16>(), c.buffer("q_zz").as<bf16>());
  // Which kernels run: all, or (kSkipMasked) the chunks some query sees; the first initializes the
  // state and the last finalizes.
  std::vector<char> runs((size_t)units(s), 1);
  if (kSkipMasked)
    for (int step = 0; step < P; ++step)
      for (int ch = 0; ch < kChunks; ++ch) runs[landed_slot(step, ch)] = !masked(c, step, ch);
  int first_unit = -1, last_unit = -1;
  for (int u = 0; u < units(s); ++u)
    if (runs[(size_t)u]) {
      if (first_unit < 0) first_unit = u;
      last_unit = u;
    }
  if constexpr (kOverlap) {
    BRAID_CUDA(cudaEventRecord(s.fork, stream));
    BRAID_CUDA(cudaStreamWaitEvent(s.comm, s.fork, 0));
  }
  if constexpr (kOverlap && kMover == Mover::Companion) {
    // Launched before the first attention kernel, so its CTAs hold their SMs first.
    if (s.job_count > 0) launch_companion<>(s.jobs, s.job_count, epoch, s.comm);
  }
  for (int step = 0; step < P; ++step)
    for (int ch = 0; ch < kChunks; ++ch) {
      const size_t u = landed_slot(step, ch);
      const bool moves = step + 1 < P;
      // The transfer of this unit (the next step's chunk) is issued before its kernel.
      if (moves && kSchedule == Schedule::Serial) nccl_unit(c, stream, step, ch);
      if constexpr (kOverlap && kMover == Mover::Nccl) {
        if (moves) {
          if (step > 0) BRAID_CUDA(cudaStreamWaitEvent(s.comm, s.computed_ev[landed_slot(step - 1, ch)], 0));
          nccl_unit(c, s.comm, step, ch);
          BRAID_CUDA(cudaEventRecord(s.landed_ev[u], s.comm));
        }
      }
      if constexpr (kOverlap && kMover == Mover::CopyEngine) {
        if (moves) {
          copy_engine_unit(c, step, ch);
          BRAID_CUDA(cudaEventRecord(s.landed_ev[u], s.comm));
        }
      }
      // This unit's kernel, once the chunk it reads has landed.
      if (kOverlap && step > 0) {
        if (kMover == Mover::Nccl || kMover == Mover::CopyEngine)
          BRAID_CUDA(cudaStreamWaitEvent(stream, s.landed_ev[landed_slot(step - 1, ch)], 0));
        else if (kMover == Mover::Companion)
          s.memops->wait_geq(stream, s.flags + flag_slot(s, kLanded, step - 1, ch), landed_target(epoch));
        // FusedCtas: the previous launch on this stream pulled it.
      }
      if (runs[u]) {
        compute_unit(c, stream, step, ch, (int)u == first_unit, (int)u == last_unit);
      } else if constexpr (kOverlap && kMover == Mover::FusedCtas) {
        // A skipped chunk's launch still carries the next pull: copy CTAs only.
        if (moves) launch_fused<false>(BlockArgs{}, copy_job(c, step, ch), kCommCtas, 0, epoch, stream);
      }
      if constexpr (kOverlap && kMover != Mover::FusedCtas) {
        if constexpr (kMover == Mover::Companion) s.memops->write(stream, s.flags + flag_slot(s, kComputed, step, ch), epoch);
        else BRAID_CUDA(cudaEventRecord(s.computed_ev[u], stream));
      }
    }
  if (s.zigzag) swap_halves(c, stream, c.buffer("out_zz").as<bf16>() + s.shape.q_elems() / 2, c.buffer("out").as<bf16>() + s.shape.q_elems() / 2,
                            c.buffer("out_zz").as<bf16>(), c.buffer("out").as<bf16>());
  if constexpr (kOverlap) {
    BRAID_CUDA(cudaEventRecord(s.join, s.comm));
    BRAID_CUDA(cudaStreamWaitEvent(stream, s.join, 0));
  }
}

void teardown(Context& c) {
  auto* s = static_cast<State*>(c.candidate_state);
  if (s == nullptr) return;
  cudaDeviceSynchronize();
  if (s->comm != nullptr) cudaStreamDestroy(s->comm);
  cudaEventDestroy(s->fork);
  cudaEventDestroy(s->join);
  for (auto e : s->landed_ev) cudaEventDestroy(e);
  for (auto e : s->computed_ev) cudaEventDestroy(e);
  if (s->jobs != nullptr) cudaFree(s->jobs);
  delete s;
  c.candidate_state = nullptr;
}
// EVOLVE-BLOCK-END

}  // namespace

int main(int argc, char** argv) {
  return harness_main(argc, argv, ring_attention::make_workload(), Candidate{requirements, setup, run, teardown});
}
