// Island migration, every migration_interval generations: elitist (the best migration_rate
// share of each island is copied to one other island drawn at random) or directional (copied
// along every edge of migration_graph). Copies are new programs (patch_type "migrant") with the
// original's code and scores; a program is never copied into an island that already holds it.
#pragma once
#include <random>
#include <string>
#include <vector>

#include "braid/db/record.hpp"
#include "braid/search/config.hpp"
#include "braid/search/population.hpp"

namespace braid {

struct Migration {
  std::string program_id;  // original
  int to_island = 0;
};

std::vector<Migration> plan_migrations(const SearchConfig& c, const Population& pop, std::mt19937_64& rng);

// The stored copy of `original` on island `to_island`, made at generation `generation` (done
// generations); its id is the same for every copy of one root program to one island in a run.
ProgramRecord migrant_copy(const ProgramRecord& original, int to_island, std::int64_t generation,
                           std::uint64_t run_seed);

}  // namespace braid
