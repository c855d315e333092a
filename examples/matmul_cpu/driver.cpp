// matmul_cpu's driver (braid_split.hpp; workload.yaml `driver_build`): trusted, built once
// from the workload folder, run in a process of its own beside the candidate's worker.
//   driver --mode verify|bench --seed S --results_dir D [--worker ./program.out]
// verify: two calls, each on fresh random inputs drawn from the seed, C poisoned with NaN and
//         guarded by canary bands; every element checked against a double reference.
// bench:  the naive triple loop timed here (3 runs), then 1 warm-up + 7 timed calls of the
//         worker's kernel, each on fresh inputs, each output checked as in verify;
//         combined_score = median naive time / median call (the round trip included: the
//         empty round trip, measured by pings, is reported as private.round_trip_ms).
// The inputs and the reference stay in this process; the worker sees copies in the shared
// region, and its output is copied out at its answer, before the check, so nothing it does
// later counts.
#define BRAID_MATMUL_DRIVER
#include "program.cpp"  // the workload's own harness: inputs, check, naive loop, median

namespace {

using namespace harness;

// The shared region: A, B, C with its canary bands, scratch (floats).
constexpr std::size_t kMatrix = std::size_t(kN) * kN * sizeof(float);
constexpr std::size_t kOffA = 0, kOffB = kMatrix, kOffC = 2 * kMatrix, kOffScratch = kOffC + kMatrix + 2 * kCanary * sizeof(float);
constexpr std::size_t kShared = kOffScratch + kMatrix;
constexpr int kPings = 9;

struct DriverArgs {
  Args args;
  std::string worker;
};

bool parse_driver_args(int argc, char** argv, DriverArgs& out) {
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--worker" && i + 1 < argc) out.worker = argv[++i];
    else rest.push_back(argv[i]);
  }
  return parse_args(static_cast<int>(rest.size()), rest.data(), out.args);
}

// One call of the worker's kernel on `in`: inputs and a poisoned C into the shared region
// (untimed), the round trip timed, C copied out at the answer and checked. "" when right.
std::string call_and_check(braid_split::Driver& driver, const Inputs& in, double& ms, bool& worker_gone) {
  char* shared = driver.shared();
  Output out;
  out.poison();
  std::memcpy(shared + kOffC, out.storage.data(), out.storage.size() * sizeof(float));
  std::fill_n(reinterpret_cast<float*>(shared + kOffScratch), kN * kN, std::numeric_limits<float>::quiet_NaN());
  // The inputs last, right before the call: a worker's thread watching for them gains nothing.
  std::memcpy(shared + kOffA, in.a.data(), kMatrix);
  std::memcpy(shared + kOffB, in.b.data(), kMatrix);
  braid_split::Call c = driver.call({std::uint64_t(kN), kOffA, kOffB, kOffC + kCanary * sizeof(float), kOffScratch});
  std::memcpy(out.storage.data(), shared + kOffC, out.storage.size() * sizeof(float));
  ms = c.ms;
  worker_gone = c.worker_gone;
  return c.ok ? check(in, out) : c.error;
}

int run(braid_split::Driver& driver, const Args& args) {
  const bool bench = args.mode == "bench";
  const char* gone_kind = bench ? "bench_failed" : "run_failed";
  std::vector<double> baseline_ms, kernel_ms;
  if (bench) {
    for (int r = 0; r < kBaselineRuns; ++r) {
      const Inputs in = draw_inputs(args.seed, 100 + r);
      Output out;
      out.poison();
      baseline_ms.push_back(time_ms([&] { naive_matmul(in.a.data(), in.b.data(), out.data(), kN); }));
    }
  }
  const int calls = bench ? kBenchRuns + 1 : kVerifyTrials;  // bench: call 0 warms caches, not counted
  for (int r = 0; r < calls; ++r) {
    double ms = 0.0;
    bool gone = false;
    std::string error = call_and_check(driver, draw_inputs(args.seed, bench ? 200 + r : r), ms, gone);
    if (!error.empty())
      return driver.report(args.mode, args.seed, args.results_dir, "call " + std::to_string(r) + ": " + error, "", 0.0,
                           gone ? gone_kind : "")
                 ? 1
                 : 3;
    if (bench && r > 0) kernel_ms.push_back(ms);
  }
  if (!bench) return driver.report(args.mode, args.seed, args.results_dir, "", "", 0.0) ? 0 : 3;

  std::vector<double> ping_ms;
  for (int p = 0; p < kPings; ++p) ping_ms.push_back(driver.ping().ms);
  double timed = 0.0;
  for (double t : baseline_ms) timed += t;
  for (double t : kernel_ms) timed += t;
  const double kernel = median(kernel_ms), baseline = median(baseline_ms), round_trip = median(ping_ms);
  const double gflops = 2.0 * kN * kN * kN / (kernel * 1e6);
  const double speedup = baseline / kernel;
  std::string times;
  for (double t : kernel_ms) times += (times.empty() ? "" : ", ") + std::to_string(t);
  char feedback[256];
  std::snprintf(feedback, sizeof feedback,
                "kernel %.3f ms (%.2f GFLOP/s), naive loop %.3f ms: %.2fx faster (median of %d runs, N=%d)", kernel,
                gflops, baseline, speedup, kBenchRuns, kN);
  char metrics[1024];
  std::snprintf(metrics, sizeof metrics,
                "\"combined_score\": %.6f, \"public\": {\"ms\": %.6f, \"gflops\": %.4f, \"baseline_ms\": %.6f, "
                "\"speedup\": %.6f}, \"private\": {\"n\": %d, \"runs\": %d, \"times_ms\": [%s], \"round_trip_ms\": %.6f}, "
                "\"text_feedback\": \"%s\"",
                speedup, kernel, gflops, baseline, speedup, kN, kBenchRuns, times.c_str(), round_trip,
                braid_split::json_escape(feedback).c_str());
  return driver.report(args.mode, args.seed, args.results_dir, "", metrics, timed) ? 0 : 3;
}

}  // namespace

int main(int argc, char** argv) {
  DriverArgs da;
  const bool parsed = parse_driver_args(argc, argv, da);
  braid_split::Driver driver(kShared, da.worker);  // takes the channel first
  if (!parsed) {
    std::fprintf(stderr, "usage: %s --mode verify|bench --seed S --results_dir D [--worker PATH]\n", argv[0]);
    return 2;
  }
  return run(driver, da.args);
}
