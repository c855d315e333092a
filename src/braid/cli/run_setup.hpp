// Assembling a run from user input, shared by `evolve` and `resume` (and later `run`):
// every check that can fail on bad input happens before anything is written.
#pragma once
#include <filesystem>
#include <optional>
#include <string>

#include "braid/search/runner.hpp"

namespace braid::cli {

struct EvolveRequest {
  std::filesystem::path workload;          // folder or workload.yaml
  std::filesystem::path config;            // optional --config
  std::optional<std::int64_t> generations;
  std::optional<std::uint64_t> seed;
  std::optional<int> parallel;
  std::filesystem::path results;           // optional --results
  std::string llm = "none";                // --llm
  bool replay_evals = false;
};

// Validates everything and returns the parts of a run; throws UserError on bad input.
RunnerParts prepare_run(const EvolveRequest& req, const WorkloadSpec& spec, const SearchConfig& cfg,
                        ProgramDatabase* db, const std::filesystem::path& results);
SearchConfig resolve_config(const EvolveRequest& req, const WorkloadSpec& spec);

// Runs with a live status line (terminal) or periodic log lines, SIGINT/SIGTERM stop cleanly.
int run_with_status(EvolutionRunner& runner, const std::filesystem::path& results);

}  // namespace braid::cli
