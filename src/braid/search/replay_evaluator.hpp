// Evaluator that answers from a recorded run: a candidate whose code was evaluated there gets
// that stored result (`braid evolve --llm replay:<results> --replay-evals`), so a replayed run
// sees the same scores and its prompts, hence its answers, match the original exactly. Code the
// recorded run never evaluated goes to the real evaluator, and is counted as a miss.
#pragma once
#include <atomic>
#include <filesystem>
#include <memory>
#include <unordered_map>

#include "braid/eval/evaluator.hpp"

namespace braid {

class ReplayEvaluator : public Evaluator {
 public:
  ReplayEvaluator(const std::filesystem::path& recorded_results, std::unique_ptr<Evaluator> fallback);
  EvalResult evaluate(const EvalRequest& request, const JobObserver& jobs) override;
  std::string describe() const override;
  long misses() const { return misses_.load(); }

 private:
  std::unordered_map<std::string, EvalResult> by_code_hash_;
  std::unordered_map<std::string, EvalResult> by_label_;  // re-measurements: "<id>-trust1", ...
  std::unique_ptr<Evaluator> fallback_;
  std::filesystem::path source_;
  std::atomic<long> misses_{0};
};

}  // namespace braid
