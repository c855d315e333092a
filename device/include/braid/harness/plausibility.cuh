// braid/harness/plausibility.cuh -- whether a size's figures are physically believable: clocks that
// agree, no foreign device work, no candidate faster than its bound allows. Every rank holds the
// same gathered figures, so every rank decides alike. Part of braid/harness.cuh, whose contract
// applies.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "braid/harness/report.cuh"

namespace braid::dev {

constexpr double kImplausibleRatio = 0.9;   // of max(compute alone, communication alone)
constexpr double kClockSlackMs = 0.2;        // events vs host clock: allowed gap, absolute (an honest call: tens of us) ...
constexpr double kClockSlackFraction = 0.1;   // ... plus this fraction of the larger figure

// The events lie inside the host clock's interval (both around the same run() + sync), so they
// cannot legitimately differ by more than launch and sync latencies. Besides a tampered timer, the
// one cause seen: another process on the GPU, which then time-slices between the two, and the
// events miss the slices the host waits through (a constant ~2.4 ms on H100, 2026-11-27).
inline std::string clock_disagreement(const SizeReport& s) {
  const double ev = s.candidate_events.median_ms, host = s.candidate_host.median_ms;
  if (ev > 0 && host > 0 && std::fabs(host - ev) > kClockSlackMs + kClockSlackFraction * std::max(ev, host)) {
    char why[300];
    std::snprintf(why, sizeof(why),
                  "CUDA events (%.4f ms) and the host clock (%.4f ms) disagree on the same iterations%s", ev, host,
                  host > ev ? " (is another process using this GPU? it would time-slice with this one)" : "");
    return why;
  }
  return "";
}

// Work still running after the end event of a phase the workload runs (which joins all it
// launches), in most iterations: the candidate's, slowing the figures it is compared with.
inline std::string foreign_work(const SizeReport& s) {
  if (s.foreign_tail.median_ms <= 0) return "";
  char why[240];
  std::snprintf(why, sizeof(why), "device work the workload did not launch ran past the end of the baseline / compute alone / communication alone timings (median %.4f ms): work left running outside run()",
                s.foreign_tail.median_ms);
  return why;
}

// "" when the size's figures are believable, else why not. Every rank holds the same gathered
// figures, so every rank decides alike (the strict re-run is collective).
inline std::string implausibility(const SizeReport& s) {
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

}  // namespace braid::dev
