// GEMM + AllGather, annotated for `braid evolve`. C_r = A_full * B_r where A (M x K) is sharded by
// rows over the ranks (see gemm_allgather.cuh for buffers, shapes, reference, baseline and bound).
// The defaults reproduce seed.cu: ncclAllGather into a cudaMalloc buffer, then one GEMM, one stream.
//
// Three EVOLVE blocks hold the whole strategy: "knobs" (the enums and settings below), "kernels"
// (the chunk layout and the SM copy kernel) and "host" (setup, the transfer engines, readiness
// waits, run, teardown). All three may be rewritten: new kernels, engines and schedules included;
// the knobs only pick among the code paths written here. Frozen: the includes and main().
//
// The knobs span what a GPU engineer would try:
//   kSchedule      Serial: gather everything, then multiply. Overlap: the local shard's rows are
//                  multiplied straight from "a" (no copy) while remote rows arrive; each remote
//                  chunk is multiplied as soon as it has landed.
//   kEngine        how remote rows move: NcclPlain (ncclAllGather, cudaMalloc buffer),
//                  NcclWindow (ncclAllGather between symmetric windows), NcclZeroCta (NCCL's
//                  zero-CTA policy: copy engines, no SMs), CopyEngine (cudaMemcpyAsync over peer
//                  addresses), LsaKernel (SM copies over NVLink loads/stores, kCommCtas CTAs),
//                  PeerInPlace (no copy: cuBLAS reads the peer's shard where it lies).
//   kDirection     CopyEngine / LsaKernel: Push (write my rows into peers) or Pull (read theirs).
//   kChunks        Overlap: each shard moves in kChunks row chunks; chunk i+1 moves while chunk i
//                  multiplies. Readiness per chunk: stream events (NCCL, CE pull), or flags in a
//                  symmetric window written by the sender and waited on the device (kReadyWait).
//   kLocalFirst    Overlap: multiply the local shard before (true) or after the remote chunks.
//   kGemmSmMargin  SMs withheld from cuBLAS (cublasSetSmCountTarget) while communication is in
//                  flight, so an SM-driven transfer is not starved; the last GEMM gets every SM.
//   kCommHighPriority  the communication stream gets the highest stream priority.
//   kCommCtas      LsaKernel: CTAs of the copy kernel (512 threads each).
//   kReadyWait     flag engines: StreamMemop (cuStreamWaitValue32, no SM) or SpinKernel (a
//                  one-thread kernel spinning on the flag).
//   kGemmEnqueuedFirst  Overlap with the local shard first: the host enqueues the local GEMM
//                  before the communication's calls, so the GPU starts computing at once instead
//                  of idling while the host issues handshakes and copies (several microseconds
//                  per call: a few percent of a 0.2 ms GEMM).
// Handshakes that keep every program correct outside this harness too: a push first waits until
// every peer is ready to receive (its previous round is consumed); a pull (and an in-place read)
// ends by waiting until every peer has finished reading this rank's shard.
#include <cublas_v2.h>

#include <memory>

#include "braid/harness.cuh"
#include "gemm_allgather.cuh"

using namespace braid::dev;
using gemm_allgather::gemm_rows;
using gemm_allgather::Shape;

// EVOLVE-BLOCK-START knobs
enum class Schedule { Serial, Overlap };
enum class Engine { NcclPlain, NcclWindow, NcclZeroCta, CopyEngine, LsaKernel, PeerInPlace };
enum class Direction { Push, Pull };
enum class ReadyWait { StreamMemop, SpinKernel };

constexpr Schedule kSchedule = Schedule::Serial;  // braid:knob Schedule::Serial|Schedule::Overlap
constexpr Engine kEngine = Engine::NcclPlain;  // braid:knob Engine::NcclPlain|Engine::NcclWindow|Engine::NcclZeroCta|Engine::CopyEngine|Engine::LsaKernel|Engine::PeerInPlace
constexpr Direction kDirection = Direction::Push;  // braid:knob Direction::Push|Direction::Pull
constexpr int kChunks = 1;  // braid:knob 1|2|4|8|16
constexpr bool kLocalFirst = true;  // braid:knob
constexpr int kGemmSmMargin = 0;  // braid:knob 0|8|16|32|66
constexpr bool kCommHighPriority = false;  // braid:knob
constexpr int kCommCtas = 32;  // braid:knob 8|16|32|66|132
constexpr ReadyWait kReadyWait = ReadyWait::StreamMemop;  // braid:knob ReadyWait::StreamMemop|ReadyWait::SpinKernel
constexpr bool kGemmEnqueuedFirst = false;  // braid:knob
// Knobs that a schedule or engine ignores stay at their defaults (no duplicate programs):
// braid:require kSchedule == Schedule::Overlap || (kChunks == 1 && kGemmSmMargin == 0 && kLocalFirst == true && kCommHighPriority == false)
// braid:require kEngine == Engine::CopyEngine || kEngine == Engine::LsaKernel || kDirection == Direction::Push
// braid:require kEngine == Engine::LsaKernel || kCommCtas == 32
// braid:require kReadyWait == ReadyWait::StreamMemop || (kSchedule == Schedule::Overlap && (kEngine == Engine::LsaKernel || (kEngine == Engine::CopyEngine && kDirection == Direction::Push)))
// braid:require kEngine != Engine::PeerInPlace || (kSchedule == Schedule::Serial)
// braid:require kGemmEnqueuedFirst == false || (kSchedule == Schedule::Overlap && kLocalFirst == true)
// EVOLVE-BLOCK-END

// EVOLVE-BLOCK-START kernels
constexpr int kCopyThreads = 512;

// Rows [row0, row0 + len) of every shard form chunk c; in "gathered" chunk c of source p starts at
// row P*row0 + p*len (chunk-major, so one ncclAllGather per chunk fills it; with one chunk this is
// the plain A_full layout).
struct ChunkRows {
  int64_t row0, len;
};
__host__ __device__ inline ChunkRows chunk_rows(int64_t shard_rows, int chunks, int c) {
  const int64_t base = (shard_rows + chunks - 1) / chunks;
  const int64_t row0 = base * c < shard_rows ? base * c : shard_rows;
  const int64_t end = row0 + base < shard_rows ? row0 + base : shard_rows;
  return {row0, end - row0};
}
__host__ __device__ inline int64_t gathered_row(int64_t shard_rows, int chunks, int world, int c, int p) {
  const ChunkRows r = chunk_rows(shard_rows, chunks, c);
  return (int64_t)world * r.row0 + (int64_t)p * r.len;
}

// Flag window layout (uint32): ready[chunk][source] counters, then handshake[source].
__host__ __device__ inline size_t ready_slot(int world, int c, int p) { return (size_t)c * world + p; }
__host__ __device__ inline size_t handshake_slot(int world, int chunks, int p) { return (size_t)chunks * world + p; }
// SM-driven LSA transfer of every chunk in order. All CTAs share a chunk (a contiguous slice each);
// after its slice a CTA adds 1 to the chunk's ready counter (release, system scope) at the
// receiver, so the chunk has landed once the counter reaches epoch * gridDim.x.
template <bool kPullRows>
__global__ void __launch_bounds__(kCopyThreads) lsa_copy_kernel(ncclDevComm dc, ncclWindow_t a_win, ncclWindow_t gathered_win,
                                                                ncclWindow_t flag_win, int64_t shard_rows, int64_t K, int chunks) {
  const int me = dc.lsaRank, n = dc.lsaSize;
  for (int c = 0; c < chunks; ++c) {
    const ChunkRows r = chunk_rows(shard_rows, chunks, c);
    const size_t bytes = (size_t)r.len * (size_t)K * 2;
    const size_t slice = ((bytes + gridDim.x - 1) / gridDim.x + 15) / 16 * 16;
    const size_t begin = slice * blockIdx.x < bytes ? slice * blockIdx.x : bytes;
    const size_t end = begin + slice < bytes ? begin + slice : bytes;
    if constexpr (kPullRows) {
      for (int k = 1; k < n; ++k) {
        const int p = (me + k) % n;
        const char* src = static_cast<const char*>(ncclGetLsaPointer(a_win, (size_t)r.row0 * K * 2, p));
        char* dst = static_cast<char*>(ncclGetLocalPointer(gathered_win, (size_t)gathered_row(shard_rows, chunks, n, c, p) * K * 2));
        copy_range<Issuer::Cta, 4>(dst + begin, src + begin, end - begin);
        __syncthreads();
        if (threadIdx.x == 0)
          cuda::atomic_ref<uint32_t, cuda::thread_scope_system>(*static_cast<uint32_t*>(ncclGetLocalPointer(flag_win, ready_slot(n, c, p) * 4)))
              .fetch_add(1u, cuda::memory_order_release);
      }
    } else {
      const char* src = static_cast<const char*>(ncclGetLocalPointer(a_win, (size_t)r.row0 * K * 2));
      char* dsts[kMaxLsaPeers];
      int nd = 0;
      for (int k = 1; k < n; ++k)
        dsts[nd++] = static_cast<char*>(ncclGetLsaPointer(gathered_win, (size_t)gathered_row(shard_rows, chunks, n, c, me) * K * 2, (me + k) % n)) + begin;
      copy_range_multi<Issuer::Cta, 4>(dsts, nd, src + begin, end - begin);
      __syncthreads();
      if (threadIdx.x == 0)
        for (int k = 1; k < n; ++k)
          cuda::atomic_ref<uint32_t, cuda::thread_scope_system>(*static_cast<uint32_t*>(ncclGetLsaPointer(flag_win, ready_slot(n, c, me) * 4, (me + k) % n)))
              .fetch_add(1u, cuda::memory_order_release);
    }
  }
}

// EVOLVE-BLOCK-END

namespace {

// EVOLVE-BLOCK-START host
constexpr bool kOverlap = kSchedule == Schedule::Overlap;
constexpr int kChunkCount = kOverlap ? kChunks : 1;
constexpr bool kNccl = kEngine == Engine::NcclPlain || kEngine == Engine::NcclWindow || kEngine == Engine::NcclZeroCta;
constexpr bool kPull = kDirection == Direction::Pull;
// Engines whose readiness is a flag written by the sender (a counter per chunk and source).
constexpr bool kFlagReady = kEngine == Engine::LsaKernel || (kEngine == Engine::CopyEngine && !kPull);
// Copy-engine pulls land source by source, so each (chunk, source) gets its own event and the GEMM
// of a source's rows starts as soon as they land (it matters from 3 ranks on); an NCCL all-gather
// lands a chunk from every source at once.
constexpr bool kEventPerSource = kEngine == Engine::CopyEngine && kPull;

inline size_t done_slot(int world, int c, int p) { return kEventPerSource ? ready_slot(world, c, p) : (size_t)c; }

// The k-th source (k = 1..P-1) whose rows reach this rank, in the order they are sent: a rank
// pushes to rank+1 first, so pushed rows come from rank-1 first; pulled ones from rank+1 first.
inline int source_at(int rank, int k, int world) {
  return kEngine == Engine::CopyEngine && !kPull ? (rank - k + world) % world : (rank + k) % world;
}


struct State {
  cublasHandle_t overlap_handle = nullptr;  // GEMMs that run while data still moves
  cublasHandle_t tail_handle = nullptr;     // the last GEMM: every SM
  cudaStream_t comm = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
  std::vector<cudaEvent_t> chunk_done;
  std::unique_ptr<ZeroCtaComm> zero_cta;
  std::unique_ptr<StreamMemOps> memops;
  std::vector<void*> peer_a, peer_gathered, peer_flags;  // LSA peers' addresses, host-usable
  uint32_t* flags = nullptr;                               // this rank's flag window
};

State& st(Context& c) { return *static_cast<State*>(c.candidate_state); }

Requirements requirements(const Problem&) { return {}; }

void setup(Context& c) {
  auto* s = new State;
  c.candidate_state = s;
  const int64_t P = c.world;
  const size_t gathered_bytes = gemm_allgather::shape(c).gathered_elems() * 2;
  if constexpr (kEngine == Engine::NcclPlain) c.alloc("gathered", gathered_bytes, Role::Receive, DType::BF16);
  else c.alloc_window("gathered", gathered_bytes, Role::Receive, DType::BF16);
  Buffer& flags = c.alloc_window("flags", ((size_t)kChunkCount * P + P) * 4, Role::State, DType::U32);
  s->flags = flags.as<uint32_t>();
  if constexpr (!kNccl) {
    if (c.dev_comm.lsaSize != c.world) throw DeviceError("this engine needs every rank in one NVLink (LSA) domain");
    s->peer_a = host_lsa_pointers(c.buffer("a").win, 0, (int)P, c.stream, c.dev_comm.lsaRank);
    s->peer_gathered = host_lsa_pointers(c.buffer("gathered").win, 0, (int)P, c.stream, c.dev_comm.lsaRank);
    s->peer_flags = host_lsa_pointers(flags.win, 0, (int)P, c.stream, c.dev_comm.lsaRank);
    s->memops = std::make_unique<StreamMemOps>();
  }
  if constexpr (kEngine == Engine::NcclZeroCta) {
    s->zero_cta = std::make_unique<ZeroCtaComm>(c.comm, c.rank);
    const Buffer& a = c.buffer("a");
    s->zero_cta->register_window(a.ptr, round_up(a.bytes, 4096));
    s->zero_cta->register_window(c.buffer("gathered").ptr, round_up(gathered_bytes, 4096));
  }
  GAG_CUBLAS(cublasCreate(&s->overlap_handle));
  GAG_CUBLAS(cublasCreate(&s->tail_handle));
  if constexpr (kGemmSmMargin > 0) GAG_CUBLAS(cublasSetSmCountTarget(s->overlap_handle, c.sm_count - kGemmSmMargin));
  if constexpr (kOverlap) {
    int least = 0, greatest = 0;
    BRAID_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    BRAID_CUDA(cudaStreamCreateWithPriority(&s->comm, cudaStreamNonBlocking, kCommHighPriority ? greatest : least));
  } else {
    s->comm = nullptr;  // Serial: everything on the timed stream
  }
  BRAID_CUDA(cudaEventCreateWithFlags(&s->fork, cudaEventDisableTiming));
  BRAID_CUDA(cudaEventCreateWithFlags(&s->join, cudaEventDisableTiming));
  s->chunk_done.resize((size_t)kChunkCount * (size_t)P);
  for (auto& e : s->chunk_done) BRAID_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
}

// Every peer learns that this rank reached this point of round `epoch`; returns (on the stream)
// once every peer reached it too.
void handshake(Context& c, cudaStream_t stream, uint32_t epoch) {
  State& s = st(c);
  const int P = c.world;
  for (int p = 0; p < P; ++p)
    if (p != c.rank) s.memops->write(stream, static_cast<uint32_t*>(s.peer_flags[(size_t)p]) + handshake_slot(P, kChunkCount, c.rank), epoch);
  for (int p = 0; p < P; ++p)
    if (p != c.rank) s.memops->wait_geq(stream, s.flags + handshake_slot(P, kChunkCount, p), epoch);
}

// Issues the transfer of every chunk on `stream` with its readiness signal.
void move_rows(Context& c, cudaStream_t stream, uint32_t epoch) {
  State& s = st(c);
  const Buffer& a = c.buffer("a");
  const Buffer& gathered = c.buffer("gathered");
  const Shape sh = gemm_allgather::shape(c);
  const int64_t P = c.world, Ms = sh.shard_rows(), K = sh.k;
  const size_t row_bytes = (size_t)K * 2;
  if constexpr (kNccl) {
    ncclComm_t comm = kEngine == Engine::NcclZeroCta ? s.zero_cta->get() : c.comm;
    for (int ch = 0; ch < kChunkCount; ++ch) {
      const ChunkRows r = chunk_rows(Ms, kChunkCount, ch);
      BRAID_NCCL(ncclAllGather(a.as<char>() + (size_t)r.row0 * row_bytes, gathered.as<char>() + (size_t)P * r.row0 * row_bytes,
                               (size_t)r.len * (size_t)K, ncclBfloat16, comm, stream));
      BRAID_CUDA(cudaEventRecord(s.chunk_done[done_slot((int)P, ch, 0)], stream));
    }
  } else if constexpr (kEngine == Engine::CopyEngine) {
    if constexpr (!kPull) handshake(c, stream, epoch);
    for (int ch = 0; ch < kChunkCount; ++ch) {
      const ChunkRows r = chunk_rows(Ms, kChunkCount, ch);
      for (int k = 1; k < P; ++k) {
        const int p = (int)((c.rank + k) % P);
        if constexpr (kPull) {
          BRAID_CUDA(cudaMemcpyAsync(gathered.as<char>() + (size_t)gathered_row(Ms, kChunkCount, (int)P, ch, p) * row_bytes,
                                     static_cast<char*>(s.peer_a[(size_t)p]) + (size_t)r.row0 * row_bytes, (size_t)r.len * row_bytes,
                                     cudaMemcpyDefault, stream));
          BRAID_CUDA(cudaEventRecord(s.chunk_done[done_slot((int)P, ch, p)], stream));
        } else {
          BRAID_CUDA(cudaMemcpyAsync(static_cast<char*>(s.peer_gathered[(size_t)p]) + (size_t)gathered_row(Ms, kChunkCount, (int)P, ch, c.rank) * row_bytes,
                                     a.as<char>() + (size_t)r.row0 * row_bytes, (size_t)r.len * row_bytes, cudaMemcpyDefault, stream));
          s.memops->write(stream, static_cast<uint32_t*>(s.peer_flags[(size_t)p]) + ready_slot((int)P, ch, c.rank), epoch);
        }
      }
    }
    if constexpr (kPull) handshake(c, stream, epoch);
  } else if constexpr (kEngine == Engine::LsaKernel) {
    if constexpr (!kPull) handshake(c, stream, epoch);
    lsa_copy_kernel<kPull><<<kCommCtas, kCopyThreads, 0, stream>>>(c.dev_comm, a.win, gathered.win, c.buffer("flags").win, Ms, K, kChunkCount);
    BRAID_LAUNCHED();
    if constexpr (kPull) handshake(c, stream, epoch);
  }
}

// Makes `stream` wait until source p's chunk ch has landed in "gathered".
void wait_ready(Context& c, cudaStream_t stream, int ch, int p, uint32_t epoch) {
  State& s = st(c);
  if constexpr (kFlagReady) {
    const uint32_t target = kEngine == Engine::LsaKernel ? epoch * (uint32_t)kCommCtas : epoch;
    uint32_t* flag = s.flags + ready_slot(c.world, ch, p);
    if constexpr (kReadyWait == ReadyWait::StreamMemop) s.memops->wait_geq(stream, flag, target);
    else launch_wait_flag(stream, flag, target);
  } else if constexpr (!(kEngine == Engine::PeerInPlace)) {
    BRAID_CUDA(cudaStreamWaitEvent(stream, s.chunk_done[done_slot(c.world, ch, p)], 0));
  }
}

void run(Context& c, cudaStream_t stream) {
  State& s = st(c);
  const Shape sh = gemm_allgather::shape(c);
  const int64_t P = c.world, Ms = sh.shard_rows(), M = sh.m, N = sh.n, K = sh.k;
  const uint32_t epoch = c.iteration + 1;
  const auto* w = c.buffer("w").as<__nv_bfloat16>();
  auto* out = c.buffer("c").as<__nv_bfloat16>();
  const auto* a = c.buffer("a").as<__nv_bfloat16>();
  auto* gathered = c.buffer("gathered").as<__nv_bfloat16>();
  GAG_CUBLAS(cublasSetStream(s.overlap_handle, stream));
  GAG_CUBLAS(cublasSetStream(s.tail_handle, stream));

  if constexpr (kEngine == Engine::PeerInPlace) {
    // cuBLAS reads each peer's shard where it lies; the local one first or last.
    for (int k = 0; k < P; ++k) {
      const int p = (int)(kLocalFirst ? (c.rank + k) % P : (c.rank + k + 1) % P);
      const auto* rows = p == c.rank ? a : static_cast<const __nv_bfloat16*>(s.peer_a[(size_t)p]);
      gemm_rows(s.tail_handle, rows, Ms, w, out + (size_t)p * Ms * N, K, N);
    }
    handshake(c, stream, epoch);  // peers are done reading my shard
    return;
  }

  if constexpr (!kOverlap) {
    move_rows(c, stream, epoch);
    if constexpr (!kNccl)  // NCCL copies the local shard itself; the others move remote rows only
      BRAID_CUDA(cudaMemcpyAsync(gathered + (size_t)c.rank * Ms * K, a, (size_t)Ms * K * 2, cudaMemcpyDeviceToDevice, stream));
    for (int p = 0; p < P; ++p)
      if (p != c.rank) wait_ready(c, stream, 0, p, epoch);
    gemm_rows(s.tail_handle, gathered, M, w, out, K, N);
    return;
  }

  // Overlap: communication on its own stream, GEMMs on the timed stream.
  BRAID_CUDA(cudaEventRecord(s.fork, stream));
  if constexpr (kGemmEnqueuedFirst) gemm_rows(s.overlap_handle, a, Ms, w, out + (size_t)c.rank * Ms * N, K, N);
  BRAID_CUDA(cudaStreamWaitEvent(s.comm, s.fork, 0));
  move_rows(c, s.comm, epoch);
  const int remote_gemms = kChunkCount * (int)(P - 1);
  int done = 0;
  if constexpr (kLocalFirst && !kGemmEnqueuedFirst) gemm_rows(s.overlap_handle, a, Ms, w, out + (size_t)c.rank * Ms * N, K, N);
  for (int ch = 0; ch < kChunkCount; ++ch) {
    const ChunkRows r = chunk_rows(Ms, kChunkCount, ch);
    for (int k = 1; k < P; ++k) {
      const int p = source_at(c.rank, k, (int)P);
      wait_ready(c, stream, ch, p, epoch);
      ++done;
      const bool last = kLocalFirst && done == remote_gemms;
      gemm_rows(last ? s.tail_handle : s.overlap_handle, gathered + (size_t)gathered_row(Ms, kChunkCount, (int)P, ch, p) * K, r.len, w,
                out + ((size_t)p * Ms + (size_t)r.row0) * N, K, N);
    }
  }
  if constexpr (!kLocalFirst) gemm_rows(s.tail_handle, a, Ms, w, out + (size_t)c.rank * Ms * N, K, N);
  BRAID_CUDA(cudaEventRecord(s.join, s.comm));
  BRAID_CUDA(cudaStreamWaitEvent(stream, s.join, 0));
}

void teardown(Context& c) {
  auto* s = static_cast<State*>(c.candidate_state);
  if (s == nullptr) return;
  cudaDeviceSynchronize();
  s->zero_cta.reset();  // deregisters its windows before the harness frees the buffers
  cublasDestroy(s->overlap_handle);
  cublasDestroy(s->tail_handle);
  if (s->comm != nullptr) cudaStreamDestroy(s->comm);
  cudaEventDestroy(s->fork);
  cudaEventDestroy(s->join);
  for (auto e : s->chunk_done) cudaEventDestroy(e);
  delete s;
  c.candidate_state = nullptr;
}
// EVOLVE-BLOCK-END

}  // namespace

int main(int argc, char** argv) {
  return harness_main(argc, argv, gemm_allgather::make_workload(), Candidate{requirements, setup, run, teardown});
}
