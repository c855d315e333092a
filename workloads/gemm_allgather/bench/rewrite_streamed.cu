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
// A new schedule, Streamed: an SM pull kernel of its own (pull_shard_kernel) copies each shard,
// the local one included, into "gathered" on a high-priority stream, one source after another
// (this rank's first); the GEMM stream waits on each source's landed counter (a stream memory
// operation, no SM) and multiplies that source's rows at once. Serial keeps the host all-gather.
enum class Schedule { Serial, Streamed };
constexpr Schedule kSchedule = Schedule::Streamed;  // braid:knob Schedule::Serial|Schedule::Streamed
constexpr int kPullCtas = 16;  // braid:knob 8|16|32|66
constexpr bool kCommHighPriority = true;  // braid:knob
// braid:require kSchedule == Schedule::Streamed || (kPullCtas == 16 && kCommHighPriority == true)
// EVOLVE-BLOCK-END

// EVOLVE-BLOCK-START kernels
constexpr int kPullThreads = 256;

// Flag window layout (uint32): landed[source] counters, then handshake[source].
__host__ __device__ inline size_t landed_slot(int p) { return (size_t)p; }
__host__ __device__ inline size_t done_reading_slot(int world, int p) { return (size_t)world + p; }

// Copies n16 16-byte words from a peer's shard (an LSA address) into this rank's "gathered", CTAs
// striding over the words; then each CTA adds 1 to the source's landed counter (release, system
// scope), so the rows have landed once it reaches epoch * gridDim.x.
__global__ void __launch_bounds__(kPullThreads) pull_shard_kernel(const int4* __restrict__ src, int4* __restrict__ dst, size_t n16,
                                                                  uint32_t* landed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n16; i += (size_t)gridDim.x * blockDim.x) dst[i] = src[i];
  __syncthreads();
  if (threadIdx.x == 0) cuda::atomic_ref<uint32_t, cuda::thread_scope_system>(*landed).fetch_add(1u, cuda::memory_order_release);
}
// EVOLVE-BLOCK-END

namespace {

// EVOLVE-BLOCK-START host
constexpr bool kStreamed = kSchedule == Schedule::Streamed;

struct State {
  cublasHandle_t handle = nullptr;
  cudaStream_t comm = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
  std::unique_ptr<StreamMemOps> memops;
  std::vector<void*> peer_a, peer_flags;  // LSA peers' addresses, host-usable
  uint32_t* flags = nullptr;              // this rank's flag window
};

State& st(Context& c) { return *static_cast<State*>(c.candidate_state); }

Requirements requirements(const Problem&) { return {}; }

void setup(Context& c) {
  auto* s = new State;
  c.candidate_state = s;
  const int P = c.world;
  c.alloc_window("gathered", gemm_allgather::shape(c).gathered_elems() * 2, Role::Receive, DType::BF16);
  Buffer& flags = c.alloc_window("flags", (size_t)2 * P * 4, Role::State, DType::U32);
  s->flags = flags.as<uint32_t>();
  GAG_CUBLAS(cublasCreate(&s->handle));
  BRAID_CUDA(cudaEventCreateWithFlags(&s->fork, cudaEventDisableTiming));
  BRAID_CUDA(cudaEventCreateWithFlags(&s->join, cudaEventDisableTiming));
  if constexpr (kStreamed) {
    if (c.dev_comm.lsaSize != c.world) throw DeviceError("the Streamed schedule needs every rank in one NVLink (LSA) domain");
    s->peer_a = host_lsa_pointers(c.buffer("a").win, 0, P, c.stream, c.dev_comm.lsaRank);
    s->peer_flags = host_lsa_pointers(flags.win, 0, P, c.stream, c.dev_comm.lsaRank);
    s->memops = std::make_unique<StreamMemOps>();
    int least = 0, greatest = 0;
    BRAID_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    BRAID_CUDA(cudaStreamCreateWithPriority(&s->comm, cudaStreamNonBlocking, kCommHighPriority ? greatest : least));
  }
}

// Streamed: pulls every shard on the comm stream, multiplies each on `stream` once it has landed,
// and ends (on the comm stream, joined) once every peer has finished reading this rank's shard.
void run_streamed(Context& c, cudaStream_t stream) {
  State& s = st(c);
  const Shape sh = gemm_allgather::shape(c);
  const int P = c.world;
  const int64_t Ms = sh.shard_rows();
  const uint32_t epoch = c.iteration + 1;
  auto* gathered = c.buffer("gathered").as<__nv_bfloat16>();
  const auto* w = c.buffer("w").as<__nv_bfloat16>();
  auto* out = c.buffer("c").as<__nv_bfloat16>();
  const size_t shard_words = (size_t)Ms * (size_t)sh.k * 2 / 16;  // K % 8 == 0: whole 16-byte words
  BRAID_CUDA(cudaEventRecord(s.fork, stream));
  BRAID_CUDA(cudaStreamWaitEvent(s.comm, s.fork, 0));
  for (int k = 0; k < P; ++k) {
    const int p = (c.rank + k) % P;
    pull_shard_kernel<<<kPullCtas, kPullThreads, 0, s.comm>>>(static_cast<const int4*>(s.peer_a[(size_t)p]),
                                                             reinterpret_cast<int4*>(gathered + (size_t)p * Ms * sh.k), shard_words,
                                                             s.flags + landed_slot(p));
    BRAID_LAUNCHED();
  }
  for (int p = 0; p < P; ++p)  // peers learn that this rank has read their shards
    if (p != c.rank) s.memops->write(s.comm, static_cast<uint32_t*>(s.peer_flags[(size_t)p]) + done_reading_slot(P, c.rank), epoch);
  for (int p = 0; p < P; ++p)
    if (p != c.rank) s.memops->wait_geq(s.comm, s.flags + done_reading_slot(P, p), epoch);
  GAG_CUBLAS(cublasSetStream(s.handle, stream));
  for (int k = 0; k < P; ++k) {
    const int p = (c.rank + k) % P;
    s.memops->wait_geq(stream, s.flags + landed_slot(p), epoch * (uint32_t)kPullCtas);
    gemm_rows(s.handle, gathered + (size_t)p * Ms * sh.k, Ms, w, out + (size_t)p * Ms * sh.n, sh.k, sh.n);
  }
  BRAID_CUDA(cudaEventRecord(s.join, s.comm));
  BRAID_CUDA(cudaStreamWaitEvent(stream, s.join, 0));
}

void run(Context& c, cudaStream_t stream) {
  if constexpr (kStreamed) {
    run_streamed(c, stream);
  } else {
    State& s = st(c);
    const Shape sh = gemm_allgather::shape(c);
    const Buffer& a = c.buffer("a");
    BRAID_NCCL(ncclAllGather(a.ptr, c.buffer("gathered").ptr, a.count, ncclBfloat16, c.comm, stream));
    GAG_CUBLAS(cublasSetStream(s.handle, stream));
    gemm_rows(s.handle, c.buffer("gathered").as<__nv_bfloat16>(), sh.m, c.buffer("w").as<__nv_bfloat16>(), c.buffer("c").as<__nv_bfloat16>(),
              sh.k, sh.n);
  }
}

void teardown(Context& c) {
  auto* s = static_cast<State*>(c.candidate_state);
  if (s == nullptr) return;
  cudaDeviceSynchronize();
  cublasDestroy(s->handle);
  if (s->comm != nullptr) cudaStreamDestroy(s->comm);
  cudaEventDestroy(s->fork);
  cudaEventDestroy(s->join);
  delete s;
  c.candidate_state = nullptr;
}
// EVOLVE-BLOCK-END

}  // namespace

int main(int argc, char** argv) {
  return harness_main(argc, argv, gemm_allgather::make_workload(), Candidate{requirements, setup, run, teardown});
}
