// braid/harness/protocol.cuh -- the measurement protocol (class Harness): per size, set-up,
// fresh inputs, timed and verified calls, plausibility re-checks, every rank's figures gathered.
// Part of braid/harness.cuh, whose contract applies.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "braid/comm/topology.cuh"
#include "braid/comm/types.cuh"
#include "braid/harness/context.cuh"
#include "braid/harness/options.cuh"
#include "braid/harness/plausibility.cuh"
#include "braid/harness/report.cuh"
#include "braid/harness/timing.cuh"
#include "braid/harness/types.cuh"
#include "braid/harness/verify.cuh"
#include "braid/runtime.cuh"

namespace braid::dev {

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

  // "" when the size's figures are believable, else why not (braid/harness/plausibility.cuh).
  static std::string implausibility(const SizeReport& s) { return ::braid::dev::implausibility(s); }
  static std::string foreign_work(const SizeReport& s) { return ::braid::dev::foreign_work(s); }
  static std::string clock_disagreement(const SizeReport& s) { return ::braid::dev::clock_disagreement(s); }

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

  // How far one size got: a failure undoes exactly what was made, and its record names the stage.
  struct SizeProgress {
    std::string stage = "requirements";
    bool dev_comm_made = false;
    bool workload_inited = false;
    bool candidate_set_up = false;
  };

  Problem problem_of(int64_t size) const {
    Problem prob;
    prob.size = size;
    prob.rank = me_.rank;
    prob.world = me_.world;
    prob.platform = platform_;
    return prob;
  }

  // One size: set up, time and verify every call, tear down, then every rank's verdict and
  // figures gathered.
  SizeReport run_size(int64_t size, bool strict) {
    SizeReport sr;
    sr.size = size;
    sr.strict = strict;
    RankVerdict verdict;
    verdict.rank = me_.rank;
    std::vector<double> durations[kTimings];
    Context ctx;
    SizeProgress progress;
    try {
      set_up_size(ctx, problem_of(size), progress);
      measure_size(ctx, strict, progress, durations, verdict);
      tear_down_size(ctx, progress);
    } catch (const std::exception& e) {
      record_failure(e, progress.stage, verdict);
    }
    release_size(ctx, progress);
    gather(sr, verdict, durations);
    return sr;
  }

  // The candidate's requirements checked against what braid and the platform allow.
  void check_requirements(const Requirements& req) const {
    if (req.multimem) throw DeviceError("candidate asks for multimem (NVLink multicast), which braid keeps off");
    if ((req.gin || req.gin_signals || req.gin_counters || req.rail_gin_barriers) && !platform_.gin)
      throw DeviceError("candidate asks for GIN but this platform has no GIN backend (no RDMA NIC); choose the backend with effective_backend()");
  }

  // The device communicator for `req`, into ctx.dev_comm (with ctx.resource and ctx.ll_a2a).
  void create_dev_comm(const Requirements& req, Context& ctx) {
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
  }

  // Untimed: requirements, device communicator, the workload's buffers and init, the candidate's
  // setup, then every rank meets.
  void set_up_size(Context& ctx, Problem prob, SizeProgress& progress) {
    Requirements req = cand_.requirements ? cand_.requirements(prob) : Requirements{};
    check_requirements(req);
    progress.stage = "ncclDevCommCreate";
    create_dev_comm(req, ctx);
    progress.dev_comm_made = true;
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

    progress.stage = "workload buffers";
    for (const BufferSpec& spec : wl_.buffers(prob))
      ctx.allocate(spec.name, spec.count * dtype_size(spec.dtype), spec.role, spec.dtype, spec.symmetric);
    workload_buffers_ = ctx.buffers().size();
    progress.stage = "workload init";
    if (wl_.init) wl_.init(ctx);
    progress.workload_inited = true;
    progress.stage = "candidate setup";
    if (cand_.setup) cand_.setup(ctx);
    progress.candidate_set_up = true;
    BRAID_CUDA(cudaDeviceSynchronize());
    barrier_->wait();
  }

  // Every call timed and verified (the run secret drawn only now, after setup), then the canaries.
  void measure_size(Context& ctx, bool strict, SizeProgress& progress, std::vector<double> (&durations)[kTimings], RankVerdict& verdict) {
    progress.stage = "inputs and reference";
    run_secret_ = draw_run_secret(ctx.problem.size);
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
    time_phases(ctx, phases, warmup, iters, strict, durations, &unjoined, &progress.stage, verdict);
    if (CallTrace::enabled()) trace_.print(me_.rank, ctx.problem.size, idle_tail_ms_);
    verdict.unjoined_work = unjoined ? 1 : 0;
    progress.stage = "verification";
    check_canaries(ctx, stream_, verdict);
  }

  // The normal end of a size: the candidate's teardown, then the workload's finish.
  void tear_down_size(Context& ctx, SizeProgress& progress) {
    progress.stage = "candidate teardown";
    if (cand_.teardown) cand_.teardown(ctx);
    progress.candidate_set_up = false;
    if (wl_.finish) wl_.finish(ctx);
    progress.workload_inited = false;
  }

  // A failure that leaves the rank usable (bad requirement, failed check) is reported through
  // the gather; anything else ends this rank (rethrown), and the others stop when they see the
  // announcement instead of spinning on a dead peer.
  void record_failure(const std::exception& e, const std::string& stage, RankVerdict& verdict) {
    verdict.ok = 0;
    std::snprintf(verdict.error, sizeof(verdict.error), "%s: %s", stage.c_str(), e.what());
    const cudaError_t sticky = cudaDeviceSynchronize();
    if (sticky != cudaSuccess || stage == "candidate run" || stage == "baseline" || stage == "compute alone" ||
        stage == "communication alone" || stage == "candidate setup" || stage == "inputs and reference") {
      announce_failure(me_.rank, verdict.error);
      throw DeviceError(std::string("rank ") + std::to_string(me_.rank) + ": " + verdict.error);
    }
  }

  // After a size, whichever way it ended: what is still set up is undone (failures there are
  // ignored: the verdict is already written), every rank meets, buffers and devComm are freed.
  void release_size(Context& ctx, const SizeProgress& progress) {
    if (progress.candidate_set_up && cand_.teardown) {
      try { cand_.teardown(ctx); } catch (const std::exception&) {}
    }
    if (progress.workload_inited && wl_.finish) {
      try { wl_.finish(ctx); } catch (const std::exception&) {}
    }
    cudaDeviceSynchronize();
    barrier_->wait();
    free_output_copies();
    ctx.release_all();
    if (progress.dev_comm_made) ncclDevCommDestroy(comm_, &ctx.dev_comm);
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
    const auto h_recorded = std::chrono::steady_clock::now();
    fn(ctx, stream_);
    const auto h_ran = std::chrono::steady_clock::now();
    for (cudaStream_t s : ctx.extra_streams()) {
      BRAID_CUDA(cudaEventRecord(join_, s));
      BRAID_CUDA(cudaStreamWaitEvent(stream_, join_, 0));
    }
    BRAID_CUDA(cudaEventRecord(end_, stream_));
    const auto h_joined = std::chrono::steady_clock::now();
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
    auto ms_between = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
    t.record_ms = ms_between(h0, h_recorded);
    t.run_ms = ms_between(h_recorded, h_ran);
    t.join_ms = ms_between(h_ran, h_joined);
    t.wait_ms = ms_between(h_joined, t_end);
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
        if (CallTrace::enabled() && it >= warmup) trace_.add(p, t);
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

  // All ranks exchange verdicts and per-iteration durations.
  void gather(SizeReport& sr, const RankVerdict& mine, std::vector<double> (&durations)[kTimings]) {
    const int n = me_.world;
    std::vector<RankVerdict> all((size_t)n);
    char* dev = nullptr;
    BRAID_CUDA(cudaMalloc(&dev, sizeof(RankVerdict) * (size_t)n));
    // Stream-ordered: a pageable cudaMemcpy may return before its DMA lands, and stream_ does not
    // wait for the legacy stream, so the gather could read the allocation's stale bytes.
    BRAID_CUDA(cudaMemcpyAsync(dev + sizeof(RankVerdict) * (size_t)me_.rank, &mine, sizeof(RankVerdict), cudaMemcpyHostToDevice, stream_));
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
    for (int k = 0; k < kTimings; ++k) *timings[k] = timing_of(makespans(durations[k], comm_, stream_));
    const Problem prob = problem_of(sr.size);
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
  CallTrace trace_;  // BRAID_HARNESS_TRACE: where each call's host clock went
  uint64_t run_secret_ = 0;
  size_t workload_buffers_ = 0;
  std::vector<std::pair<Buffer*, void*>> output_copies_;

 public:
  ~Harness() { free_output_copies(); }
};

}  // namespace braid::dev
