// braid/harness/report.cuh -- what a run reports: one rank's verdict, timings per phase, per size,
// and the whole run. Part of braid/harness.cuh, whose contract applies.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace braid::dev {

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

}  // namespace braid::dev
