// Assembling a search run from user input, shared by `evolve`, `resume`, `rebench` and `run`'s
// evolve step: every check that can fail on bad input happens before anything is written.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "braid/llm/hardware.hpp"
#include "braid/search/runner.hpp"

namespace braid {

struct EvolveRequest {
  std::filesystem::path workload;  // folder or workload.yaml
  std::filesystem::path config;    // optional --config
  std::optional<std::int64_t> generations;
  std::optional<std::uint64_t> seed;
  std::optional<std::int64_t> parallel;
  std::filesystem::path results;  // optional --results
  std::string llm;                // --llm ("" = config's llm_models, else knob mutator)
  bool replay_evals = false;
  std::optional<int> ranks;  // --ranks: overrides a GPU evaluator's ranks (kept for resume)
};

// Applies --ranks to a GPU workload's evaluator section; UserError for other evaluator kinds.
void apply_ranks_override(WorkloadSpec& spec, const std::optional<int>& ranks);

// An island whose backend (API type: lsa, gin, hybrid, host, cuda) this machine cannot run.
struct UnrunnableIsland {
  int island = 0;
  std::string api_type;
  std::string why;
};

// Whether the islands' backends must run here: candidates run across ranks on this machine's GPUs
// (evaluator kind gpu, more than one rank: one rank is "cuda"; no slurm section: Slurm jobs run on
// other nodes). Other evaluators run any island; its API type only shapes the prompts.
bool backends_run_here(const WorkloadSpec& spec);

// The one check of every run's islands, knob or LLM operator, against the machine `hw` describes:
// the islands that cannot run (the runner names and skips them). UserError against `origin` (the
// config naming the API types) when no island can. Call where backends_run_here.
std::vector<UnrunnableIsland> check_island_backends(const SearchConfig& cfg, const WorkloadSpec& spec,
                                                    const std::string& origin, const llm::HardwareFacts& hw);

// Validates everything and returns the parts of a run; throws UserError on bad input.
RunnerParts prepare_run(const EvolveRequest& req, const WorkloadSpec& spec, const SearchConfig& cfg);
// The LLM operators need the run's database; a UserError here (missing key) happens before any
// candidate is evaluated.
void attach_llm(RunnerParts& parts, const EvolveRequest& req, ProgramDatabase& db,
                const std::filesystem::path& results);
bool uses_llm(const EvolveRequest& req, const SearchConfig& cfg);
json llm_config_json(const SearchConfig& cfg);
SearchConfig resolve_config(const EvolveRequest& req, const WorkloadSpec& spec);
// The search config of a started run (the "config" its database stored) to continue it with:
// `origin` names it in errors; `generations` and `parallel` override the stored ones, the seed is the run's (meta
// "run_seed"). UserError when the stored config is not valid JSON or no longer valid.
SearchConfig continued_config(ProgramDatabase& db, const std::string& stored, const std::string& origin,
                              const std::optional<std::int64_t>& generations,
                              const std::optional<std::int64_t>& parallel);

}  // namespace braid
