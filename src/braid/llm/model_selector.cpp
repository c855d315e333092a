#include "braid/llm/model_selector.hpp"

#include <cmath>
#include <limits>

namespace braid::llm {

ModelSelector::ModelSelector(std::vector<std::string> models, Selection selection, double exploration)
    : models_(std::move(models)), selection_(selection), exploration_(exploration),
      picks_(models_.size(), 0), rewarded_(models_.size(), 0), reward_sum_(models_.size(), 0.0) {}

std::size_t ModelSelector::pick() {
  std::lock_guard lock(mu_);
  if (models_.empty()) return 0;
  std::size_t chosen = 0;
  if (selection_ == Selection::RoundRobin) {
    chosen = next_++ % models_.size();
  } else {
    // UCB1 over rewarded outcomes; a model whose outcomes are not back yet is tried first so
    // each gets one sample before means are compared.
    std::int64_t total = 0;
    for (auto n : rewarded_) total += n;
    double best = -std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < models_.size(); ++i) {
      double score;
      if (rewarded_[i] == 0) {
        score = 1e9 - static_cast<double>(picks_[i]);  // least-picked unrewarded model first
      } else {
        double mean = reward_sum_[i] / static_cast<double>(rewarded_[i]);
        score = mean + exploration_ * std::sqrt(2.0 * std::log(static_cast<double>(std::max<std::int64_t>(total, 1))) /
                                                static_cast<double>(rewarded_[i]));
      }
      if (score > best) {
        best = score;
        chosen = i;
      }
    }
  }
  ++picks_[chosen];
  return chosen;
}

void ModelSelector::reward(const std::string& model, double reward) {
  std::lock_guard lock(mu_);
  for (std::size_t i = 0; i < models_.size(); ++i)
    if (models_[i] == model) {
      ++rewarded_[i];
      reward_sum_[i] += reward;
      return;
    }
}

json ModelSelector::stats() const {
  std::lock_guard lock(mu_);
  json out = json::array();
  for (std::size_t i = 0; i < models_.size(); ++i)
    out.push_back({{"model", models_[i]},
                   {"picks", picks_[i]},
                   {"rewards", rewarded_[i]},
                   {"mean", rewarded_[i] ? reward_sum_[i] / static_cast<double>(rewarded_[i]) : 0.0}});
  return out;
}

double improvement_reward(bool child_correct, double child_score, bool parent_correct, double parent_score) {
  if (!child_correct) return 0.0;
  if (!parent_correct || parent_score <= 0.0) return child_score > 0.0 ? 1.0 : 0.0;
  double gain = (child_score - parent_score) / parent_score;
  if (gain <= 0.0) return 0.0;
  return 1.0 - std::exp(-10.0 * gain);  // 10% better -> 0.63, 30% -> 0.95
}

}  // namespace braid::llm
