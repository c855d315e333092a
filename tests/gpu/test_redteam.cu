// Red team of the frozen harness on the real GEMM + AllGather workload (gemm_allgather.cuh):
// candidates written to cheat, each of which must be rejected or scored honestly (issue #17).
// One process per GPU (fork); at 1 rank the cheats that need peers are skipped visibly. Every
// candidate ends in one line "REDTEAM <name>: <verdict>"; exit 77 without a GPU.
//
//   result_cache       copies a cached C when the first bytes of its input repeat
//   last_call_only     does the work only in the last call (the old harness verified only that one)
//   unjoined_stream    works on a stream of its own that run() never joins
//   legacy_stream      works on the legacy default stream (not ordered with the timed stream)
//   one_rank_only      gathers everywhere, multiplies on rank 0 only (2 ranks)
//   racy               multiplies before the gather is known to have landed, after a random delay
//   wrong_once         skips the GEMM in one call (the sixth) only
//   nan_bad_tolerance  writes NaN into C, run with absurd tolerances (NaN must still fail; the
//                      command line refuses non-finite or negative ones: test_harness_report.cu)
//   work_in_setup      computes C once in setup() and copies it in every run()
//   work_in_teardown   leaves run() empty and computes C in teardown()
//   work_after_return  a host thread launches the GEMM after run() has returned (timer dodging)
//   slows_baseline     a host thread keeps the GPU busy outside run(), slowing the baseline and
//                      the bound it is compared with
//   lying_events       honest work, but the CUDA events report 1/5 of the time (a tampered timer):
//                      flagged after a strict re-run, score withheld
//   lying_clocks       events and host clock both report 1/5: faster than the bound allows;
//                      flagged after a strict re-run
#include <cublas_v2.h>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "braid/harness.cuh"
#include "gemm_allgather.cuh"
#include "gpu_check.cuh"

using namespace braid::dev;
using braid::dev::test::Checker;
using gemm_allgather::gemm_rows;

namespace {

constexpr int64_t kSize = 8192;  // M = N = K: a ~1.5 ms GEMM on an H100/H200 (timer lies show above the clock slack)
constexpr int kWarmup = 2;
constexpr int kIters = 8;

// The honest program (seed.cu): ncclAllGather into a receive buffer, one GEMM.
struct Gemm {
  cublasHandle_t handle = nullptr;
  void* extra = nullptr;  // per-cheat state
};
Gemm& gemm_of(Context& c) { return *static_cast<Gemm*>(c.candidate_state); }

void setup_honest(Context& c) {
  c.alloc("gathered", (size_t)c.problem.size * (size_t)c.problem.size * 2, Role::Receive, DType::BF16);
  auto* g = new Gemm;
  GAG_CUBLAS(cublasCreate(&g->handle));
  c.candidate_state = g;
}
void teardown_honest(Context& c) {
  Gemm& g = gemm_of(c);
  cublasDestroy(g.handle);
  delete &g;
  c.candidate_state = nullptr;
}
void gather(Context& c, cudaStream_t s) {
  const Buffer& a = c.buffer("a");
  BRAID_NCCL(ncclAllGather(a.ptr, c.buffer("gathered").ptr, a.count, ncclBfloat16, c.comm, s));
}
void multiply(Context& c, cudaStream_t s) {
  GAG_CUBLAS(cublasSetStream(gemm_of(c).handle, s));
  const int64_t S = c.problem.size;
  gemm_rows(gemm_of(c).handle, c.buffer("gathered").as<__nv_bfloat16>(), S, c.buffer("w").as<__nv_bfloat16>(), c.buffer("c").as<__nv_bfloat16>(),
            S, S);
}
void honest_run(Context& c, cudaStream_t s) {
  gather(c, s);
  multiply(c, s);
}
Requirements no_requirements(const Problem&) { return {}; }
Candidate honest() { return {no_requirements, setup_honest, honest_run, teardown_honest}; }

// --- result cache keyed on the first 64 bytes of "a" (the old bench alternated two input sets) ---
int g_cache_hits = 0;
struct Cache {
  std::map<std::string, void*> c_by_key;
};
Candidate result_cache() {
  return {no_requirements,
          [](Context& c) {
            setup_honest(c);
            gemm_of(c).extra = new Cache;
            g_cache_hits = 0;
          },
          [](Context& c, cudaStream_t s) {
            auto& cache = *static_cast<Cache*>(gemm_of(c).extra);
            std::string key(64, '\0');
            BRAID_CUDA(cudaMemcpyAsync(key.data(), c.buffer("a").ptr, 64, cudaMemcpyDeviceToHost, s));
            BRAID_CUDA(cudaStreamSynchronize(s));
            const Buffer& out = c.buffer("c");
            auto hit = cache.c_by_key.find(key);
            if (hit != cache.c_by_key.end()) {
              ++g_cache_hits;
              BRAID_CUDA(cudaMemcpyAsync(out.ptr, hit->second, out.bytes, cudaMemcpyDeviceToDevice, s));
              return;
            }
            honest_run(c, s);
            void* copy = nullptr;
            BRAID_CUDA(cudaMalloc(&copy, out.bytes));
            BRAID_CUDA(cudaMemcpyAsync(copy, out.ptr, out.bytes, cudaMemcpyDeviceToDevice, s));
            cache.c_by_key[key] = copy;
          },
          [](Context& c) {
            auto* cache = static_cast<Cache*>(gemm_of(c).extra);
            for (auto& [k, p] : cache->c_by_key) cudaFree(p);
            delete cache;
            teardown_honest(c);
          }};
}

// --- work only in the last call: it knows warm-up + iterations (as if read from its command line)
Candidate last_call_only() {
  return {no_requirements, setup_honest,
          [](Context& c, cudaStream_t s) {
            gather(c, s);  // the collective everywhere, so no rank hangs
            if (c.iteration == (uint32_t)(kWarmup + kIters - 1)) multiply(c, s);
          },
          teardown_honest};
}

// --- honest work on a stream the harness does not know (own stream, or the legacy default one)
Candidate unjoined(bool legacy) {
  return {no_requirements,
          [legacy](Context& c) {
            setup_honest(c);
            cudaStream_t own = cudaStreamLegacy;
            if (!legacy) BRAID_CUDA(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking));
            gemm_of(c).extra = own;
          },
          [](Context& c, cudaStream_t s) {
            cudaStream_t own = static_cast<cudaStream_t>(gemm_of(c).extra);
            cudaEvent_t go = nullptr;
            BRAID_CUDA(cudaEventCreateWithFlags(&go, cudaEventDisableTiming));
            BRAID_CUDA(cudaEventRecord(go, s));
            BRAID_CUDA(cudaStreamWaitEvent(own, go, 0));
            BRAID_CUDA(cudaEventDestroy(go));
            honest_run(c, own);
          },
          [legacy](Context& c) {
            if (!legacy) cudaStreamDestroy(static_cast<cudaStream_t>(gemm_of(c).extra));
            teardown_honest(c);
          }};
}

// --- output written on rank 0 only
Candidate one_rank_only() {
  return {no_requirements, setup_honest,
          [](Context& c, cudaStream_t s) {
            gather(c, s);
            if (c.rank == 0) multiply(c, s);
          },
          teardown_honest};
}

// --- a race that passes sometimes: the GEMM waits a random time instead of for the gather
__global__ void sleep_kernel(unsigned ns) {
  for (unsigned done = 0; done < ns; done += 1000) __nanosleep(1000);
}
Candidate racy() {
  return {no_requirements,
          [](Context& c) {
            setup_honest(c);
            gemm_of(c).extra = c.new_stream();
          },
          [](Context& c, cudaStream_t s) {
            gather(c, static_cast<cudaStream_t>(gemm_of(c).extra));
            sleep_kernel<<<1, 1, 0, s>>>((unsigned)(std::rand() % 30000));  // 0 .. 30 us: about the gather
            BRAID_LAUNCHED();
            multiply(c, s);
          },
          teardown_honest};
}

// --- wrong in one call only (the sixth): every call is verified, so this one fails
Candidate wrong_once() {
  return {no_requirements, setup_honest,
          [](Context& c, cudaStream_t s) {
            gather(c, s);
            if (c.iteration != 5) multiply(c, s);
          },
          teardown_honest};
}

// --- NaN in the output (run with absurd tolerances: NaN must fail whatever they are)
__global__ void nan_kernel(__nv_bfloat16* p, size_t n) {
  for (size_t i = threadIdx.x; i < n; i += 4099 * blockDim.x) p[i] = __float2bfloat16(nanf(""));
}
Candidate nan_output() {
  return {no_requirements, setup_honest,
          [](Context& c, cudaStream_t s) {
            honest_run(c, s);
            nan_kernel<<<1, 32, 0, s>>>(c.buffer("c").as<__nv_bfloat16>(), c.buffer("c").count);
            BRAID_LAUNCHED();
          },
          teardown_honest};
}

// --- C computed once in setup(), copied in every run()
Candidate work_in_setup() {
  return {no_requirements,
          [](Context& c) {
            setup_honest(c);
            Buffer& stash = c.alloc("stash", c.buffer("c").bytes, Role::State, DType::BF16);
            honest_run(c, c.stream);
            BRAID_CUDA(cudaMemcpyAsync(stash.ptr, c.buffer("c").ptr, stash.bytes, cudaMemcpyDeviceToDevice, c.stream));
            BRAID_CUDA(cudaStreamSynchronize(c.stream));
          },
          [](Context& c, cudaStream_t s) {
            BRAID_CUDA(cudaMemcpyAsync(c.buffer("c").ptr, c.buffer("stash").ptr, c.buffer("c").bytes, cudaMemcpyDeviceToDevice, s));
          },
          teardown_honest};
}

// --- run() does nothing; the work happens in teardown()
Candidate work_in_teardown() {
  return {no_requirements, setup_honest, [](Context&, cudaStream_t) {},
          [](Context& c) {
            honest_run(c, c.stream);
            BRAID_CUDA(cudaStreamSynchronize(c.stream));
            teardown_honest(c);
          }};
}

// --- run() gathers and returns; a host thread launches the GEMM 1 ms later on its own stream
struct Deferred {
  std::thread worker;
  std::mutex m;
  std::condition_variable cv;
  int pending = 0;
  bool stop = false;
  cudaStream_t stream = nullptr;
  cublasHandle_t handle = nullptr;
};
Candidate work_after_return() {
  return {no_requirements,
          [](Context& c) {
            setup_honest(c);
            auto* d = new Deferred;
            BRAID_CUDA(cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking));
            GAG_CUBLAS(cublasCreate(&d->handle));
            GAG_CUBLAS(cublasSetStream(d->handle, d->stream));
            int dev = 0;
            BRAID_CUDA(cudaGetDevice(&dev));
            const __nv_bfloat16* gathered = c.buffer("gathered").as<__nv_bfloat16>();
            const __nv_bfloat16* w = c.buffer("w").as<__nv_bfloat16>();
            __nv_bfloat16* out = c.buffer("c").as<__nv_bfloat16>();
            const int64_t S = c.problem.size;
            d->worker = std::thread([d, dev, gathered, w, out, S] {
              cudaSetDevice(dev);
              std::unique_lock<std::mutex> lock(d->m);
              for (;;) {
                d->cv.wait(lock, [d] { return d->stop || d->pending > 0; });
                if (d->stop) return;
                --d->pending;
                lock.unlock();
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
                try {
                  gemm_rows(d->handle, gathered, S, w, out, S, S);
                } catch (const std::exception&) {
                }
                lock.lock();
              }
            });
            gemm_of(c).extra = d;
          },
          [](Context& c, cudaStream_t s) {
            gather(c, s);
            auto* d = static_cast<Deferred*>(gemm_of(c).extra);
            std::lock_guard<std::mutex> lock(d->m);
            ++d->pending;
            d->cv.notify_one();
          },
          [](Context& c) {
            auto* d = static_cast<Deferred*>(gemm_of(c).extra);
            {
              std::lock_guard<std::mutex> lock(d->m);
              d->stop = true;
            }
            d->cv.notify_one();
            d->worker.join();
            cudaStreamSynchronize(d->stream);
            cublasDestroy(d->handle);
            cudaStreamDestroy(d->stream);
            delete d;
            teardown_honest(c);
          }};
}

// --- slows the figures it is compared with: a host thread keeps the GPU busy with kernels that
// hold most of each SM's shared memory (so GEMM CTAs cannot share the SM) except for a few
// milliseconds after each run() call, i.e. mostly while the baseline, compute alone and
// communication alone are timed
__global__ void hog_kernel(long long cycles) {
  extern __shared__ unsigned char smem[];
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) smem[threadIdx.x] += 1;
}
struct Hog {
  std::thread worker;
  std::atomic<bool> stop{false};
  std::atomic<int64_t> quiet_until_ns{0};
  cudaStream_t stream = nullptr;
};
int64_t now_ns() { return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
Candidate slows_baseline() {
  return {no_requirements,
          [](Context& c) {
            setup_honest(c);
            auto* h = new Hog;
            BRAID_CUDA(cudaStreamCreateWithFlags(&h->stream, cudaStreamNonBlocking));
            constexpr int kSmem = 120 * 1024;
            BRAID_CUDA(cudaFuncSetAttribute(hog_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
            int dev = 0, sms = 0;
            BRAID_CUDA(cudaGetDevice(&dev));
            BRAID_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
            h->worker = std::thread([h, dev, sms] {
              cudaSetDevice(dev);
              while (!h->stop.load()) {
                if (now_ns() < h->quiet_until_ns.load()) {
                  std::this_thread::sleep_for(std::chrono::microseconds(100));
                  continue;
                }
                hog_kernel<<<sms, 32, kSmem, h->stream>>>(400000);  // ~0.2 ms at ~2 GHz
                cudaStreamSynchronize(h->stream);
              }
            });
            gemm_of(c).extra = h;
          },
          [](Context& c, cudaStream_t s) {
            static_cast<Hog*>(gemm_of(c).extra)->quiet_until_ns = now_ns() + 5'000'000;
            honest_run(c, s);
          },
          [](Context& c) {
            auto* h = static_cast<Hog*>(gemm_of(c).extra);
            h->stop = true;
            h->worker.join();
            cudaStreamSynchronize(h->stream);
            cudaStreamDestroy(h->stream);
            delete h;
            teardown_honest(c);
          }};
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

int run_rank(const RankInfo& me) {
  Checker check;
  check.rank = me.rank;
  std::srand(1234u + (unsigned)me.rank);
  const Workload wl = gemm_allgather::make_workload();
  Options bench;
  bench.mode = Mode::Bench;
  bench.sizes = {kSize};
  bench.seed = 11;
  bench.rtol = 0.02;
  bench.atol = 0.02;
  bench.warmup = kWarmup;
  bench.iters = kIters;

  auto run = [&](const Candidate& c, const Options& o, double event_scale = 1, double host_scale = 1) {
    Harness h(o, wl, c);
    h.distort_clocks_for_self_test(event_scale, host_scale);
    return h.run(me);
  };
  auto ms = [](const Report& r) { return r.sizes.empty() ? 0.0 : r.sizes[0].candidate.median_ms; };
  auto say = [&](const char* name, const std::string& verdict) {
    if (me.rank == 0) std::printf("REDTEAM %-18s %s\n", name, verdict.c_str());
    std::fflush(stdout);
  };
  auto rejected = [&](const char* name, const Report& r, const std::string& must_name) {
    const bool ok = !r.correct && contains(r.error, must_name);
    check.expect(ok, std::string("rejected: ") + name, r.error);
    say(name, ok ? "rejected: " + r.error : "NOT REJECTED: " + (r.correct ? std::string("accepted") : r.error));
  };
  char line[320];

  const Report ok = run(honest(), bench);
  const double honest_ms = ms(ok);
  const SizeReport* hs = ok.sizes.empty() ? nullptr : &ok.sizes[0];
  check.expect(ok.correct && hs != nullptr && hs->plausibility == Plausibility::Ok && ok.combined_score > 0,
               "honest seed program: correct, plausible, scored", ok.error + (hs ? " " + hs->plausibility_reason : ""));
  if (hs != nullptr) {
    std::snprintf(line, sizeof(line), "correct, %.4f ms (host clock %.4f ms), ratio to bound %.3f, score %.3f, plausibility %s", honest_ms,
                  hs->candidate_host.median_ms, honest_ms / std::max(1e-9, std::max(hs->compute.median_ms, hs->comm.median_ms)),
                  ok.combined_score, plausibility_name(hs->plausibility));
    say("honest", line);
  }
  // "Scored honestly": correct and timed at no less than 70 % of the honest program (the same work).
  auto scored_honestly = [&](const char* name, const Report& r, const std::string& extra = "") {
    const bool ok2 = r.correct && ms(r) >= 0.7 * honest_ms;
    std::snprintf(line, sizeof(line), "scored honestly: %.4f ms vs honest %.4f ms%s", ms(r), honest_ms, extra.c_str());
    check.expect(ok2, std::string("scored honestly: ") + name, r.correct ? line : r.error);
    say(name, ok2 ? line : std::string("NOT HONEST: ") + (r.correct ? line : r.error));
  };

  const Report cache = run(result_cache(), bench);
  scored_honestly("result_cache", cache, ", " + std::to_string(g_cache_hits) + " cache hits in " + std::to_string(kWarmup + kIters) + " calls");
  check.expect(g_cache_hits == 0, "result_cache: no input repeats, so the cache never hits", std::to_string(g_cache_hits) + " hits");

  rejected("last_call_only", run(last_call_only(), bench), "iteration 0:");

  for (bool legacy : {false, true}) {
    const char* name = legacy ? "legacy_stream" : "unjoined_stream";
    const Report r = run(unjoined(legacy), bench);
    if (r.correct) {
      scored_honestly(name, r, r.sizes[0].unjoined_work ? ", unjoined work timed and reported" : "");
    } else {
      rejected(name, r, "differs from the reference");
    }
  }

  if (me.world > 1) {
    rejected("one_rank_only", run(one_rank_only(), bench), "rank 1");
  } else {
    check.skip("rejected: one_rank_only", "needs 2 ranks");
    say("one_rank_only", "SKIP (needs 2 ranks)");
  }

  {
    // Each call is right or wrong by chance; one wrong call must fail it. If every call happened
    // to win the race, its outputs were right and it did the whole work: scored honestly.
    const Report r = run(racy(), bench);
    if (r.correct) scored_honestly("racy", r, " (won the race in every call)");
    else rejected("racy", r, "differs from the reference");
  }
  rejected("wrong_once", run(wrong_once(), bench), "iteration 5:");

  Options absurd = bench;
  absurd.rtol = 1e30;
  absurd.atol = 1e30;
  rejected("nan_bad_tolerance", run(nan_output(), absurd), "nan");

  rejected("work_in_setup", run(work_in_setup(), bench), "iteration 0:");
  rejected("work_in_teardown", run(work_in_teardown(), bench), "iteration 0:");

  {
    const Report r = run(work_after_return(), bench);
    if (r.correct) scored_honestly("work_after_return", r);
    else rejected("work_after_return", r, "differs from the reference");
  }

  {
    // Work kept running outside run() slows the baseline and the bound: flagged with the score
    // withheld, or (if the slowdown did not show) a score no better than the honest program's.
    const Report r = run(slows_baseline(), bench);
    const SizeReport* s = r.sizes.empty() ? nullptr : &r.sizes[0];
    const bool withheld = r.correct && s != nullptr && s->plausibility == Plausibility::Flagged && r.score_withheld && r.combined_score == 0;
    const bool honest_score = r.correct && s != nullptr && s->plausibility == Plausibility::Ok && r.combined_score <= 1.1 * ok.combined_score;
    std::snprintf(line, sizeof(line), "score %.3f vs honest %.3f, plausibility %s", r.combined_score, ok.combined_score,
                  s != nullptr ? plausibility_name(s->plausibility) : "-");
    check.expect(withheld || honest_score || !r.correct, "slows_baseline: score withheld, or not inflated", line);
    say("slows_baseline", withheld       ? "flagged, score withheld: " + s->plausibility_reason
                          : honest_score ? std::string("scored honestly: ") + line
                          : !r.correct   ? "rejected: " + r.error
                                         : std::string("NOT CAUGHT: ") + line);
  }

  // Tampered timers (the candidate's figures only): re-measured under the strict protocol and
  // flagged. Events that disagree with the host clock: score withheld. Both clocks lying (faster
  // than the bound, clocks agreeing): flagged in the metrics braid reads.
  for (bool host_too : {false, true}) {
    const char* name = host_too ? "lying_clocks" : "lying_events";
    const Report r = run(honest(), bench, 0.2, host_too ? 0.2 : 1.0);
    const SizeReport* s = r.sizes.empty() ? nullptr : &r.sizes[0];
    const bool withheld = r.score_withheld && r.combined_score == 0;
    const bool flagged = r.correct && s != nullptr && s->strict && s->plausibility == Plausibility::Flagged && (host_too || withheld);
    check.expect(flagged, std::string("flagged after a strict re-run: ") + name, s != nullptr ? s->plausibility_reason : r.error);
    say(name, flagged ? std::string(withheld ? "flagged, score withheld: " : "flagged: ") + s->plausibility_reason
                      : std::string("NOT FLAGGED: ") + (s != nullptr ? plausibility_name(s->plausibility) : r.error.c_str()));
  }

  if (me.rank == 0) std::printf("rank 0: %d passed, %d failed\n", check.passes, check.failures);
  return check.failures == 0 ? 0 : 1;
}

}  // namespace

int main() {
  const int gpus = gpu_count_or_skip(1);
  const int world = std::min(gpus, 2);  // everything here needs at most 2 ranks
  char tmpl[] = "/tmp/braid_redteam_XXXXXX";
  const char* dir = mkdtemp(tmpl);
  if (dir != nullptr) setenv("BRAID_EVAL_DIR", dir, 1);
  const int failed = spawn_local_ranks(world, run_rank);
  std::printf(failed ? "FAILED: %d of %d ranks\n" : "ALL PASSED (%d failed of %d ranks)\n", failed, world);
  return failed ? 1 : 0;
}
