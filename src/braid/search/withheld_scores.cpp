#include "braid/search/withheld_scores.hpp"

#include <fmt/format.h>

#include "braid/util/log.hpp"

namespace braid {

std::string withheld_reason(const json& public_metrics) {
  if (!public_metrics.is_object() || !public_metrics.value("score_withheld", false)) return {};
  const json sizes = public_metrics.value("sizes", json::array());
  if (sizes.is_array())
    for (const json& s : sizes)
      if (s.is_object() && s.value("plausibility", std::string()) == "flagged") {
        const std::string why = s.value("plausibility_reason", std::string());
        if (!why.empty()) return "size " + s.value("size", json(0)).dump() + ": " + why;
      }
  return "the harness gave no reason";
}

std::string WithheldScores::score_text(const ProgramRecord& rec) {
  if (rec.failure != FailureKind::Ok) return {};
  const std::string score = fmt::format(" score {:.4g}", rec.combined_score);
  const std::string why = withheld_reason(rec.public_metrics);
  if (why.empty()) {
    streak_ = 0;
    return score;
  }
  if (++streak_ >= kWarnAfter && !warned_) {
    warned_ = true;
    log::warn(
        "the last {} correct programs had their scores withheld for timings that cannot be believed: the search cannot "
        "rank them. "
        "Usually another process is using these GPUs (see nvidia-smi): the GPU then time-slices between processes and "
        "the "
        "CUDA events miss what the host clock waits through. End it and `braid resume` this run.",
        streak_);
  }
  return score + " (score withheld: " + why + ")";
}

}  // namespace braid
