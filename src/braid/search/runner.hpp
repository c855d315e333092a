// EvolutionRunner: the steady-state island search of docs/architecture.md. One generation is one
// proposed child: select parent -> inspirations -> propose (Mutator) -> apply patch -> novelty
// -> evaluate (up to max_parallel_jobs at once) -> record (failures included) -> every k
// generations: meta-summary and migration. Proposals of a remote model are asked up to
// max_parallel_proposals at once, overlapping evaluations (search/proposal.hpp).
//
// Crash safety: each candidate is stored in one transaction when its evaluation ends; a
// generation is done iff its record exists, so after kill -9 `resume` re-proposes exactly the
// generations that were in flight. Process groups of running evaluations are recorded and ended
// on resume.
//
// Its parts: proposal_builder.hpp (context and novelty gate), goal_tracker.hpp (goal
// confirmation, noise, best/), meta_journal.hpp (meta memory), evaluation_jobs.hpp (evaluations
// in flight), shared_database.hpp (the database as its threads share it).
#pragma once
#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "braid/db/database.hpp"
#include "braid/embed/embedder.hpp"
#include "braid/eval/evaluator.hpp"
#include "braid/eval/workload.hpp"
#include "braid/mutate/agents.hpp"
#include "braid/mutate/mutator.hpp"
#include "braid/search/config.hpp"

namespace braid {

struct RunStatus {
  std::int64_t generations_done = 0;
  std::int64_t generations_total = 0;
  std::int64_t evaluated = 0;   // candidates evaluated (seeds and rejected included; migrants are copies, not counted)
  std::int64_t migrants = 0;    // copies of programs sent to another island
  std::string last_failure;     // the latest failed candidate: "<id> <kind>: <first line of its error>"
  std::int64_t failed = 0;      // not ok
  std::int64_t rejected = 0;
  int in_flight = 0;             // candidates being evaluated
  int proposing = 0;             // generations whose proposal is asked for (queued or in flight)
  int proposals_asking = 0;      // of those, model requests in flight now
  double proposal_wait_s = 0.0;  // age of the oldest proposal not yet answered
  double proposals_paused_s = 0.0;  // time left of a rate-limit pause (429)
  double best_score = 0.0;       // the trusted figure: the median of re-runs when confirmed
  std::string best_id;
  bool best_confirmed = false;   // false: best_score is a single measurement
  int best_runs = 0;             // measurements behind best_score
  std::string noise;             // "noise: seed re-timed 3x, spread 12% (median 1.68)", "" if unmeasured
  std::int64_t correct = 0;      // correct candidates (seeds included)
  double elapsed_s = 0.0;
  double eta_s = -1.0;          // unknown until a generation completes
  json llm_totals;              // from the LLM operators, when present
  std::string note;             // e.g. "stopping: max_api_cost reached"
};

// Everything the runner needs besides the results folder; the CLI assembles it.
struct RunnerParts {
  WorkloadSpec workload;
  SearchConfig config;
  std::unique_ptr<Evaluator> evaluator;
  std::unique_ptr<Mutator> mutator;              // KnobMutator when no LLM
  std::unique_ptr<Embedder> embedder;            // hashed n-grams by default
  std::unique_ptr<FeedbackAgent> feedback;       // optional (LLM)
  std::unique_ptr<MetaSummarizer> meta;          // StatsMetaSummarizer when no LLM
  std::function<bool(const std::string&, const std::vector<std::string>&)> novelty_judge;  // optional
  std::function<json()> llm_totals;              // optional
  std::function<bool()> budget_exhausted;        // optional
  // Whether an island's API type can run here (GIN needs an RDMA NIC; prepare_run sets it for every
  // run); islands that cannot are reported and skipped, not filled with failures. Optional: all run.
  std::function<bool(int island, std::string* why)> island_runnable;
};

class EvolutionRunner {
 public:
  // `db` lives in results_dir/evolution.db and outlives the runner.
  EvolutionRunner(std::filesystem::path results_dir, ProgramDatabase& db, RunnerParts parts);
  ~EvolutionRunner();

  // Runs until num_generations children are recorded, `stop` becomes true, or the LLM budget is
  // spent. Returns the final status.
  RunStatus run(const std::atomic<bool>& stop, const std::function<void(const RunStatus&)>& on_status);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Results folder layout.
std::filesystem::path db_path(const std::filesystem::path& results_dir);  // evolution.db

}  // namespace braid
