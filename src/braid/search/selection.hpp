// Parent selection over one island's correct programs (ranked best first by Population).
//   power_law: P(rank r) ~ (r + 1)^-alpha. alpha = 0 is uniform; larger alpha favours the top.
//   weighted:  P(i) ~ sigmoid(lambda * (s_i - median) / spread) / (1 + children_i): sharper with
//              lambda, and programs already expanded many times are picked less.
//   beam:      uniform over the num_beams best; never leaves the beam.
#pragma once
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "braid/search/config.hpp"
#include "braid/search/population.hpp"

namespace braid {

class ParentSelector {
 public:
  virtual ~ParentSelector() = default;
  // Index into the population, or nullopt when `ranked` is empty. By default a draw from
  // probabilities().
  virtual std::optional<std::size_t> select(const Population& pop, const std::vector<std::size_t>& ranked,
                                            std::mt19937_64& rng) const;
  // Selection probability of each entry of `ranked` (same order); for tests and the UI.
  virtual std::vector<double> probabilities(const Population& pop, const std::vector<std::size_t>& ranked) const = 0;
};

std::unique_ptr<ParentSelector> make_parent_selector(const SearchConfig& config);

}  // namespace braid
