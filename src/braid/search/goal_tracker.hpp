// The run's trusted results (search/confirmation.hpp), kept by the search thread:
//   best/      the highest-ranked program whose figure held up on re-runs taken beside the
//              incumbent (meta "best" says the same); a program that would rank above it
//              unconfirmed is re-measured first;
//   noise      the seed re-timed at the start (meta "noise"), which also confirms its figure;
//   stop_when  the goal, reached by the first correct candidate in generation order whose
//              `confirm` re-runs agree (meta "target_reached"); a program refuted by them is
//              kept in meta "target_refuted", so copies and a resume do not try it again.
// The population's scores follow the confirmed medians, so selection does not chase one lucky
// timing.
#pragma once
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "braid/eval/evaluator.hpp"
#include "braid/search/config.hpp"
#include "braid/search/confirmation.hpp"
#include "braid/search/population.hpp"
#include "braid/search/shared_database.hpp"

namespace braid {

// The confirmations table, as the runner reaches it.
struct ConfirmationLog {
  std::function<std::vector<Confirmation>()> load;
  std::function<void(const Confirmation&)> store;
};

// One more evaluation of a program's text outside the population (search/remeasure.hpp):
// `label` names it, `folder` is its work folder.
using Remeasure =
    std::function<EvalResult(const std::string& code, const std::string& label, const std::filesystem::path& folder)>;

struct GoalTrackerParts {
  const SearchConfig& cfg;
  std::filesystem::path results;
  std::filesystem::path program;  // the workload's program: best/ keeps its extension
  SharedDatabase& db;
  ConfirmationLog confirmations;
  Remeasure remeasure;
  std::function<bool()> stopping;  // a stop was asked: re-runs cut short are decided on resume
};

// The best as the status shows it.
struct TrackedBest {
  std::string id;
  double score = 0.0;
  bool confirmed = false;  // false: score is a single measurement
  int runs = 1;            // measurements behind score
};

class GoalTracker {
 public:
  GoalTracker(GoalTrackerParts parts, Population& pop);

  // What an earlier session stored: estimates, noise, best/, the goal reached or refuted.
  // `code_hashes`: hash_hex(code) of every correct stored program, by id. Call before the
  // population is loaded (apply_estimate needs them).
  void load(std::unordered_map<std::string, std::string> code_hashes);
  // A stored candidate may already meet the goal (resume); after the population is loaded.
  void check_stored();

  // A summary carries its program text's trusted estimate where one was measured.
  void apply_estimate(ProgramSummary& s) const;
  // Before a new record's summary joins the population.
  void note_program(const ProgramRecord& rec);
  // After it joined: best/ follows (seeds once all are stored, by settle_best), and the goal is
  // checked against it.
  void indexed(const ProgramRecord& rec);

  // The run's noise level: the first correct seed re-timed noise_runs times (once per run).
  void measure_noise(const std::vector<std::string>& seed_ids);
  // best/ holds the highest-ranked program whose figure was confirmed (a few rounds of re-runs
  // at most per call, the rest on the next).
  void settle_best();
  // best/metrics.json gets the best's diagnosis, asked beside the search (once every answer is in).
  void write_best_feedback();

  bool target_reached() const { return target_reached_; }
  const std::string& target_note() const { return target_note_; }  // "" until reached
  std::optional<TrackedBest> best() const;                         // nullopt until best/ is written
  std::string noise_note() const;                                  // "" when unmeasured
  int confirmation_runs() const;                                   // confirm_runs, more on a noisy run

 private:
  bool trusted(const std::string& code_hash) const;
  bool confirm(const ProgramRecord& rec);
  void follow_estimates(const std::vector<std::string>& code_hashes);
  void check_target(const ProgramRecord& rec);
  std::optional<std::vector<double>> confirm_target(const ProgramRecord& rec, double first);
  void write_best(const ProgramRecord& rec);

  GoalTrackerParts parts_;
  const SearchConfig& cfg_;
  Population& pop_;
  // Trusted estimates by program text (confirmed medians), and each correct program's text hash.
  std::unordered_map<std::string, Estimate> estimates_;
  std::unordered_map<std::string, std::string> code_hash_of_;
  std::optional<NoiseLevel> noise_;
  std::string best_id_;  // the program in best/
  double best_score_ = 0.0;
  bool target_reached_ = false;
  std::string target_note_;
  json refuted_ = json::object();  // code hash -> runs and why (re-runs disagreed with the goal)
};

}  // namespace braid
