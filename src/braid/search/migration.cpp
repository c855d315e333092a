#include "braid/search/migration.hpp"

#include <fmt/format.h>

#include <cmath>
#include <set>

#include "braid/program/origin.hpp"
#include "braid/util/clock.hpp"
#include "braid/util/hash.hpp"

namespace braid {
namespace {

// Is `id` (or a copy of it, or its original) already in `island`?
bool island_holds(const Population& pop, int island, const std::string& original_id) {
  for (std::size_t i : pop.ranked(island)) {
    const auto& p = pop.at(i);
    if (p.id == original_id || p.migrated_from == original_id) return true;
  }
  return false;
}

std::string original_of(const ProgramSummary& p) { return p.migrated_from.empty() ? p.id : p.migrated_from; }

}  // namespace

std::vector<Migration> plan_migrations(const SearchConfig& c, const Population& pop, std::mt19937_64& rng) {
  std::vector<Migration> out;
  if (c.num_islands < 2 || c.migration_rate <= 0) return out;
  std::vector<std::pair<int, int>> edges;
  if (c.migration_strategy == "directional") {
    edges = c.migration_graph;
  } else {
    for (int from = 0; from < c.num_islands; ++from) {
      int to = std::uniform_int_distribution<int>(0, c.num_islands - 2)(rng);
      if (to >= from) ++to;
      edges.emplace_back(from, to);
    }
  }
  std::set<std::pair<std::string, int>> planned;
  for (auto [from, to] : edges) {
    const auto& ranked = pop.ranked(from);
    if (ranked.empty()) continue;
    std::size_t n = std::max<std::size_t>(1, std::size_t(std::ceil(c.migration_rate * double(ranked.size()))));
    for (std::size_t r = 0; r < ranked.size() && r < n; ++r) {
      std::string orig = original_of(pop.at(ranked[r]));
      if (island_holds(pop, to, orig) || !planned.emplace(orig, to).second) continue;
      out.push_back({pop.at(ranked[r]).id, to});
    }
  }
  return out;
}

ProgramRecord migrant_copy(const ProgramRecord& original, int to_island, std::int64_t generation,
                           std::uint64_t run_seed) {
  ProgramRecord copy = original;
  const std::string root = original.migrated_from.empty() ? original.id : original.migrated_from;
  copy.id = hash_hex(fmt::format("migrant:{}:{}:{}", run_seed, root, to_island));
  copy.island_idx = to_island;
  copy.generation = generation;
  copy.patch_type = std::string(to_string(Origin::Migrant));
  copy.migrated_from = root;
  copy.parent_id = original.id;
  copy.parent_ids = {original.id};
  copy.code_diff.clear();
  copy.in_archive = false;
  copy.knob_key.clear();  // the original already stands for this knob vector
  copy.archive_cell = "migrant:" + copy.archive_cell;
  copy.created_at = now_s();
  copy.cost_usd = 0.0;
  return copy;
}

}  // namespace braid
