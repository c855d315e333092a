#include "braid/search/selection.hpp"

#include <algorithm>
#include <cmath>

namespace braid {
namespace {

class PowerLaw : public ParentSelector {
 public:
  explicit PowerLaw(double alpha) : alpha_(alpha) {}
  std::vector<double> probabilities(const Population&, const std::vector<std::size_t>& ranked) const override {
    std::vector<double> p(ranked.size());
    double sum = 0;
    for (std::size_t r = 0; r < ranked.size(); ++r) sum += p[r] = std::pow(double(r + 1), -alpha_);
    for (double& x : p) x /= sum;
    return p;
  }

 private:
  double alpha_;
};

class Weighted : public ParentSelector {
 public:
  explicit Weighted(double lambda) : lambda_(lambda) {}
  std::vector<double> probabilities(const Population& pop, const std::vector<std::size_t>& ranked) const override {
    std::vector<double> p(ranked.size());
    if (ranked.empty()) return p;
    // ranked is sorted best first, so the median and spread come without sorting.
    double median = pop.at(ranked[ranked.size() / 2]).combined_score;
    double spread = pop.at(ranked.front()).combined_score - pop.at(ranked.back()).combined_score;
    if (spread <= 0) spread = 1.0;
    double sum = 0;
    for (std::size_t r = 0; r < ranked.size(); ++r) {
      const auto& s = pop.at(ranked[r]);
      double z = lambda_ * (s.combined_score - median) / spread;
      double w = 1.0 / (1.0 + std::exp(-z));
      w /= 1.0 + double(pop.children_count(s.id));
      sum += p[r] = w;
    }
    for (double& x : p) x /= sum;
    return p;
  }

 private:
  double lambda_;
};

class Beam : public ParentSelector {
 public:
  explicit Beam(int beams) : beams_(std::size_t(beams)) {}
  std::vector<double> probabilities(const Population&, const std::vector<std::size_t>& ranked) const override {
    std::vector<double> p(ranked.size(), 0.0);
    std::size_t n = std::min(beams_, ranked.size());
    for (std::size_t r = 0; r < n; ++r) p[r] = 1.0 / double(n);
    return p;
  }
  std::optional<std::size_t> select(const Population&, const std::vector<std::size_t>& ranked,
                                    std::mt19937_64& rng) const override {
    if (ranked.empty()) return std::nullopt;
    std::size_t n = std::min(beams_, ranked.size());
    return ranked[std::uniform_int_distribution<std::size_t>(0, n - 1)(rng)];
  }

 private:
  std::size_t beams_;
};

}  // namespace

std::optional<std::size_t> ParentSelector::select(const Population& pop, const std::vector<std::size_t>& ranked,
                                                  std::mt19937_64& rng) const {
  if (ranked.empty()) return std::nullopt;
  auto p = probabilities(pop, ranked);
  std::discrete_distribution<std::size_t> d(p.begin(), p.end());
  return ranked[d(rng)];
}

std::unique_ptr<ParentSelector> make_parent_selector(const SearchConfig& c) {
  if (c.parent_selection_strategy == "weighted") return std::make_unique<Weighted>(c.parent_selection_lambda);
  if (c.parent_selection_strategy == "beam") return std::make_unique<Beam>(c.num_beams);
  return std::make_unique<PowerLaw>(c.exploitation_alpha);
}

}  // namespace braid
