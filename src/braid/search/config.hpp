// Search configuration: the parameter names of the seed (ShinkaEvolve/CUCo) as YAML keys, with
// the defaults of docs/architecture.md. Unknown keys, wrong types and out-of-range values are
// UserErrors naming the file.
#pragma once
#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "braid/util/json.hpp"

namespace braid {

// Probabilities and temperatures in the order full, diff, cross.
struct PhaseSettings {
  std::array<double, 3> patch_type_probs{};
  std::array<double, 3> temperatures{};
};

// Ends a run early once a correct candidate reaches a goal: `metric` is "combined_score" or a
// number among the candidate's public metrics (e.g. the harness's max_ratio_to_bound), compared
// with at_most or at_least. Checked in generation order, so the stopping point is reproducible.
// With confirm = N, a candidate that meets the goal is evaluated N more times (fresh inputs); the
// goal is reached only if every re-run is correct and the median of all 1 + N values meets it too,
// so one lucky measurement does not end a run.
struct StopWhen {
  std::string metric;            // "" = never stop early
  std::optional<double> at_most, at_least;
  int confirm = 0;
  bool enabled() const { return !metric.empty(); }
  // The metric's value for a candidate, if it has one.
  std::optional<double> value(double combined_score, const json& public_metrics) const;
  bool met(double combined_score, const json& public_metrics) const;
  bool met_value(double value) const;
  std::string describe() const;  // "max_ratio_to_bound <= 1.05", "... (median of 3 runs)"
};

struct SearchConfig {
  std::int64_t num_generations = 50;
  int max_parallel_jobs = 2;
  // LLM proposals asked at once (search/proposal_pool.hpp); 1 = one at a time. A proposal for
  // generation g is prepared once generation g - proposal_lag is indexed, so what its prompt
  // shows does not depend on timing; 0 = derived: max_parallel_jobs + 2 * max_parallel_proposals.
  // Its first ask also waits for the first answers up to g - 2 * max_parallel_proposals, whose
  // one-knob changes its prompt names as taken (search/proposal_builder.hpp).
  int max_parallel_proposals = 1;
  int proposal_lag = 0;
  int num_islands = 4;

  std::string parent_selection_strategy = "power_law";  // power_law | weighted | beam
  double exploitation_alpha = 1.0;
  double parent_selection_lambda = 10.0;
  int num_beams = 5;

  int archive_size = 100;
  double elite_selection_ratio = 0.3;
  int num_archive_inspirations = 2;
  int num_top_k_inspirations = 2;
  int num_failed_neighbours = 2;  // negative examples shown to a mutation

  int migration_interval = 10;
  double migration_rate = 0.1;
  std::string migration_strategy = "elitist";           // elitist | directional
  std::vector<std::pair<int, int>> migration_graph;      // directional: edges from -> to

  double explore_fraction = 0.4;
  PhaseSettings explore{{0.70, 0.15, 0.15}, {0.2, 0.5, 0.8}};
  PhaseSettings exploit{{0.60, 0.25, 0.15}, {0.0, 0.2, 0.5}};
  std::vector<std::string> patch_types{"full", "diff", "cross"};  // allowed forms

  double code_embed_sim_threshold = 0.995;
  int max_novelty_attempts = 3;
  int max_patch_attempts = 5;
  int embedding_dims = 512;

  int meta_rec_interval = 10;
  bool use_text_feedback = true;

  std::vector<std::string> init_program_paths_per_island;  // relative to the workload folder
  std::vector<std::string> task_sys_msg_per_island;
  std::vector<std::string> island_api_types;                // e.g. lsa, gin (informational here)

  std::uint64_t seed = 0;   // 0: drawn at start and stored with the run

  StopWhen stop_when;

  // Trust in the reported best (search/confirmation.hpp): a candidate that would become the best
  // is re-measured confirm_runs times, interleaved with the incumbent, before it is promoted; the
  // seed is re-timed noise_runs times to measure the run's noise. 0 turns either off.
  int confirm_runs = 3;
  int noise_runs = 3;

  json llm = json::object();  // keys owned by the LLM operators (llm/settings.hpp)

  json to_json() const;
};

// The lag in generations between what a proposal sees and the generation it proposes (see
// proposal_lag). Proposals that ask no model (`remote` false) run inline: max_parallel_jobs.
std::int64_t effective_proposal_lag(const SearchConfig& c, bool remote);

// Upper bound of num_generations (and of the intervals counted in generations).
inline constexpr std::int64_t kMaxGenerations = 10'000'000;

// Checks a value given outside a config file (-g, -j) against the range of config key `key`;
// throws UserError(origin, "must be an integer between lo and hi (key), got v").
void check_int_config_value(const std::string& key, std::int64_t value, const std::string& origin);

// Keys accepted besides the search's own (the LLM operators register theirs).
void register_extra_config_keys(const std::vector<std::string>& keys);

// Reads YAML (or JSON) from `path`; keys override `base`. Throws UserError("<path>", ...).
SearchConfig load_search_config(const std::filesystem::path& path, SearchConfig base = {});
// Same rules applied to an already-parsed object (used for the stored config of a run).
SearchConfig search_config_from_json(const json& j, const std::string& origin, SearchConfig base = {});
// Checks value ranges; throws UserError(origin, ...).
void validate(const SearchConfig& c, const std::string& origin);

}  // namespace braid
