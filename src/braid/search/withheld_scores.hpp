// Scores the GPU harness withheld. A correct program whose timings cannot be believed (CUDA events
// and the host clock disagree, or device work ran on past a phase) is stored with score 0 and
// "score_withheld" in its metrics: the search then cannot tell it from a slow one. The log line of
// such a program says why, and a run whose programs' scores keep being withheld gets one warning
// naming the usual cause: another process on the GPUs (the GPU time-slices between processes,
// and the events miss the slices the host clock waits through; 2026-11-27 on 4 x H100, ranks left
// running by a script that was cut off had most scores of the search after them withheld).
#pragma once

#include <string>

#include "braid/db/record.hpp"

namespace braid {

class WithheldScores {
 public:
  // How many withheld scores in a row bring the warning.
  static constexpr int kWarnAfter = 3;

  // What a stored program's log line says after its outcome: " score S" for a correct one, with
  // " (score withheld: REASON)" when the harness withheld it; "" for a failure (its kind says it).
  // Warns once per run when the streak of withheld scores reaches kWarnAfter.
  std::string score_text(const ProgramRecord& rec);

 private:
  int streak_ = 0;
  bool warned_ = false;
};

// The harness's reason for withholding the score ("" when it did not withhold it).
std::string withheld_reason(const json& public_metrics);

}  // namespace braid
