// {{name}}'s driver (braid_split.hpp; workload.yaml `driver_build`): trusted, built once from
// the workload folder, run in a process of its own beside the candidate's worker.
//   driver --mode verify|bench --seed S --results_dir D [--worker ./program.out]
// verify: one call on fresh random inputs, the result checked against a double reference.
// bench:  15 rounds, each on fresh inputs: the plain loop timed here, then the worker's call
//         (the round trip) timed and its result checked; combined_score = median plain loop /
//         median call. The empty round trip (pings) is reported as private.round_trip_ms.
#define BRAID_TEMPLATE_DRIVER
#include "program.cpp"  // the workload's own harness: reference, plain loop, tolerance

namespace {

constexpr long kN = 1L << 22;
constexpr std::size_t kOffX = 0, kOffResult = kN * sizeof(float), kShared = kOffResult + sizeof(double);

// Fresh inputs in [-1, 1) for round `r` (splitmix64: quick enough to draw for every call).
void draw(unsigned long seed, int r, std::vector<float>& x) {
  std::uint64_t state = seed * 1000003ull + static_cast<std::uint64_t>(r) * 7919ull + 1;
  for (auto& v : x) {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    v = static_cast<float>((z ^ (z >> 31)) >> 40) / static_cast<float>(1ull << 24) * 2.0f - 1.0f;
  }
}

// One call on `x`: inputs and a NaN result into the shared region, the round trip timed, the
// result read at the answer and checked. "" when right.
std::string call_and_check(braid_split::Driver& driver, const std::vector<float>& x, double& ms, bool& gone) {
  const double nan = std::nan("");
  std::memcpy(driver.shared() + kOffResult, &nan, sizeof nan);
  std::memcpy(driver.shared() + kOffX, x.data(), x.size() * sizeof(float));  // last, right before the call
  braid_split::Call c = driver.call({std::uint64_t(kN), kOffX, kOffResult});
  double got = 0.0;
  std::memcpy(&got, driver.shared() + kOffResult, sizeof got);
  ms = c.ms;
  gone = c.worker_gone;
  if (!c.ok) return c.error;
  const double want = reference(x);
  return close_enough(got, want) ? "" : "got " + std::to_string(got) + ", expected " + std::to_string(want);
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = "verify", dir = ".", worker;
  unsigned long seed = 1;
  for (int a = 1; a + 1 < argc; a += 2) {
    std::string k = argv[a];
    if (k == "--mode") mode = argv[a + 1];
    else if (k == "--seed") seed = std::stoul(argv[a + 1]);
    else if (k == "--results_dir") dir = argv[a + 1];
    else if (k == "--worker") worker = argv[a + 1];
  }
  braid_split::Driver driver(kShared, worker);
  const bool bench = mode == "bench";
  std::vector<float> x(kN);
  std::vector<double> cand, base;
  volatile double sink = 0.0;
  for (int r = 0; r < (bench ? 15 : 1); ++r) {
    draw(seed, r, x);
    if (bench) base.push_back(time_ms([&] { sink = plain_loop(x.data(), kN); }));
    double ms = 0.0;
    bool gone = false;
    const std::string error = call_and_check(driver, x, ms, gone);
    if (!error.empty())
      return driver.report(mode, seed, dir, "call " + std::to_string(r) + ": " + error, "", 0.0,
                           gone ? (bench ? "bench_failed" : "run_failed") : "")
                 ? 1
                 : 3;
    cand.push_back(ms);
  }
  (void)sink;
  if (!bench) return driver.report(mode, seed, dir, "", "", 0.0) ? 0 : 3;
  std::vector<double> pings;
  for (int p = 0; p < 9; ++p) pings.push_back(driver.ping().ms);
  double timed = 0.0;
  for (double t : cand) timed += t;
  for (double t : base) timed += t;
  std::sort(cand.begin(), cand.end());
  std::sort(base.begin(), base.end());
  std::sort(pings.begin(), pings.end());
  const double speedup = base[7] / cand[7];
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "\"combined_score\": %.6f, \"public\": {\"ms\": %.4f, \"baseline_ms\": %.4f, \"speedup\": %.4f},"
                " \"private\": {\"round_trip_ms\": %.6f}, \"text_feedback\": \"median %.3f ms vs plain loop %.3f ms\"",
                speedup, cand[7], base[7], speedup, pings[4], cand[7], base[7]);
  return driver.report(mode, seed, dir, "", buf, timed) ? 0 : 3;
}
