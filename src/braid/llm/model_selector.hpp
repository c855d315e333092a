// Choice among several models (llm_models): round robin, or a UCB1 bandit whose reward is
// the improvement a model's child brought over its parent. Thread-safe.
#pragma once
#include <mutex>
#include <string>
#include <vector>

#include "braid/util/json.hpp"

namespace braid::llm {

enum class Selection { RoundRobin, Ucb };

class ModelSelector {
 public:
  ModelSelector(std::vector<std::string> models, Selection selection, double exploration = 1.0);
  std::size_t pick();
  // `reward` in [0, 1]: see improvement_reward().
  void reward(const std::string& model, double reward);
  const std::vector<std::string>& models() const { return models_; }
  json stats() const;  // [{"model","picks","rewards","mean"}]

 private:
  std::vector<std::string> models_;
  Selection selection_;
  double exploration_;
  mutable std::mutex mu_;
  std::size_t next_ = 0;
  std::vector<std::int64_t> picks_, rewarded_;
  std::vector<double> reward_sum_;
};

// Reward of a child: 0 when it failed or did not improve; otherwise the relative gain over
// the parent, squashed into (0, 1] so a single large jump does not dominate the mean.
double improvement_reward(bool child_correct, double child_score, bool parent_correct, double parent_score);

}  // namespace braid::llm
