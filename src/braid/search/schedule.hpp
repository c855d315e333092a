// Phase schedule (explore for the first explore_fraction of the budget, then exploit), the
// patch type and temperature drawn for a generation, and the island a generation works on.
#pragma once
#include <cstdint>
#include <random>

#include "braid/mutate/mutator.hpp"
#include "braid/search/config.hpp"

namespace braid {

struct GenerationPlan {
  Phase phase = Phase::Explore;
  PatchType patch_type = PatchType::Diff;
  double temperature = 0.0;
  int island = 0;
};

Phase phase_of(const SearchConfig& c, std::int64_t generation);  // generation >= 1
// `can_cross`: at least two correct programs exist (else cross is not drawn).
GenerationPlan plan_generation(const SearchConfig& c, std::int64_t generation, bool can_cross, std::mt19937_64& rng);
// Deterministic per-generation RNG stream, so a resumed run draws what the first would have.
std::mt19937_64 generation_rng(std::uint64_t run_seed, std::int64_t generation, std::uint64_t salt = 0);

}  // namespace braid
