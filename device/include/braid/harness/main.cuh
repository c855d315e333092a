// braid/harness/main.cuh -- the frozen main of every program. Part of braid/harness.cuh, whose
// contract applies.
#pragma once

#include <cstdio>
#include <exception>
#include <string>

#include "braid/harness/context.cuh"
#include "braid/harness/options.cuh"
#include "braid/harness/protocol.cuh"
#include "braid/harness/report.cuh"
#include "braid/harness/results.cuh"
#include "braid/runtime.cuh"

namespace braid::dev {

// The frozen main: bootstrap, run, rank 0 writes the results. Exit 0 when the candidate ran and
// verified, 1 otherwise (the files say why).
inline int harness_main(int argc, char** argv, const Workload& wl, const Candidate& cand) {
  take_verdict_channel();  // first: before any candidate code the harness calls
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
      publish_results(failed, opt, me.rank);
    } catch (const std::exception&) {
    }
    return 1;
  }
}

}  // namespace braid::dev
