// The run's starting points (runner.cpp): which seed program each island starts from, which
// islands can run on this machine, and the stop when a seed fails.
#pragma once
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "braid/db/record.hpp"
#include "braid/eval/workload.hpp"
#include "braid/search/config.hpp"

namespace braid {

struct SeedProgram {
  std::string origin;        // its file
  std::vector<int> islands;  // the islands that start from it
};

// By program text: the seed of every island in `islands` that has no stored seed yet (seed_ids
// per island, "" for none); islands sharing a text are evaluated once. UserError for an
// unreadable file.
std::map<std::string, SeedProgram> seed_programs(const SearchConfig& cfg, const WorkloadSpec& workload,
                                                 const std::vector<int>& islands,
                                                 const std::vector<std::string>& seed_ids);

// A seed that fails leaves nothing to evolve: the run stops at once with the seed's own error.
[[noreturn]] void throw_seed_failed(const std::string& origin, const ProgramRecord& rec,
                                    const std::filesystem::path& results);

// The islands whose operator can run here; `note` names the others and why. UserError when none.
std::vector<int> runnable_islands(const SearchConfig& cfg,
                                  const std::function<bool(int, std::string*)>& island_runnable, std::string& note);

}  // namespace braid
