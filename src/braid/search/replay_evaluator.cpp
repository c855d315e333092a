#include "braid/search/replay_evaluator.hpp"

#include <fmt/format.h>

#include "braid/db/database.hpp"
#include "braid/program/origin.hpp"
#include "braid/search/confirmation.hpp"
#include "braid/search/runner.hpp"
#include "braid/util/error.hpp"
#include "braid/util/hash.hpp"
#include "braid/util/log.hpp"

namespace braid {

ReplayEvaluator::ReplayEvaluator(const std::filesystem::path& recorded_results, std::unique_ptr<Evaluator> fallback)
    : fallback_(std::move(fallback)), source_(recorded_results) {
  if (!std::filesystem::exists(db_path(recorded_results)))
    throw UserError(recorded_results.string(), "holds no braid run to replay evaluations from (no evolution.db)");
  ProgramDatabase db(db_path(recorded_results));
  ProgramQuery all;
  for (const auto& r : db.query(all)) {
    if (origin_from(r.patch_type) == Origin::Migrant || r.failure == FailureKind::Rejected) continue;
    EvalResult e;
    e.failure = r.failure;
    e.correct = r.correct;
    e.combined_score = r.combined_score;
    e.public_metrics = r.public_metrics;
    e.level_reached = r.public_metrics.value("level_reached", 0);
    e.public_metrics.erase("level_reached");
    e.private_metrics = r.private_metrics;
    e.text_feedback = r.text_feedback;
    e.error_text = r.error_text;
    e.timings = r.timings;
    by_code_hash_.emplace(hash_hex(r.code), std::move(e));
  }
  // Re-measurements (noise, confirmations) by their labels, so a replay promotes the same bests.
  for (const auto& c : load_confirmations(db)) {
    auto answer = [&](const std::string& code_hash, const std::string& label, double score) {
      auto it = by_code_hash_.find(code_hash);
      if (it == by_code_hash_.end()) return;
      EvalResult e = it->second;
      e.combined_score = score;
      by_label_.emplace(label, std::move(e));
    };
    const bool noise = c.why == "seed re-timed";
    for (std::size_t k = 0; k < c.samples.size(); ++k)
      answer(c.code_hash, fmt::format("{}-{}{}", c.id, noise ? "noise" : "trust", k + 1), c.samples[k]);
    for (std::size_t k = 0; k < c.against_samples.size(); ++k)
      answer(c.against_hash, fmt::format("{}-vs-{}-{}", c.against, c.id, k + 1), c.against_samples[k]);
  }
}

EvalResult ReplayEvaluator::evaluate(const EvalRequest& request, const JobObserver& jobs) {
  if (auto it = by_label_.find(request.candidate_id); it != by_label_.end()) return it->second;
  if (auto it = by_code_hash_.find(hash_hex(request.code)); it != by_code_hash_.end()) return it->second;
  ++misses_;
  log::warn("replay: candidate {} was not evaluated in {}; evaluating it for real", request.candidate_id, source_.string());
  return fallback_->evaluate(request, jobs);
}

std::string ReplayEvaluator::describe() const { return "replay of " + source_.string() + " over " + fallback_->describe(); }

}  // namespace braid
