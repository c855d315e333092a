// Self-tests of the frozen harness (braid/harness.cuh) with an honest candidate and deliberately
// dishonest ones, each of which must be caught: skipping communication after the first iteration,
// computing only its own rank's part (2 ranks or more: at 1 rank that is honest; skipped visibly),
// writing past a buffer, returning before work on a private
// stream finishes (the timing must still cover it), racing (no readiness wait), and asking for
// GIN or multimem where they are not allowed. One process per GPU (fork); exit 77 without a GPU.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "braid/harness.cuh"
#include "gpu_check.cuh"

using namespace braid::dev;
using braid::dev::test::Checker;

namespace {

constexpr int kCtas = 32;
constexpr int kThreads = 512;

// The workload: all-gather of a float shard followed by a fused elementwise consumer,
// out = 2 * gathered + 1 (a stand-in for the GEMM of the later GEMM+AllGather workload).
__global__ void scale_kernel(const float* gathered, float* out, size_t begin, size_t end) {
  for (size_t i = begin + blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < end; i += (size_t)gridDim.x * blockDim.x)
    out[i] = 2.0f * gathered[i] + 1.0f;
}
__global__ void own_part_kernel(const float* in, float* out, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) out[i] = 2.0f * in[i] + 1.0f;
}
__global__ void poke_kernel(float* p) { *p = 42.0f; }

void scale(const float* gathered, float* out, size_t total, cudaStream_t s) {
  scale_kernel<<<264, 512, 0, s>>>(gathered, out, 0, total);
  BRAID_LAUNCHED();
}

Workload make_workload() {
  Workload w;
  w.name = "allgather_scale";
  w.buffers = [](const Problem& p) {
    const size_t n = (size_t)p.size;
    return std::vector<BufferSpec>{{"in", Role::Input, DType::F32, n, true}, {"out", Role::Output, DType::F32, n * (size_t)p.world, false}};
  };
  w.init = [](Context& c) { c.alloc("workload_gathered", c.buffer("out").bytes, Role::Intermediate, DType::F32); };
  auto gather = [](Context& c, cudaStream_t s) {
    BRAID_NCCL(ncclAllGather(c.buffer("in").ptr, c.buffer("workload_gathered").ptr, c.buffer("in").count, ncclFloat, c.comm, s));
  };
  auto compute = [](Context& c, cudaStream_t s) { scale(c.buffer("workload_gathered").as<float>(), c.buffer("out").as<float>(), c.buffer("out").count, s); };
  w.reference = [=](Context& c, cudaStream_t s) { gather(c, s); compute(c, s); };
  w.baseline = w.reference;
  w.compute_alone = compute;
  w.comm_alone = gather;
  w.comm_bytes = [](const Problem& p) { return (double)(p.world - 1) * (double)p.size * 4.0; };
  return w;
}

Requirements lsa_requirements(const Problem&) {
  Requirements r;
  r.lsa_barriers = barrier_count(Issuer::Cta, kCtas, kThreads);
  return r;
}

void setup_recv(Context& c) { c.alloc_window("recv", c.buffer("out").bytes, Role::Receive, DType::F32); }

void push_all_gather(Context& c, cudaStream_t s) {
  const Buffer& in = c.buffer("in");
  const Buffer& recv = c.buffer("recv");
  const size_t tile = round_up((in.bytes + kCtas - 1) / kCtas, 16);
  all_gather_kernel<Issuer::Cta, 4><<<kCtas, kThreads, 0, s>>>(c.dev_comm, recv.win, 0, in.bytes, in.ptr, in.bytes, tile, 0);
  BRAID_LAUNCHED();
}

void honest_run(Context& c, cudaStream_t s) {
  push_all_gather(c, s);
  scale(c.buffer("recv").as<float>(), c.buffer("out").as<float>(), c.buffer("out").count, s);
}

Candidate honest() { return {lsa_requirements, setup_recv, honest_run, nullptr}; }

// Communicates in the first iteration only; later iterations reuse whatever the receive buffer holds.
Candidate skips_communication() {
  return {lsa_requirements, setup_recv,
          [](Context& c, cudaStream_t s) {
            if (c.iteration == 0) push_all_gather(c, s);
            scale(c.buffer("recv").as<float>(), c.buffer("out").as<float>(), c.buffer("out").count, s);
          },
          nullptr};
}

// Computes only this rank's block of the output, from its own input.
Candidate own_part_only() {
  return {lsa_requirements, setup_recv,
          [](Context& c, cudaStream_t s) {
            const Buffer& in = c.buffer("in");
            own_part_kernel<<<132, 512, 0, s>>>(in.as<float>(), c.buffer("out").as<float>() + (size_t)c.rank * in.count, in.count);
            BRAID_LAUNCHED();
          },
          nullptr};
}

// Honest, plus one float written just past the end of the output.
Candidate writes_past_buffer() {
  return {lsa_requirements, setup_recv,
          [](Context& c, cudaStream_t s) {
            honest_run(c, s);
            poke_kernel<<<1, 1, 0, s>>>(c.buffer("out").as<float>() + c.buffer("out").count);
            BRAID_LAUNCHED();
          },
          nullptr};
}

// Does the honest work on a stream of its own and returns without joining it.
Candidate private_stream() {
  return {lsa_requirements,
          [](Context& c) {
            setup_recv(c);
            cudaStream_t own = nullptr;
            BRAID_CUDA(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking));
            c.candidate_state = own;
          },
          [](Context& c, cudaStream_t s) {
            cudaStream_t own = static_cast<cudaStream_t>(c.candidate_state);
            cudaEvent_t go = nullptr;
            BRAID_CUDA(cudaEventCreateWithFlags(&go, cudaEventDisableTiming));
            BRAID_CUDA(cudaEventRecord(go, s));
            BRAID_CUDA(cudaStreamWaitEvent(own, go, 0));
            BRAID_CUDA(cudaEventDestroy(go));
            honest_run(c, own);
          },
          [](Context& c) { cudaStreamDestroy(static_cast<cudaStream_t>(c.candidate_state)); }};
}

// Pushes on a second stream and consumes on the timed stream without waiting for the data.
Candidate races() {
  return {lsa_requirements,
          [](Context& c) {
            setup_recv(c);
            c.candidate_state = c.new_stream();
          },
          [](Context& c, cudaStream_t s) {
            push_all_gather(c, static_cast<cudaStream_t>(c.candidate_state));
            scale(c.buffer("recv").as<float>(), c.buffer("out").as<float>(), c.buffer("out").count, s);
          },
          nullptr};
}

Candidate asks_for(bool gin, bool multimem) {
  return {[=](const Problem& p) {
            Requirements r = lsa_requirements(p);
            r.gin = gin;
            r.multimem = multimem;
            return r;
          },
          setup_recv, honest_run, nullptr};
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

int run_rank(const RankInfo& me) {
  Checker check;
  check.rank = me.rank;
  const Workload wl = make_workload();
  Options bench;
  bench.mode = Mode::Bench;
  bench.sizes = {16 << 20};  // floats per rank: 64 MiB shards
  bench.seed = 7;
  bench.rtol = 1e-6;
  bench.atol = 0;
  bench.warmup = 2;
  bench.iters = 8;
  Options verify = bench;
  verify.mode = Mode::Verify;

  auto run = [&](const Options& o, const Candidate& c) { return Harness(o, wl, c).run(me); };
  auto summary = [](const Report& r) {
    char buf[320];
    const SizeReport& s = r.sizes.empty() ? SizeReport{} : r.sizes[0];
    std::snprintf(buf, sizeof(buf), "candidate %.4f ms (host clock %.4f ms), baseline %.4f ms, compute %.4f ms, comm %.4f ms, score %.3f",
                  s.candidate.median_ms, s.candidate_host.median_ms, s.baseline.median_ms, s.compute.median_ms, s.comm.median_ms, r.combined_score);
    return std::string(buf);
  };

  const Report ok_verify = run(verify, honest());
  check.expect(ok_verify.correct, "honest candidate passes --mode verify", ok_verify.error);

  const Report ok = run(bench, honest());
  check.expect(ok.correct, "honest candidate passes --mode bench", ok.error);
  const SizeReport& os = ok.sizes.at(0);
  check.expect(os.candidate.median_ms > 0 && os.baseline.median_ms > 0 && os.compute.median_ms > 0 && os.comm.median_ms > 0,
               "baseline, compute alone and communication alone are timed in the same run", summary(ok));
  check.expect(os.candidate.makespan_ms.size() == (size_t)bench.iters, "one makespan per timed iteration");
  check.expect(ok.combined_score > 0, "combined_score is the speedup over the baseline", summary(ok));
  check.expect(!os.unjoined_work, "honest candidate leaves no work behind");
  check.expect(os.plausibility == Plausibility::Ok && Harness::implausibility(os).empty(), "honest candidate's timing is plausible",
               Harness::implausibility(os));
  check.expect(os.candidate_host.makespan_ms.size() == (size_t)bench.iters && os.candidate_host.median_ms >= os.candidate_events.median_ms * 0.9,
               "the host clock times every candidate iteration too (and agrees with the events)", summary(ok));
  if (me.rank == 0) {
    std::printf("honest: %s, %d ranks\n", summary(ok).c_str(), me.world);
    char tmpl[] = "/tmp/braid_harness_XXXXXX";
    const char* dir = mkdtemp(tmpl);
    Options o = bench;
    o.results_dir = dir != nullptr ? dir : ".";
    write_results(ok, o);
    const std::string metrics = read_text(o.results_dir + "/metrics.json"), correct = read_text(o.results_dir + "/correct.json");
    check.expect(contains(correct, "\"correct\": true") && contains(metrics, "\"combined_score\"") && contains(metrics, "\"text_feedback\"") &&
                     contains(metrics, "\"public\"") && contains(metrics, "\"private\"") && contains(metrics, "\"plausibility\": \"ok\"") &&
                     contains(metrics, "\"ratio_to_bound\""),
                 "results files follow the metrics contract", metrics + correct);
    std::printf("metrics.json: %s", metrics.c_str());
  }

  const Report skip = run(bench, skips_communication());
  check.expect(!skip.correct && contains(skip.error, "differs from the reference") && contains(skip.error, "iteration 1:"),
               "caught: skips communication after the first iteration (named: iteration 1)", skip.error);
  if (me.rank == 0) std::printf("  -> %s\n", skip.error.c_str());

  // At 1 rank its own part is the whole output: honest there, so only checked where ranks > 1.
  if (me.world > 1) {
    const Report own = run(bench, own_part_only());
    check.expect(!own.correct && contains(own.error, "expected"), "caught: computes only its own rank's part", own.error);
    if (me.rank == 0) std::printf("  -> %s\n", own.error.c_str());
  } else {
    check.skip("caught: computes only its own rank's part", "needs 2 ranks (at 1 rank its own part is the whole output)");
  }

  const Report past = run(bench, writes_past_buffer());
  check.expect(!past.correct && contains(past.error, "canary") && contains(past.error, "'out'"), "caught: writes past a buffer", past.error);
  if (me.rank == 0) std::printf("  -> %s\n", past.error.c_str());

  const Report priv = run(bench, private_stream());
  const double honest_ms = os.candidate.median_ms, priv_ms = priv.sizes.empty() ? 0 : priv.sizes[0].candidate.median_ms;
  check.expect(!priv.sizes.empty() && priv.sizes[0].unjoined_work && priv_ms >= 0.7 * honest_ms,
               "caught: returns before its private stream finishes (timing still covers the work)",
               "private " + std::to_string(priv_ms) + " ms vs honest " + std::to_string(honest_ms) + " ms");
  if (me.rank == 0) std::printf("  -> private-stream candidate timed at %.4f ms (honest %.4f ms)\n", priv_ms, honest_ms);

  const Report race = run(bench, races());
  check.expect(!race.correct, "caught: races (consumes without a readiness wait)", race.error);
  if (me.rank == 0) std::printf("  -> %s\n", race.error.c_str());

  const Report mm = run(verify, asks_for(false, true));
  check.expect(!mm.correct && contains(mm.error, "multimem"), "rejected: a candidate asking for multimem", mm.error);
  if (!ok.gin_available) {
    const Report gin = run(verify, asks_for(true, false));
    check.expect(!gin.correct && contains(gin.error, "GIN"), "rejected: GIN requested where the platform has none", gin.error);
  }

  if (me.rank == 0) std::printf("rank 0: %d passed, %d failed\n", check.passes, check.failures);
  return check.failures == 0 ? 0 : 1;
}

}  // namespace

int main() {
  const int gpus = gpu_count_or_skip(1);
  const int world = std::min(gpus, kMaxLsaPeers);
  char tmpl[] = "/tmp/braid_eval_XXXXXX";
  const char* dir = mkdtemp(tmpl);
  if (dir != nullptr) setenv("BRAID_EVAL_DIR", dir, 1);
  const int failed = spawn_local_ranks(world, run_rank);
  std::printf(failed ? "FAILED: %d of %d ranks\n" : "ALL PASSED (%d failed of %d ranks)\n", failed, world);
  return failed ? 1 : 0;
}
