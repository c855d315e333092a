// The harness's host-side decisions, without a GPU: plausibility (faster than the bound, events
// against the host clock, foreign work during the workload's phases), the metrics JSON braid reads (plausibility, ratio_to_bound, withheld
// score) and the refusal of tolerances that would let NaN or anything pass. Runs anywhere nvcc
// builds it (no device work: exit 0 or 1, never 77).
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "braid/harness.cuh"
#include "gpu_check.cuh"

using namespace braid::dev;
using braid::dev::test::Checker;

namespace {

SizeReport honest_size(int64_t size) {
  SizeReport s;
  s.size = size;
  s.correct = true;
  s.candidate.median_ms = 1.50;
  s.candidate.makespan_ms = {1.50, 1.52};
  s.candidate_events = s.candidate;
  s.candidate_host.median_ms = 1.53;  // the host clock sees launch and sync latencies on top
  s.candidate_host.makespan_ms = {1.53, 1.55};
  s.baseline.median_ms = 1.80;
  s.compute.median_ms = 1.40;
  s.comm.median_ms = 0.30;
  return s;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

int exit_code_of_flags(const char* flag, const char* value) {
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    const char* argv[] = {"harness", "--size", "64", flag, value, nullptr};
    (void)parse_options(5, const_cast<char**>(argv));
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

int main() {
  Checker check;

  const SizeReport ok = honest_size(8192);
  check.expect(Harness::implausibility(ok).empty(), "an honest figure (ratio 1.07, clocks 0.03 ms apart) is plausible",
               Harness::implausibility(ok));

  SizeReport fast = ok;
  fast.candidate.median_ms = fast.candidate_events.median_ms = 1.0;
  fast.candidate_host.median_ms = 1.02;
  const std::string why_fast = Harness::implausibility(fast);
  check.expect(contains(why_fast, "faster than its bound allows") && contains(why_fast, "0.714"),
               "a candidate at 0.71 x max(compute alone, communication alone) is implausible", why_fast);

  SizeReport lying = ok;
  lying.candidate.median_ms = lying.candidate_events.median_ms = 1.30;  // events 0.5 ms short of the host clock
  lying.candidate_host.median_ms = 1.80;
  const std::string why_lying = Harness::implausibility(lying);
  check.expect(contains(why_lying, "disagree"), "events 0.5 ms short of the host clock on a 1.8 ms call are implausible", why_lying);

  SizeReport foreign = ok;  // a tail after the baseline / compute / comm end events in most iterations
  foreign.foreign_tail.makespan_ms = {0.12, 0.0, 0.15};
  foreign.foreign_tail.median_ms = 0.12;
  check.expect(contains(Harness::implausibility(foreign), "did not launch"),
               "device work running past the workload's own phases in most iterations is implausible", Harness::implausibility(foreign));

  SizeReport small = ok;  // a 0.1 ms call: launch and sync latency are a large share, within the slack
  small.candidate.median_ms = small.candidate_events.median_ms = 0.10;
  small.candidate_host.median_ms = 0.22;
  small.compute.median_ms = 0.09;
  small.comm.median_ms = 0.02;
  check.expect(Harness::implausibility(small).empty(), "a 0.1 ms call with 120 us of host latency is plausible", Harness::implausibility(small));

  Report r;
  r.correct = true;
  r.world = 2;
  r.combined_score = 1.2;
  r.sizes.push_back(ok);
  Options bench;
  bench.mode = Mode::Bench;
  const std::string plain = metrics_json(r, bench);
  check.expect(contains(plain, "\"combined_score\": 1.2") && contains(plain, "\"plausibility\": \"ok\"") &&
                   contains(plain, "\"ratio_to_bound\": 1.07143") && contains(plain, "\"candidate_host_ms\": 1.53") &&
                   contains(plain, "\"score_withheld\": false") && contains(plain, "\"candidate_host_makespans_ms\": [1.53,1.55]"),
               "metrics: per-size ratio_to_bound, host-clock figure and plausibility", plain);

  SizeReport rechecked = honest_size(16384);
  rechecked.strict = true;
  rechecked.plausibility = Plausibility::Rechecked;
  rechecked.plausibility_reason = "first run: candidate faster than its bound; strict re-run: plausible";
  r.sizes.push_back(rechecked);
  const std::string re = metrics_json(r, bench);
  check.expect(contains(re, "\"timing\": \"host clock (strict protocol)\"") && contains(re, "\"plausibility\": \"rechecked\"") &&
                   contains(re, "re-measured") && contains(re, "\"combined_score\": 1.2"),
               "metrics: a re-measured size says so and keeps its score", re);

  r.sizes.back().plausibility = Plausibility::Flagged;
  r.sizes.back().score_withheld = true;
  r.score_withheld = true;
  const std::string flagged = metrics_json(r, bench);
  check.expect(contains(flagged, "\"combined_score\": 0,") && contains(flagged, "\"score_withheld\": true") &&
                   contains(flagged, "\"plausibility\": \"flagged\"") && contains(flagged, "Score withheld"),
               "metrics: a tampered timer withholds the score and says why", flagged);

  for (const char* bad : {"nan", "inf", "-1"}) {
    check.expect(exit_code_of_flags("--rtol", bad) == 2, std::string("--rtol ") + bad + " refused with exit 2");
    check.expect(exit_code_of_flags("--atol", bad) == 2, std::string("--atol ") + bad + " refused with exit 2");
  }
  check.expect(exit_code_of_flags("--rtol", "0.02") == 0, "--rtol 0.02 accepted");

  std::printf("%d passed, %d failed\n", check.passes, check.failures);
  return check.failures == 0 ? 0 : 1;
}
