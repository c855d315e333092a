#include "braid/search/schedule.hpp"

#include <algorithm>

#include "braid/util/hash.hpp"

namespace braid {

Phase phase_of(const SearchConfig& c, std::int64_t generation) {
  double explore_until = c.explore_fraction * double(c.num_generations);
  return double(generation) <= explore_until ? Phase::Explore : Phase::Exploit;
}

GenerationPlan plan_generation(const SearchConfig& c, std::int64_t generation, bool can_cross, std::mt19937_64& rng) {
  GenerationPlan plan;
  plan.phase = phase_of(c, generation);
  plan.island = int((generation - 1) % c.num_islands);
  const PhaseSettings& s = plan.phase == Phase::Explore ? c.explore : c.exploit;
  static constexpr PatchType order[3] = {PatchType::Full, PatchType::Diff, PatchType::Cross};
  std::array<double, 3> w = s.patch_type_probs;
  for (int i = 0; i < 3; ++i) {
    bool allowed = std::find(c.patch_types.begin(), c.patch_types.end(), std::string(to_string(order[i]))) !=
                   c.patch_types.end();
    if (!allowed || (order[i] == PatchType::Cross && !can_cross)) w[i] = 0.0;
  }
  if (w[0] + w[1] + w[2] <= 0.0) w = {0.0, 1.0, 0.0};  // diff is always possible
  std::discrete_distribution<int> d(w.begin(), w.end());
  int k = d(rng);
  plan.patch_type = order[k];
  plan.temperature = s.temperatures[k];
  return plan;
}

std::mt19937_64 generation_rng(std::uint64_t run_seed, std::int64_t generation, std::uint64_t salt) {
  std::uint64_t words[3] = {run_seed, std::uint64_t(generation), salt};
  return std::mt19937_64(hash64(std::string_view(reinterpret_cast<const char*>(words), sizeof(words))));
}

}  // namespace braid
