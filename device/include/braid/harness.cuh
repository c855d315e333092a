// braid/harness.cuh -- the frozen evaluation harness: every score it writes can be trusted.
//
// CONTRACT (shown to the LLM as documentation)
// A program is: a frozen Workload (buffers, reference, baseline, compute alone, communication
// alone) + a Candidate that the search evolves, four functions inside EVOLVE blocks:
//   Requirements requirements(const Problem&)  what the device communicator must provide
//                                              (barrier counts sized from the launch, GIN signals,
//                                              an extra resource buffer). multimem is rejected;
//                                              asking for GIN where Problem::platform.gin is false
//                                              fails, so pick the backend with effective_backend().
//   void setup(Context&)                       once per size, untimed: streams (ctx.new_stream()),
//                                              windows (ctx.alloc_window, same order on all ranks),
//                                              plain buffers (ctx.alloc), state (Role::State).
//   void run(Context&, cudaStream_t stream)    the timed work. Everything it launches must be done
//                                              when the harness's device sync returns; streams
//                                              from ctx.new_stream() are joined automatically,
//                                              work left on other streams is still timed.
//   void teardown(Context&)                    release what setup made (ctx buffers are freed by
//                                              the harness).
// The harness (frozen):
//   * fresh random inputs for EVERY run() call (warm-up and timed, every phase), generated on the
//     device from a secret drawn after setup() (--seed mixed with OS entropy), the call and the
//     rank: no two calls see the same inputs, so caching results or precomputing in setup() fails;
//   * before every call (untimed) the inputs are written and Receive, Intermediate and Output
//     buffers are poisoned (0xFF bytes: NaN for floats); State buffers are zeroed once and never
//     poisoned;
//   * canary bands (64 KiB of 0xA5) before and after every buffer, checked after the runs;
//   * per call: device idle, cross-rank barrier, CUDA events around run(), then a device sync
//     (work still running after the end event is timed too); the host clock times the same
//     call; the makespan is the slowest rank's time; the figure is the median over iterations;
//   * EVERY call (warm-up included) is verified, untimed, element by element on every rank
//     against the reference computed by another route on the same inputs, |got-exp| <= atol +
//     rtol*|exp|, NaN never passes; one bad call fails the candidate, naming rank, iteration,
//     buffer, first bad index, expected and got;
//   * baseline (host-driven), compute alone and communication alone are timed in the same run;
//     combined_score = geometric mean over sizes of baseline_ms / candidate_ms;
//   * plausibility: a size faster than 0.9 x max(compute alone, communication alone), or whose
//     CUDA-event and host-clock times disagree, is re-measured under a strict protocol (candidate
//     alone, host clock, which is then the figure); still implausible -> public "plausibility":
//     "flagged" with "plausibility_reason"; if the clocks still disagree, or device work the
//     candidate left running slowed the baseline or the bound, the score is withheld
//     (combined_score 0);
//   * NVLink multicast is off (NCCL_NVLS_ENABLE=0, lsaMultimem=false).
// Command line (filled by braid from workload.yaml):
//   --mode verify|bench  --size N (repeatable, or --sizes a,b,c)  --seed S  --rtol R --atol A
//   --warmup W --iters N --results_dir D (or env BRAID_METRICS_PATH); --input_sets K is accepted
//   and ignored (every call has its own inputs)
// Results: rank 0 writes D/correct.json {"correct","error"} and, in bench mode, D/metrics.json
// {"combined_score","public","private","text_feedback"}.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "braid/comm.cuh"
#include "braid/runtime.cuh"

namespace braid::dev {

// ---------------------------------------------------------------------------------------------
// Types shared by workloads and candidates
// ---------------------------------------------------------------------------------------------

enum class DType { F32, BF16, F16, I32, U32, U8 };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: case DType::I32: case DType::U32: return 4;
    case DType::BF16: case DType::F16: return 2;
    case DType::U8: return 1;
  }
  return 1;
}
inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::BF16: return "bf16";
    case DType::F16: return "f16";
    case DType::I32: return "i32";
    case DType::U32: return "u32";
    case DType::U8: return "u8";
  }
  return "?";
}

// Input: fresh random values before every run() call. Receive/Intermediate/Output: poisoned
// before every call.
// Output: verified. State: zeroed once (flags, epochs), never poisoned.
enum class Role { Input, Receive, Intermediate, Output, State };

struct BufferSpec {
  std::string name;
  Role role = Role::Input;
  DType dtype = DType::F32;
  size_t count = 0;
  bool symmetric = false;  // registered as an NCCL window (NCCL_WIN_COLL_SYMMETRIC)
};

struct Buffer {
  std::string name;
  Role role = Role::Intermediate;
  DType dtype = DType::U8;
  size_t count = 0;
  size_t bytes = 0;
  void* ptr = nullptr;          // first byte of the buffer (after the front canary band)
  ncclWindow_t win = nullptr;   // non-null for symmetric buffers; offset 0 is ptr
  template <typename T> T* as() const { return static_cast<T*>(ptr); }

  // Harness internals: the whole allocation including canary bands.
  char* alloc_base = nullptr;
  size_t alloc_bytes = 0;
  bool nccl_memory = false;
};

struct Problem {
  int64_t size = 0;
  int rank = 0;
  int world = 1;
  Platform platform;
};

struct Requirements {
  uint32_t lsa_barriers = 0;     // LsaBarrier indices: barrier_count(issuer, ctas, threads)
  uint32_t rail_gin_barriers = 0;
  uint32_t world_barriers = 0;   // ncclBarrierSession / WorldBarrier indices (needs GIN off-node)
  uint32_t gin_signals = 0;
  uint32_t gin_counters = 0;
  bool gin = false;              // connect GIN even on one node (needs an RDMA NIC)
  bool multimem = false;         // always rejected: NVLink multicast stays off
  size_t resource_bytes = 0;     // extra zeroed symmetric scratch in the devComm (ctx.resource)
  int ll_a2a_blocks = 0;         // ncclLLA2ASession blocks/slots (ctx.ll_a2a)
  int ll_a2a_slots = 0;

  void merge(const Requirements& o) {
    lsa_barriers = std::max(lsa_barriers, o.lsa_barriers);
    rail_gin_barriers = std::max(rail_gin_barriers, o.rail_gin_barriers);
    world_barriers = std::max(world_barriers, o.world_barriers);
    gin_signals = std::max(gin_signals, o.gin_signals);
    gin_counters = std::max(gin_counters, o.gin_counters);
    gin = gin || o.gin;
    multimem = multimem || o.multimem;
    resource_bytes = std::max(resource_bytes, o.resource_bytes);
    ll_a2a_blocks = std::max(ll_a2a_blocks, o.ll_a2a_blocks);
    ll_a2a_slots = std::max(ll_a2a_slots, o.ll_a2a_slots);
  }
};

constexpr size_t kCanaryBand = 64 * 1024;   // a multiple of NCCL_WIN_REQUIRED_ALIGNMENT
constexpr unsigned char kCanaryByte = 0xA5;
constexpr unsigned char kPoisonByte = 0xFF;

inline size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

class Context {
 public:
  Problem problem;
  int rank = 0, world = 1;
  ncclComm_t comm = nullptr;
  ncclDevComm dev_comm{};
  bool gin = false;                       // GIN usable on this communicator
  int sm_count = 0;
  cudaStream_t stream = nullptr;          // the timed stream handed to run()
  uint32_t iteration = 0;                 // run() calls since setup: epochs for flags
  ncclDevResourceHandle_t resource{};     // Requirements::resource_bytes
  ncclLLA2AHandle_t ll_a2a{};             // Requirements::ll_a2a_*
  void* workload_state = nullptr;         // free for the workload (handles, scratch)
  void* candidate_state = nullptr;        // free for the candidate

  Buffer& buffer(const std::string& name) {
    for (Buffer& b : buffers_)
      if (b.name == name) return b;
    throw DeviceError("no buffer named '" + name + "'");
  }
  std::deque<Buffer>& buffers() { return buffers_; }

  // Symmetric buffer (an NCCL window). Collective: every rank allocates the same sizes in the same
  // order.
  Buffer& alloc_window(const std::string& name, size_t bytes, Role role = Role::Intermediate, DType dtype = DType::U8) {
    return allocate(name, bytes, role, dtype, true);
  }
  // Plain device buffer.
  Buffer& alloc(const std::string& name, size_t bytes, Role role = Role::Intermediate, DType dtype = DType::U8) {
    return allocate(name, bytes, role, dtype, false);
  }
  // A stream joined into the timed stream at the end of every run().
  cudaStream_t new_stream() {
    cudaStream_t s = nullptr;
    BRAID_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    extra_streams_.push_back(s);
    return s;
  }
  const std::vector<cudaStream_t>& extra_streams() const { return extra_streams_; }

  Buffer& allocate(const std::string& name, size_t bytes, Role role, DType dtype, bool symmetric) {
    for (const Buffer& b : buffers_)
      if (b.name == name) throw DeviceError("buffer '" + name + "' allocated twice");
    Buffer b;
    b.name = name;
    b.role = role;
    b.dtype = dtype;
    b.bytes = bytes;
    b.count = bytes / dtype_size(dtype);
    b.alloc_bytes = kCanaryBand + round_up(std::max<size_t>(bytes, 1), 4096) + kCanaryBand;
    void* base = nullptr;
    if (symmetric) {
      BRAID_NCCL(ncclMemAlloc(&base, b.alloc_bytes));
      b.nccl_memory = true;
    } else {
      BRAID_CUDA(cudaMalloc(&base, b.alloc_bytes));
    }
    b.alloc_base = static_cast<char*>(base);
    b.ptr = b.alloc_base + kCanaryBand;
    BRAID_CUDA(cudaMemset(b.alloc_base, kCanaryByte, b.alloc_bytes));
    BRAID_CUDA(cudaMemset(b.ptr, role == Role::State ? 0 : kPoisonByte, bytes));
    if (symmetric)
      BRAID_NCCL(ncclCommWindowRegister(comm, b.ptr, round_up(std::max<size_t>(bytes, 1), 4096), &b.win, NCCL_WIN_COLL_SYMMETRIC));
    BRAID_CUDA(cudaDeviceSynchronize());
    buffers_.push_back(b);
    return buffers_.back();
  }

  // Frees every buffer, windows deregistered in allocation order (the same on all ranks).
  void release_all() {
    for (Buffer& b : buffers_) {
      if (b.win != nullptr) ncclCommWindowDeregister(comm, b.win);
      if (b.nccl_memory) ncclMemFree(b.alloc_base);
      else cudaFree(b.alloc_base);
    }
    buffers_.clear();
    for (cudaStream_t s : extra_streams_) cudaStreamDestroy(s);
    extra_streams_.clear();
  }

 private:
  std::deque<Buffer> buffers_;
  std::vector<cudaStream_t> extra_streams_;
};

using ContextFn = std::function<void(Context&)>;
using StreamFn = std::function<void(Context&, cudaStream_t)>;

struct Workload {
  std::string name;
  std::function<std::vector<BufferSpec>(const Problem&)> buffers;
  ContextFn init;           // optional: after buffers, before the candidate's setup
  StreamFn reference;       // writes the expected Output buffers by a route other than the candidate
  StreamFn baseline;        // host-driven program (writes the Output buffers)
  StreamFn compute_alone;   // the computation only
  StreamFn comm_alone;      // the communication only (host NCCL collective)
  ContextFn finish;         // optional: release what init made
  std::function<double(const Problem&)> comm_bytes;  // optional: bytes a rank receives, for GB/s
};

struct Candidate {
  std::function<Requirements(const Problem&)> requirements;
  ContextFn setup;
  StreamFn run;
  ContextFn teardown;
};

enum class Mode { Verify, Bench };

struct Options {
  Mode mode = Mode::Verify;
  std::vector<int64_t> sizes;
  uint64_t seed = 1;
  double rtol = 1e-5;
  double atol = 1e-6;
  int warmup = 3;
  int iters = 20;
  int input_sets = 2;        // accepted for older command lines; every call has fresh inputs now
  std::string results_dir;   // --results_dir
  std::string metrics_path;  // BRAID_METRICS_PATH (correct.json goes beside it)
};

// ---------------------------------------------------------------------------------------------
// Reports
// ---------------------------------------------------------------------------------------------

// One rank's verdict, fixed-size so ranks can all-gather it.
struct RankVerdict {
  int32_t ok = 1;
  int32_t rank = 0;
  int32_t iteration = -1;     // the first run() call (warm-up included, from 0) whose outputs were wrong
  int64_t first_bad = -1;
  int64_t bad_count = 0;
  double expected = 0, got = 0;
  int32_t canary_ok = 1;
  int64_t canary_offset = 0;  // byte offset from the buffer start (negative: before it)
  int32_t unjoined_work = 0;  // device still busy after run()'s end event
  char buffer[48] = {0};
  char error[384] = {0};
};

struct PhaseTiming {
  double median_ms = 0;
  std::vector<double> makespan_ms;  // per timed iteration, slowest rank
};

// Whether a size's figure is physically believable (see Harness::implausibility).
enum class Plausibility { Ok, Rechecked, Flagged };
inline const char* plausibility_name(Plausibility p) {
  return p == Plausibility::Ok ? "ok" : p == Plausibility::Rechecked ? "rechecked" : "flagged";
}

struct SizeReport {
  int64_t size = 0;
  bool correct = false;
  std::string error;
  PhaseTiming candidate;        // the scored figure: CUDA events, or the host clock under the strict protocol
  PhaseTiming baseline, compute, comm;
  PhaseTiming candidate_events; // CUDA events around run() (+ any device tail after the end event)
  PhaseTiming candidate_host;   // host steady_clock around the same run() + device sync, less an idle sync
  PhaseTiming foreign_tail;     // per iteration: device work still running after the end event of the
                                // baseline / compute alone / communication alone (0 when none). The
                                // workload joins all its work, so any is the candidate's, slowing them
  bool unjoined_work = false;
  bool strict = false;          // measured under the strict protocol (candidate alone, host clock)
  Plausibility plausibility = Plausibility::Ok;
  std::string plausibility_reason;
  bool score_withheld = false;  // flagged because CUDA events and the host clock disagree (a tampered timer)
  double comm_bytes = 0;
};

struct Report {
  bool correct = false;
  std::string error;
  std::vector<SizeReport> sizes;
  double combined_score = 0;
  bool score_withheld = false;  // a size's clocks still disagreed under the strict protocol: combined_score is 0
  bool gin_available = false;
  int world = 1;
};

// ---------------------------------------------------------------------------------------------
// Device helpers: random fill, compare, canaries
// ---------------------------------------------------------------------------------------------

__host__ __device__ inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

template <int kUnused = 0>
__global__ void fill_random_kernel(void* p, size_t count, int dtype, uint64_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
    const uint64_t h = mix64(seed ^ mix64(i));
    const float u = (float)(h >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;  // [-1, 1)
    switch ((DType)dtype) {
      case DType::F32: static_cast<float*>(p)[i] = u; break;
      case DType::BF16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(u); break;
      case DType::F16: static_cast<__half*>(p)[i] = __float2half(u); break;
      case DType::I32: static_cast<int32_t*>(p)[i] = (int32_t)(h >> 32); break;
      case DType::U32: static_cast<uint32_t*>(p)[i] = (uint32_t)(h >> 32); break;
      case DType::U8: static_cast<uint8_t*>(p)[i] = (uint8_t)(h >> 56); break;
    }
  }
}

__device__ inline double load_as_double(const void* p, size_t i, int dtype) {
  switch ((DType)dtype) {
    case DType::F32: return static_cast<const float*>(p)[i];
    case DType::BF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case DType::F16: return __half2float(static_cast<const __half*>(p)[i]);
    case DType::I32: return static_cast<const int32_t*>(p)[i];
    case DType::U32: return static_cast<const uint32_t*>(p)[i];
    case DType::U8: return static_cast<const uint8_t*>(p)[i];
  }
  return 0;
}

template <int kUnused = 0>
__global__ void compare_kernel(const void* got, const void* expected, size_t count, int dtype, double rtol, double atol,
                               unsigned long long* first_bad, unsigned long long* bad_count) {
  const bool exact = (DType)dtype == DType::I32 || (DType)dtype == DType::U32 || (DType)dtype == DType::U8;
  unsigned long long mine = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
    const double g = load_as_double(got, i, dtype), e = load_as_double(expected, i, dtype);
    const bool bad = exact ? (g != e) : (isnan(g) || isnan(e) || isinf(g) != isinf(e) || fabs(g - e) > atol + rtol * fabs(e));
    if (bad) {
      atomicMin(first_bad, (unsigned long long)i);
      ++mine;
    }
  }
  if (mine) atomicAdd(bad_count, mine);
}

template <int kUnused = 0>
__global__ void canary_kernel(const unsigned char* base, size_t front, size_t data_end, size_t total, unsigned long long* first_bad) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
    if (i >= front && i < data_end) continue;
    if (base[i] != kCanaryByte) atomicMin(first_bad, (unsigned long long)i);
  }
}

// ---------------------------------------------------------------------------------------------
// The harness
// ---------------------------------------------------------------------------------------------

// The measurement protocol, per size (all of it collective: every rank takes the same steps):
//   * fresh inputs for EVERY run() call of every phase, generated on the device by a counter-based
//     hash of (run secret, size, phase, call, rank, buffer, element). The run secret mixes --seed
//     with 64 bits from the OS drawn after the candidate's setup(), so nothing a candidate can see
//     in setup() predicts an input, and no two calls share one (a cache keyed on input bytes never
//     hits);
//   * before each call (untimed): inputs written, Receive/Intermediate/Output poisoned, device
//     idle, cross-rank barrier; then CUDA events around run() (+ joins of ctx streams) and the host
//     clock around the same run() + device sync;
//   * after each candidate call (untimed): its Output buffers are copied aside, the same inputs are
//     written again (the candidate may have scribbled on them), the workload's reference runs on
//     them and every output element is compared (a device kernel writes count and first bad
//     index). One bad call, warm-up included, fails the candidate with rank, call, buffer, index.
//     Why a full reference per call rather than a pool of precomputed sets: the reference is one
//     host-driven run of the workload (gemm_allgather: an all-gather and one cuBLAS GEMM, about a
//     baseline iteration, ~10 ms at 16384 on H200), so verifying 14 calls at two sizes adds well
//     under a second to a bench that spends seconds on process start, NCCL and cuBLAS set-up; and
//     computing it after the call means no answer for the current inputs exists anywhere in device
//     memory while the candidate runs.
//   * plausibility (bench): a size whose candidate is faster than kImplausibleRatio x its bound,
//     or whose CUDA-event and host-clock times disagree, is measured again under the strict
//     protocol (candidate alone, fresh inputs and verification as above, scored by the host clock);
//     still implausible -> plausibility "flagged" (braid reads it); clocks that still disagree,
//     or device work still running after the end of a workload phase in most iterations (work
//     left running outside run(), which slows the baseline and the bound) -> the run's score is
//     withheld too (combined_score 0).
constexpr double kImplausibleRatio = 0.9;   // of max(compute alone, communication alone)
constexpr double kClockSlackMs = 0.2;        // events vs host clock: allowed gap, absolute (an honest call: tens of us) ...
constexpr double kClockSlackFraction = 0.1;   // ... plus this fraction of the larger figure

class Harness {
 public:
  Harness(const Options& opt, const Workload& wl, const Candidate& cand) : opt_(opt), wl_(wl), cand_(cand) {}

  // Self-test only: multiplies what CUDA events / the host clock report for the candidate's calls,
  // as if its work had escaped a timer (tests/gpu/test_redteam.cu checks that such figures are
  // flagged and the score withheld).
  void distort_clocks_for_self_test(double event_scale, double host_scale) {
    event_scale_ = event_scale;
    host_scale_ = host_scale;
  }

  // Collective over all ranks. Every rank returns the gathered report.
  Report run(const RankInfo& me) {
    me_ = me;
    report_ = Report{};
    if (me.rank == 0) std::remove(failure_file_path().c_str());  // left by an earlier failed run
    comm_ = init_comm(me);
    BRAID_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    BRAID_CUDA(cudaEventCreate(&start_));
    BRAID_CUDA(cudaEventCreate(&end_));
    BRAID_CUDA(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming));
    BRAID_CUDA(cudaMalloc(&mismatch_, 2 * sizeof(unsigned long long)));
    barrier_ = std::make_unique<HostBarrier>(comm_);
    int dev = 0;
    BRAID_CUDA(cudaGetDevice(&dev));
    BRAID_CUDA(cudaDeviceGetAttribute(&platform_.sm_count, cudaDevAttrMultiProcessorCount, dev));
    platform_.gin = gin_possible();
    platform_.lsa_size = lsa_size_of(comm_);  // before the first requirements() call, which may size by it
    report_.gin_available = platform_.gin;
    report_.world = me.world;
    calibrate_idle_sync();
    report_.correct = true;
    std::vector<double> speedups;
    for (int64_t size : opt_.sizes) {
      SizeReport sr = run_size(size, false);
      if (sr.correct && opt_.mode == Mode::Bench) sr = recheck_if_implausible(std::move(sr));
      if (!sr.correct) {
        report_.correct = false;
        if (report_.error.empty()) report_.error = sr.error;
      }
      if (sr.score_withheld) report_.score_withheld = true;
      if (sr.candidate.median_ms > 0 && sr.baseline.median_ms > 0) speedups.push_back(sr.baseline.median_ms / sr.candidate.median_ms);
      report_.sizes.push_back(std::move(sr));
      if (!report_.correct) break;  // later sizes would only repeat the failure
    }
    if (report_.correct && !report_.score_withheld && opt_.mode == Mode::Bench && !speedups.empty()) {
      double log_sum = 0;
      for (double s : speedups) log_sum += std::log(s);
      report_.combined_score = std::exp(log_sum / (double)speedups.size());
    }
    barrier_.reset();
    cudaFree(mismatch_);
    mismatch_ = nullptr;
    cudaEventDestroy(start_);
    cudaEventDestroy(end_);
    cudaEventDestroy(join_);
    cudaStreamDestroy(stream_);
    ncclCommFinalize(comm_);
    ncclCommDestroy(comm_);
    comm_ = nullptr;
    return report_;
  }

  // "" when the size's figures are believable, else why not. Every rank holds the same gathered
  // figures, so every rank decides alike (the strict re-run is collective).
  static std::string implausibility(const SizeReport& s) {
    const std::string clocks = clock_disagreement(s);
    if (!clocks.empty()) return clocks;
    const std::string foreign = foreign_work(s);
    if (!foreign.empty()) return foreign;
    char why[320];
    const double bound = std::max(s.compute.median_ms, s.comm.median_ms);
    if (bound > 0 && s.candidate.median_ms > 0 && s.candidate.median_ms < kImplausibleRatio * bound) {
      std::snprintf(why, sizeof(why), "candidate %.4f ms is faster than its bound allows (%.4f ms = max(compute alone, communication alone); ratio %.3f < %.2f)",
                    s.candidate.median_ms, bound, s.candidate.median_ms / bound, kImplausibleRatio);
      return why;
    }
    return "";
  }

  // Work still running after the end event of a phase the workload runs (which joins all it
  // launches), in most iterations: the candidate's, slowing the figures it is compared with.
  static std::string foreign_work(const SizeReport& s) {
    if (s.foreign_tail.median_ms <= 0) return "";
    char why[240];
    std::snprintf(why, sizeof(why), "device work the workload did not launch ran past the end of the baseline / compute alone / communication alone timings (median %.4f ms): work left running outside run()",
                  s.foreign_tail.median_ms);
    return why;
  }

  // The events lie inside the host clock's interval (both around the same run() + sync), so they
  // cannot legitimately differ by more than launch and sync latencies.
  static std::string clock_disagreement(const SizeReport& s) {
    const double ev = s.candidate_events.median_ms, host = s.candidate_host.median_ms;
    if (ev > 0 && host > 0 && std::fabs(host - ev) > kClockSlackMs + kClockSlackFraction * std::max(ev, host)) {
      char why[200];
      std::snprintf(why, sizeof(why), "CUDA events (%.4f ms) and the host clock (%.4f ms) disagree on the same iterations", ev, host);
      return why;
    }
    return "";
  }

 private:
  // Timings gathered per size: the four phases, then the candidate's events and host clock.
  static constexpr int kTimings = 7;
  static constexpr int kEvents = 4;
  static constexpr int kHost = 5;
  static constexpr int kForeign = 6;

  static bool gin_possible() { return rdma_device_present(); }

  SizeReport recheck_if_implausible(SizeReport first) {
    const std::string why = implausibility(first);
    if (why.empty()) return first;
    SizeReport strict = run_size(first.size, true);
    // The strict run times the candidate alone; the bound and the baseline stay the first run's.
    strict.baseline = first.baseline;
    strict.compute = first.compute;
    strict.comm = first.comm;
    strict.unjoined_work = strict.unjoined_work || first.unjoined_work;
    if (!strict.correct) return strict;
    // Still faster than the bound, with clocks that agree and every call verified on fresh inputs:
    // flagged (braid reads it; a device-initiated program may truly beat a host collective) and
    // scored by the host clock. Clocks that still disagree mean a tampered timer: no score.
    const std::string again = implausibility(strict);
    strict.plausibility = again.empty() ? Plausibility::Rechecked : Plausibility::Flagged;
    strict.score_withheld = !clock_disagreement(strict).empty();
    // Foreign work slowed the first run's baseline and bound, which the strict run reuses: no score.
    if (!foreign_work(first).empty()) {
      strict.plausibility = Plausibility::Flagged;
      strict.score_withheld = true;
    }
    strict.plausibility_reason = "first run: " + why + "; strict re-run (candidate alone, host clock): " + (again.empty() ? "plausible" : again);
    return strict;
  }

  void calibrate_idle_sync() {
    std::vector<double> tails;
    for (int i = 0; i < 21; ++i) {
      BRAID_CUDA(cudaEventRecord(end_, stream_));
      wait_event(end_, comm_);
      const auto t0 = std::chrono::steady_clock::now();
      BRAID_CUDA(cudaDeviceSynchronize());
      tails.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(tails.begin(), tails.end());
    idle_tail_ms_ = tails[tails.size() / 2];
  }

  // Ranks reachable by loads and stores, from a device communicator with no resources.
  static int lsa_size_of(ncclComm_t comm) {
    ncclDevCommRequirements r;
    std::memset(&r, 0, sizeof(r));
    ncclDevComm dc{};
    BRAID_NCCL(ncclDevCommCreate(comm, &r, &dc));
    const int n = dc.lsaSize;
    BRAID_NCCL(ncclDevCommDestroy(comm, &dc));
    return n;
  }

  // 64 bits the candidate cannot know in setup(): the OS's entropy, mixed with --seed.
  uint64_t draw_run_secret(int64_t size) const {
    std::random_device os;
    const uint64_t entropy = (uint64_t)os() << 32 ^ (uint64_t)os();
    return mix64(opt_.seed ^ mix64(entropy) ^ mix64((uint64_t)size));
  }

  // The seed of one call's inputs: phase p (0 = candidate), call index, this rank.
  uint64_t input_seed(size_t phase, int call) const {
    return mix64(run_secret_ ^ mix64((uint64_t)call * 8 + phase) ^ mix64(0x5EED0000ull + (uint64_t)me_.rank));
  }

  SizeReport run_size(int64_t size, bool strict) {
    SizeReport sr;
    sr.size = size;
    sr.strict = strict;
    Problem prob;
    prob.size = size;
    prob.rank = me_.rank;
    prob.world = me_.world;
    prob.platform = platform_;

    RankVerdict verdict;
    verdict.rank = me_.rank;
    std::vector<double> durations[kTimings];
    Context ctx;
    bool dev_comm_made = false;
    bool candidate_set_up = false;
    bool workload_inited = false;
    std::string stage = "requirements";
    try {
      Requirements req = cand_.requirements ? cand_.requirements(prob) : Requirements{};
      if (req.multimem) throw DeviceError("candidate asks for multimem (NVLink multicast), which braid keeps off");
      if ((req.gin || req.gin_signals || req.gin_counters || req.rail_gin_barriers) && !platform_.gin)
        throw DeviceError("candidate asks for GIN but this platform has no GIN backend (no RDMA NIC); choose the backend with effective_backend()");
      stage = "ncclDevCommCreate";
      ncclDevCommRequirements r;
      std::memset(&r, 0, sizeof(r));
      r.lsaBarrierCount = (int)req.lsa_barriers;
      r.railGinBarrierCount = (int)req.rail_gin_barriers;
      r.barrierCount = (int)req.world_barriers;
      r.ginSignalCount = (int)req.gin_signals;
      r.ginCounterCount = (int)req.gin_counters;
      r.ginForceEnable = req.gin;
      r.lsaMultimem = false;
      ncclDevResourceRequirements_t resource_req;
      std::memset(&resource_req, 0, sizeof(resource_req));
      ncclDevResourceRequirements_t ll_req;
      std::memset(&ll_req, 0, sizeof(ll_req));
      if (req.resource_bytes > 0) {
        resource_req.bufferSize = req.resource_bytes;
        resource_req.bufferAlign = 16;
        resource_req.outBufferHandle = &ctx.resource;
        resource_req.next = r.resourceRequirementsList;
        r.resourceRequirementsList = &resource_req;
      }
      if (req.ll_a2a_blocks > 0) {
        BRAID_NCCL(ncclLLA2ACreateRequirement(req.ll_a2a_blocks, req.ll_a2a_slots, &ctx.ll_a2a, &ll_req));
        ll_req.next = r.resourceRequirementsList;
        r.resourceRequirementsList = &ll_req;
      }
      BRAID_NCCL(ncclDevCommCreate(comm_, &r, &ctx.dev_comm));
      dev_comm_made = true;
      if (ctx.dev_comm.lsaSize > kMaxLsaPeers) throw DeviceError("more than 8 LSA ranks are not supported by braid's primitives");
      platform_.lsa_size = ctx.dev_comm.lsaSize;
      prob.platform = platform_;
      ctx.problem = prob;
      ctx.rank = me_.rank;
      ctx.world = me_.world;
      ctx.comm = comm_;
      ctx.gin = platform_.gin;
      ctx.sm_count = platform_.sm_count;
      ctx.stream = stream_;

      stage = "workload buffers";
      for (const BufferSpec& spec : wl_.buffers(prob))
        ctx.allocate(spec.name, spec.count * dtype_size(spec.dtype), spec.role, spec.dtype, spec.symmetric);
      workload_buffers_ = ctx.buffers().size();
      stage = "workload init";
      if (wl_.init) wl_.init(ctx);
      workload_inited = true;
      stage = "candidate setup";
      if (cand_.setup) cand_.setup(ctx);
      candidate_set_up = true;
      BRAID_CUDA(cudaDeviceSynchronize());
      barrier_->wait();

      stage = "inputs and reference";
      run_secret_ = draw_run_secret(size);
      alloc_output_copies(ctx);

      const int iters = opt_.mode == Mode::Bench ? std::max(1, opt_.iters) : 1;
      const int warmup = opt_.mode == Mode::Bench ? std::max(0, opt_.warmup) : 0;
      ctx.iteration = 0;
      bool unjoined = false;
      StreamFn candidate_run = [&](Context& c, cudaStream_t s) {
        cand_.run(c, s);
        ++c.iteration;
      };
      // Bench: candidate, baseline, compute alone and communication alone are timed interleaved,
      // iteration by iteration, so clock and temperature drift (a GPU at its power limit slows
      // down over a run) falls on all of them alike instead of on whichever phase runs last.
      // The strict protocol times the candidate alone.
      std::vector<const StreamFn*> phases{&candidate_run};
      if (opt_.mode == Mode::Bench && !strict) phases = {&candidate_run, &wl_.baseline, &wl_.compute_alone, &wl_.comm_alone};
      time_phases(ctx, phases, warmup, iters, strict, durations, &unjoined, &stage, verdict);
      verdict.unjoined_work = unjoined ? 1 : 0;
      stage = "verification";
      check_canaries(ctx, verdict);
      stage = "candidate teardown";
      if (cand_.teardown) cand_.teardown(ctx);
      candidate_set_up = false;
      if (wl_.finish) wl_.finish(ctx);
      workload_inited = false;
    } catch (const std::exception& e) {
      // A failure that leaves the rank usable (bad requirement, failed check) is reported through
      // the gather below; anything else ends this rank, and the others stop when they see the
      // announcement instead of spinning on a dead peer.
      verdict.ok = 0;
      std::snprintf(verdict.error, sizeof(verdict.error), "%s: %s", stage.c_str(), e.what());
      const cudaError_t sticky = cudaDeviceSynchronize();
      if (sticky != cudaSuccess || stage == "candidate run" || stage == "baseline" || stage == "compute alone" ||
          stage == "communication alone" || stage == "candidate setup" || stage == "inputs and reference") {
        announce_failure(me_.rank, verdict.error);
        throw DeviceError(std::string("rank ") + std::to_string(me_.rank) + ": " + verdict.error);
      }
    }
    if (candidate_set_up && cand_.teardown) {
      try { cand_.teardown(ctx); } catch (const std::exception&) {}
    }
    if (workload_inited && wl_.finish) {
      try { wl_.finish(ctx); } catch (const std::exception&) {}
    }
    cudaDeviceSynchronize();
    barrier_->wait();
    free_output_copies();
    ctx.release_all();
    if (dev_comm_made) ncclDevCommDestroy(comm_, &ctx.dev_comm);

    gather(sr, verdict, durations);
    return sr;
  }

  // The workload's buffers of one role, in allocation order (what the candidate allocates in
  // setup() is its own business).
  template <typename F>
  void for_workload_buffers(Context& ctx, Role role, F&& f) {
    size_t index = 0;
    for (Buffer& b : ctx.buffers()) {
      if (index >= workload_buffers_) break;
      if (b.role == role) f(b, index);
      ++index;
    }
  }

  // Writes one call's inputs (deterministic in seed: written again for the reference).
  void write_inputs(Context& ctx, uint64_t seed) {
    for_workload_buffers(ctx, Role::Input, [&](Buffer& b, size_t index) {
      fill_random_kernel<><<<1024, 256, 0, stream_>>>(b.ptr, b.count, (int)b.dtype, mix64(seed ^ mix64(index * 7919ull + 1)));
      BRAID_LAUNCHED();
    });
  }

  void poison(Context& ctx) {
    for (Buffer& b : ctx.buffers())
      if (b.role == Role::Receive || b.role == Role::Intermediate || b.role == Role::Output)
        BRAID_CUDA(cudaMemsetAsync(b.ptr, kPoisonByte, b.bytes, stream_));
  }

  void alloc_output_copies(Context& ctx) {
    free_output_copies();
    for_workload_buffers(ctx, Role::Output, [&](Buffer& b, size_t) {
      void* copy = nullptr;
      BRAID_CUDA(cudaMalloc(&copy, std::max<size_t>(b.bytes, 1)));
      output_copies_.push_back({&b, copy});
    });
  }

  struct CallTiming {
    double event_ms = 0;  // events around run() and the joins, plus any device tail after the end event
    double tail_ms = 0;   // that tail (0 when the device was idle at the end event)
    double host_ms = 0;   // host clock from before the start event to the end of the device sync, less an idle sync
  };

  // Per call: fresh inputs and poison (untimed), device idle, barrier, events around fn, join ctx
  // streams, then the device sync. If the device was still busy after the end event (work on a
  // stream the harness does not know), the time until it went idle is added.
  CallTiming time_once(Context& ctx, const StreamFn& fn, uint64_t seed, bool candidate, bool* unjoined) {
    write_inputs(ctx, seed);
    poison(ctx);
    BRAID_CUDA(cudaDeviceSynchronize());
    barrier_->wait();
    const auto h0 = std::chrono::steady_clock::now();
    BRAID_CUDA(cudaEventRecord(start_, stream_));
    fn(ctx, stream_);
    for (cudaStream_t s : ctx.extra_streams()) {
      BRAID_CUDA(cudaEventRecord(join_, s));
      BRAID_CUDA(cudaStreamWaitEvent(stream_, join_, 0));
    }
    BRAID_CUDA(cudaEventRecord(end_, stream_));
    wait_event(end_, comm_);
    const auto t_end = std::chrono::steady_clock::now();
    BRAID_CUDA(cudaDeviceSynchronize());
    const auto h1 = std::chrono::steady_clock::now();
    const double tail_ms = std::chrono::duration<double, std::milli>(h1 - t_end).count();
    float ms = 0;
    BRAID_CUDA(cudaEventElapsedTime(&ms, start_, end_));
    CallTiming t;
    t.event_ms = ms * (candidate ? event_scale_ : 1.0);
    if (tail_ms > 3 * idle_tail_ms_ + 0.05) {  // well above an idle sync, well below real work
      t.event_ms += tail_ms;
      t.tail_ms = tail_ms;
      if (unjoined != nullptr) *unjoined = true;
    }
    t.host_ms = std::max(0.0, std::chrono::duration<double, std::milli>(h1 - h0).count() - idle_tail_ms_) * (candidate ? host_scale_ : 1.0);
    return t;
  }

  // phases[0] is the candidate; out[k] receives timing k's figures (kTimings below). Iteration i
  // runs the phases in an order rotated by i. Phases without a function are skipped. Every
  // candidate call, warm-up included, is verified right after it.
  void time_phases(Context& ctx, const std::vector<const StreamFn*>& phases, int warmup, int iters, bool strict, std::vector<double>* out,
                   bool* unjoined, std::string* stage, RankVerdict& verdict) {
    static const char* const kNames[] = {"candidate run", "baseline", "compute alone", "communication alone"};
    const size_t n = phases.size();
    for (int it = 0; it < warmup + iters; ++it) {
      double foreign_ms = 0;
      for (size_t k = 0; k < n; ++k) {
        const size_t p = (k + (size_t)it) % n;
        if (!*phases[p]) continue;
        *stage = kNames[p];
        const uint64_t seed = input_seed(p, it);
        const CallTiming t = time_once(ctx, *phases[p], seed, p == 0, p == 0 ? unjoined : nullptr);
        if (p == 0) {
          *stage = "inputs and reference";
          verify_call(ctx, seed, it, verdict);
        }
        if (it < warmup) continue;
        if (p == 0) {
          out[0].push_back(strict ? t.host_ms : t.event_ms);
          out[kEvents].push_back(t.event_ms);
          out[kHost].push_back(t.host_ms);
        } else {
          out[p].push_back(t.event_ms);
          foreign_ms = std::max(foreign_ms, t.tail_ms);
        }
      }
      if (it >= warmup && n > 1) out[kForeign].push_back(foreign_ms);
    }
  }

  // Untimed, right after candidate call `call`: its outputs set aside, the call's inputs written
  // again, the reference run on them, every element compared. The first bad call is recorded.
  void verify_call(Context& ctx, uint64_t seed, int call, RankVerdict& v) {
    for (const auto& [buf, copy] : output_copies_)
      BRAID_CUDA(cudaMemcpyAsync(copy, buf->ptr, buf->bytes, cudaMemcpyDeviceToDevice, stream_));
    write_inputs(ctx, seed);
    wl_.reference(ctx, stream_);
    BRAID_CUDA(cudaDeviceSynchronize());
    for (const auto& [buf, copy] : output_copies_) {
      const unsigned long long init[2] = {~0ull, 0ull};
      BRAID_CUDA(cudaMemcpyAsync(mismatch_, init, sizeof(init), cudaMemcpyHostToDevice, stream_));
      compare_kernel<><<<512, 256, 0, stream_>>>(copy, buf->ptr, buf->count, (int)buf->dtype, opt_.rtol, opt_.atol, mismatch_, mismatch_ + 1);
      BRAID_LAUNCHED();
      unsigned long long res[2];
      BRAID_CUDA(cudaMemcpyAsync(res, mismatch_, sizeof(res), cudaMemcpyDeviceToHost, stream_));
      BRAID_CUDA(cudaStreamSynchronize(stream_));
      if (res[1] != 0 && v.ok) {
        v.ok = 0;
        v.iteration = call;
        v.first_bad = (int64_t)res[0];
        v.bad_count = (int64_t)res[1];
        v.expected = host_value(buf->ptr, res[0], buf->dtype);
        v.got = host_value(copy, res[0], buf->dtype);
        std::snprintf(v.buffer, sizeof(v.buffer), "%s", buf->name.c_str());
      }
    }
  }

  static double host_value(const void* p, size_t i, DType t) {
    unsigned char raw[8] = {0};
    BRAID_CUDA(cudaMemcpy(raw, static_cast<const char*>(p) + i * dtype_size(t), dtype_size(t), cudaMemcpyDeviceToHost));
    switch (t) {
      case DType::F32: { float f; std::memcpy(&f, raw, 4); return f; }
      case DType::BF16: { uint32_t u = (uint32_t)raw[0] << 16 | (uint32_t)raw[1] << 24; float f; std::memcpy(&f, &u, 4); return f; }
      case DType::F16: { __half h; std::memcpy(&h, raw, 2); return __half2float(h); }
      case DType::I32: { int32_t x; std::memcpy(&x, raw, 4); return x; }
      case DType::U32: { uint32_t x; std::memcpy(&x, raw, 4); return x; }
      case DType::U8: return raw[0];
    }
    return 0;
  }

  void check_canaries(Context& ctx, RankVerdict& v) {
    unsigned long long* dev = nullptr;
    BRAID_CUDA(cudaMalloc(&dev, sizeof(unsigned long long)));
    for (Buffer& b : ctx.buffers()) {
      const unsigned long long init = ~0ull;
      BRAID_CUDA(cudaMemcpy(dev, &init, sizeof(init), cudaMemcpyHostToDevice));
      canary_kernel<><<<256, 256, 0, stream_>>>(reinterpret_cast<unsigned char*>(b.alloc_base), kCanaryBand, kCanaryBand + b.bytes,
                                                b.alloc_bytes, dev);
      BRAID_LAUNCHED();
      unsigned long long first = 0;
      BRAID_CUDA(cudaMemcpyAsync(&first, dev, sizeof(first), cudaMemcpyDeviceToHost, stream_));
      BRAID_CUDA(cudaStreamSynchronize(stream_));
      if (first != ~0ull && v.canary_ok) {
        v.canary_ok = 0;
        v.canary_offset = (int64_t)first - (int64_t)kCanaryBand;
        if (v.ok) std::snprintf(v.buffer, sizeof(v.buffer), "%s", b.name.c_str());
      }
    }
    cudaFree(dev);
  }

  // Agrees on the count of figures over ranks (a rank that failed early has none), then the
  // per-iteration maximum over ranks: the makespan.
  std::vector<double> makespans(const std::vector<double>& mine) {
    int64_t kk = (int64_t)mine.size();
    int64_t* dk = nullptr;
    BRAID_CUDA(cudaMalloc(&dk, sizeof(int64_t)));
    BRAID_CUDA(cudaMemcpy(dk, &kk, sizeof(kk), cudaMemcpyHostToDevice));
    BRAID_NCCL(ncclAllReduce(dk, dk, 1, ncclInt64, ncclMin, comm_, stream_));
    BRAID_CUDA(cudaMemcpyAsync(&kk, dk, sizeof(kk), cudaMemcpyDeviceToHost, stream_));
    BRAID_CUDA(cudaStreamSynchronize(stream_));
    cudaFree(dk);
    const size_t most = (size_t)kk;
    if (most == 0) return {};
    double* dd = nullptr;
    BRAID_CUDA(cudaMalloc(&dd, sizeof(double) * most));
    BRAID_CUDA(cudaMemcpy(dd, mine.data(), sizeof(double) * most, cudaMemcpyHostToDevice));
    BRAID_NCCL(ncclAllReduce(dd, dd, most, ncclFloat64, ncclMax, comm_, stream_));
    std::vector<double> mk(most);
    BRAID_CUDA(cudaMemcpyAsync(mk.data(), dd, sizeof(double) * most, cudaMemcpyDeviceToHost, stream_));
    BRAID_CUDA(cudaStreamSynchronize(stream_));
    cudaFree(dd);
    return mk;
  }

  static PhaseTiming timing_of(std::vector<double> mk) {
    PhaseTiming t;
    t.makespan_ms = mk;
    if (mk.empty()) return t;
    std::sort(mk.begin(), mk.end());
    const size_t m = mk.size();
    t.median_ms = m % 2 ? mk[m / 2] : 0.5 * (mk[m / 2 - 1] + mk[m / 2]);
    return t;
  }

  // All ranks exchange verdicts and per-iteration durations.
  void gather(SizeReport& sr, const RankVerdict& mine, std::vector<double> (&durations)[kTimings]) {
    const int n = me_.world;
    std::vector<RankVerdict> all((size_t)n);
    char* dev = nullptr;
    BRAID_CUDA(cudaMalloc(&dev, sizeof(RankVerdict) * (size_t)n));
    BRAID_CUDA(cudaMemcpy(dev + sizeof(RankVerdict) * (size_t)me_.rank, &mine, sizeof(RankVerdict), cudaMemcpyHostToDevice));
    BRAID_NCCL(ncclAllGather(dev + sizeof(RankVerdict) * (size_t)me_.rank, dev, sizeof(RankVerdict), ncclChar, comm_, stream_));
    BRAID_CUDA(cudaMemcpyAsync(all.data(), dev, sizeof(RankVerdict) * (size_t)n, cudaMemcpyDeviceToHost, stream_));
    BRAID_CUDA(cudaStreamSynchronize(stream_));
    cudaFree(dev);

    sr.correct = true;
    for (const RankVerdict& v : all) {
      if (v.unjoined_work) sr.unjoined_work = true;
      if (!sr.correct) continue;
      char text[768];
      if (v.error[0] != '\0') {
        std::snprintf(text, sizeof(text), "rank %d: %s", v.rank, v.error);
      } else if (!v.ok) {
        std::snprintf(text, sizeof(text),
                      "rank %d, iteration %d: buffer '%s' differs from the reference at index %lld (%lld bad elements): expected %.9g, got %.9g",
                      v.rank, v.iteration, v.buffer, (long long)v.first_bad, (long long)v.bad_count, v.expected, v.got);
      } else if (!v.canary_ok) {
        std::snprintf(text, sizeof(text), "rank %d: write outside buffer '%s' (canary band changed at byte offset %lld from its start)", v.rank,
                      v.buffer, (long long)v.canary_offset);
      } else {
        continue;
      }
      sr.correct = false;
      sr.error = text;
    }

    PhaseTiming* timings[kTimings] = {&sr.candidate,        &sr.baseline,       &sr.compute,     &sr.comm,
                                      &sr.candidate_events, &sr.candidate_host, &sr.foreign_tail};
    for (int k = 0; k < kTimings; ++k) *timings[k] = timing_of(makespans(durations[k]));
    Problem prob;
    prob.size = sr.size;
    prob.rank = me_.rank;
    prob.world = me_.world;
    prob.platform = platform_;
    if (wl_.comm_bytes) sr.comm_bytes = wl_.comm_bytes(prob);
  }

  void free_output_copies() {
    for (auto& [b, p] : output_copies_) cudaFree(p);
    output_copies_.clear();
  }

  Options opt_;
  const Workload& wl_;
  const Candidate& cand_;
  RankInfo me_;
  Report report_;
  Platform platform_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, end_ = nullptr, join_ = nullptr;
  unsigned long long* mismatch_ = nullptr;  // compare_kernel's record: first bad index, bad count
  std::unique_ptr<HostBarrier> barrier_;
  double idle_tail_ms_ = 0.01;
  double event_scale_ = 1.0, host_scale_ = 1.0;
  uint64_t run_secret_ = 0;
  size_t workload_buffers_ = 0;
  std::vector<std::pair<Buffer*, void*>> output_copies_;

 public:
  ~Harness() { free_output_copies(); }
};

// ---------------------------------------------------------------------------------------------
// Results files and the main entry
// ---------------------------------------------------------------------------------------------

inline std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += (char)c;
        }
    }
  }
  return out + "\"";
}

inline std::string json_number(double x) {
  if (!std::isfinite(x)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.6g", x);
  return buf;
}

inline std::string json_array(const std::vector<double>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + json_number(v[i]);
  return out + "]";
}

inline void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp" + std::to_string(getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) throw DeviceError("cannot write " + tmp + ": " + std::strerror(errno));
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) throw DeviceError("cannot write " + tmp);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw DeviceError("cannot rename " + tmp + " to " + path);
}

inline std::string correct_json(bool correct, const std::string& error) {
  return std::string("{\"correct\": ") + (correct ? "true" : "false") + ", \"error\": " + json_string(error) + "}\n";
}

inline std::string metrics_json(const Report& r, const Options& opt) {
  std::string pub = "{\"sizes\": [", priv = "{\"gin_available\": ", feedback;
  priv += r.gin_available ? "true" : "false";
  priv += ", \"world\": " + std::to_string(r.world) + ", \"iterations\": " + std::to_string(opt.iters) + ", \"per_size\": [";
  bool any_unjoined = false;
  double worst_ratio = 0;  // the slowest size against its bound: one number for a goal (stop_when)
  Plausibility worst = Plausibility::Ok;
  for (size_t i = 0; i < r.sizes.size(); ++i) {
    const SizeReport& s = r.sizes[i];
    const double bound = std::max(s.compute.median_ms, s.comm.median_ms);
    if (bound > 0 && s.candidate.median_ms > 0) worst_ratio = std::max(worst_ratio, s.candidate.median_ms / bound);
    const double speedup = s.candidate.median_ms > 0 ? s.baseline.median_ms / s.candidate.median_ms : 0;
    worst = std::max(worst, s.plausibility);
    pub += std::string(i ? ", " : "") + "{\"size\": " + std::to_string(s.size) + ", \"candidate_ms\": " + json_number(s.candidate.median_ms) +
           ", \"baseline_ms\": " + json_number(s.baseline.median_ms) + ", \"compute_ms\": " + json_number(s.compute.median_ms) +
           ", \"comm_ms\": " + json_number(s.comm.median_ms) + ", \"bound_ms\": " + json_number(bound) +
           ", \"speedup\": " + json_number(speedup) +
           ", \"ratio_to_bound\": " + json_number(bound > 0 ? s.candidate.median_ms / bound : 0) +
           ", \"candidate_host_ms\": " + json_number(s.candidate_host.median_ms) +
           ", \"timing\": " + (s.strict ? "\"host clock (strict protocol)\"" : "\"cuda events\"") +
           ", \"plausibility\": \"" + plausibility_name(s.plausibility) + "\"";
    if (!s.plausibility_reason.empty()) pub += ", \"plausibility_reason\": " + json_string(s.plausibility_reason);
    if (s.comm_bytes > 0 && s.candidate.median_ms > 0)
      pub += ", \"candidate_GBps\": " + json_number(s.comm_bytes / (s.candidate.median_ms * 1e-3) / 1e9);
    pub += "}";
    priv += std::string(i ? ", " : "") + "{\"size\": " + std::to_string(s.size) + ", \"candidate_makespans_ms\": " +
            json_array(s.candidate.makespan_ms) + ", \"candidate_event_makespans_ms\": " + json_array(s.candidate_events.makespan_ms) +
            ", \"candidate_host_makespans_ms\": " + json_array(s.candidate_host.makespan_ms) +
            ", \"baseline_makespans_ms\": " + json_array(s.baseline.makespan_ms) +
            ", \"foreign_tail_ms\": " + json_array(s.foreign_tail.makespan_ms) +
            ", \"unjoined_work\": " + (s.unjoined_work ? "true" : "false") + "}";
    any_unjoined = any_unjoined || s.unjoined_work;
    char line[256];
    std::snprintf(line, sizeof(line), "size %lld: candidate %.4f ms, baseline %.4f ms (x%.3f), bound %.4f ms (compute %.4f, comm %.4f). ",
                  (long long)s.size, s.candidate.median_ms, s.baseline.median_ms, speedup, bound, s.compute.median_ms, s.comm.median_ms);
    feedback += line;
    if (s.plausibility != Plausibility::Ok)
      feedback += "size " + std::to_string(s.size) + " timing " + (s.plausibility == Plausibility::Flagged ? "FLAGGED as implausible" : "re-measured") +
                  ": " + s.plausibility_reason + ". ";
  }
  pub += "]";
  if (worst_ratio > 0) pub += ", \"max_ratio_to_bound\": " + json_number(worst_ratio) + ", \"ratio_to_bound\": " + json_number(worst_ratio);
  pub += std::string(", \"plausibility\": \"") + plausibility_name(worst) + "\"";
  pub += std::string(", \"verified_iterations\": \"all\", \"score_withheld\": ") + (r.score_withheld ? "true" : "false") + "}";
  priv += "]}";
  if (!r.correct) feedback = "incorrect: " + r.error + ". " + feedback;
  if (r.score_withheld)
    feedback = "Score withheld: the CUDA events disagreed with the host clock, or work outside run() slowed the figures it is compared with (see plausibility_reason). " + feedback;
  if (any_unjoined) feedback += "Work was still running after run() returned (a stream the harness does not join); that time was added. ";
  if (!r.gin_available) feedback += "No GIN on this platform: GIN backends fall back to LSA. ";
  return "{\"combined_score\": " + json_number(r.correct && !r.score_withheld ? r.combined_score : 0.0) + ", \"public\": " + pub +
         ", \"private\": " + priv + ", \"text_feedback\": " + json_string(feedback) + "}\n";
}

// Exit code 2 with one line "harness: problem" for bad flags (braid's user-error convention).
inline Options parse_options(int argc, char** argv) {
  Options o;
  auto fail = [](const std::string& problem) {
    std::fprintf(stderr, "harness: %s\n", problem.c_str());
    std::exit(2);
  };
  auto need = [&](int& i, const char* flag) -> std::string {
    if (i + 1 >= argc) fail(std::string(flag) + " needs a value");
    return argv[++i];
  };
  auto to_int = [&](const std::string& v, const char* flag) -> long long {
    char* end = nullptr;
    const long long x = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0') fail(std::string(flag) + " expects an integer, got '" + v + "'");
    return x;
  };
  auto to_double = [&](const std::string& v, const char* flag) -> double {
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0') fail(std::string(flag) + " expects a number, got '" + v + "'");
    return x;
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i], value;
    const size_t eq = a.find('=');
    if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
    } else if (a == "--mode" || a == "--size" || a == "--sizes" || a == "--seed" || a == "--rtol" || a == "--atol" || a == "--warmup" ||
               a == "--iters" || a == "--input_sets" || a == "--results_dir" || a == "--program_path") {
      value = need(i, a.c_str());
    }
    if (a == "--mode") {
      if (value == "verify") o.mode = Mode::Verify;
      else if (value == "bench") o.mode = Mode::Bench;
      else fail("--mode must be verify or bench, got '" + value + "'");
    } else if (a == "--size" || a == "--sizes") {
      size_t p = 0;
      while (p <= value.size()) {
        const size_t c = value.find(',', p);
        const std::string item = value.substr(p, c == std::string::npos ? std::string::npos : c - p);
        const long long x = to_int(item, a.c_str());
        if (x <= 0) fail(a + " must be positive");
        o.sizes.push_back(x);
        if (c == std::string::npos) break;
        p = c + 1;
      }
    } else if (a == "--seed") {
      o.seed = (uint64_t)to_int(value, "--seed");
    } else if (a == "--rtol" || a == "--atol") {
      // A non-finite or negative tolerance would let anything (or nothing) pass.
      const double x = to_double(value, a.c_str());
      if (!std::isfinite(x) || x < 0) fail(a + " must be a finite number >= 0, got '" + value + "'");
      (a == "--rtol" ? o.rtol : o.atol) = x;
    } else if (a == "--warmup") {
      o.warmup = (int)to_int(value, "--warmup");
    } else if (a == "--iters") {
      o.iters = (int)to_int(value, "--iters");
      if (o.iters < 1) fail("--iters must be at least 1");
    } else if (a == "--input_sets") {
      o.input_sets = (int)to_int(value, "--input_sets");
    } else if (a == "--results_dir") {
      o.results_dir = value;
    } else if (a == "--program_path") {
      // Accepted for the CUCo/ShinkaEvolve evaluator contract; the program is this binary.
    } else {
      fail("unknown flag '" + a + "'");
    }
  }
  if (o.sizes.empty()) fail("no --size given");
  const char* mp = std::getenv("BRAID_METRICS_PATH");
  if (mp != nullptr && *mp != '\0') o.metrics_path = mp;
  return o;
}

inline std::string results_path(const Options& o, const char* file) {
  if (!o.results_dir.empty()) return o.results_dir + "/" + file;
  if (!o.metrics_path.empty()) {
    if (std::string(file) == "metrics.json") return o.metrics_path;
    const size_t slash = o.metrics_path.rfind('/');
    return (slash == std::string::npos ? std::string(".") : o.metrics_path.substr(0, slash)) + "/" + file;
  }
  return std::string("./") + file;
}

// THE place where results leave the harness (rank 0 only, after the candidate has finished and
// its teardown ran): today correct.json and, in bench mode, metrics.json in the results folder.
// Switching to braid's verdict channel changes this function only.
inline void publish_results(const Report& r, const Options& o) {
  write_file_atomic(results_path(o, "correct.json"), correct_json(r.correct, r.error));
  if (o.mode == Mode::Bench && !r.sizes.empty()) write_file_atomic(results_path(o, "metrics.json"), metrics_json(r, o));
}
inline void write_results(const Report& r, const Options& o) { publish_results(r, o); }

// The frozen main: bootstrap, run, rank 0 writes the results. Exit 0 when the candidate ran and
// verified, 1 otherwise (the files say why).
inline int harness_main(int argc, char** argv, const Workload& wl, const Candidate& cand) {
  const Options opt = parse_options(argc, argv);
  RankInfo me;
  try {
    me = bootstrap_rank();
    Harness h(opt, wl, cand);
    const Report r = h.run(me);
    if (me.rank == 0) publish_results(r, opt);
    if (me.rank == 0) std::printf("%s", r.correct ? "correct\n" : ("incorrect: " + r.error + "\n").c_str());
    return r.correct ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "harness: %s\n", e.what());
    announce_failure(me.rank, e.what());
    try {
      Report failed;
      failed.error = e.what();
      publish_results(failed, opt);
    } catch (const std::exception&) {
    }
    return 1;
  }
}

}  // namespace braid::dev
