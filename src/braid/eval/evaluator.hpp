// Evaluation of one candidate, as plain values (Builder -> Runner split of docs/architecture.md).
//
// Cascade: L1 build -> L2 run + verify -> L3 benchmark. Each level may fail; the failure is a
// value (FailureKind + trimmed diagnostics), never an exception across the search.
//
// Metrics contract (compatible with CUCo/ShinkaEvolve): an evaluation writes, in its results
// directory, metrics.json {"combined_score", "public", "private", "text_feedback"} and
// correct.json {"correct", "error"}.
#pragma once
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "braid/db/record.hpp"
#include "braid/util/json.hpp"

namespace braid {

class ProgramDatabase;

struct EvalRequest {
  std::string candidate_id;
  std::string code;                   // full program text
  std::filesystem::path work_dir;     // empty folder owned by this evaluation (gen_N/)
  std::uint64_t seed = 0;             // RNG seed for input generation
};

struct EvalResult {
  FailureKind failure = FailureKind::Ok;
  int level_reached = 0;              // 1 build, 2 run+verify, 3 bench
  bool correct = false;
  double combined_score = 0.0;
  json public_metrics = json::object();
  json private_metrics = json::object();
  std::string text_feedback;
  std::string error_text;             // trimmed diagnostics (compiler text, signal, rank, ...)
  json timings = json::object();      // seconds per level
};

// Called with each process group an evaluation starts (and again with `running=false` when it
// ends), so the caller can record it and a restarted braid can end orphans. Calls for one
// evaluation come one at a time (steps started on several threads, a driver and its worker or
// the ranks, reach it through one_at_a_time), though not always from evaluate()'s thread.
using JobObserver = std::function<void(long pgid, bool running, const std::string& what)>;

// `jobs` heard one call at a time, for steps started on several threads (empty if `jobs` is).
inline JobObserver one_at_a_time(const JobObserver& jobs, std::mutex& mutex) {
  if (!jobs) return {};
  return [&jobs, &mutex](long pgid, bool running, const std::string& what) {
    std::lock_guard lock(mutex);
    jobs(pgid, running, what);
  };
}

class Evaluator {
 public:
  virtual ~Evaluator() = default;
  // Thread-safe: up to max_parallel_jobs calls run at once.
  virtual EvalResult evaluate(const EvalRequest& request, const JobObserver& jobs) = 0;
  virtual std::string describe() const = 0;
  // A short note for the status line when the evaluator's health changed (GPUs quarantined);
  // "" when all is well.
  virtual std::string status_note() const { return {}; }
  // Evaluators whose jobs outlive braid (Slurm) record them in the run's database, so a resumed
  // run finds them again, and end them when the run is stopped; local evaluators need neither.
  virtual void attach_run(ProgramDatabase& db, const std::filesystem::path& results_dir) {}
  virtual void cancel_jobs() {}
};

// Reads <dir>/metrics.json and <dir>/correct.json into `result` (score, metrics, feedback,
// correct, error). Missing or malformed files become a failure value of kind `on_missing`.
// The verdict a program wrote in <results>/correct.json; nullopt when absent or unreadable.
struct Verdict {
  bool correct = false;
  std::string error;  // "verification failed" when incorrect and no error was given
};
std::optional<Verdict> read_verdict(const std::filesystem::path& results);

void read_metrics_contract(const std::filesystem::path& dir, FailureKind on_missing, EvalResult& result);

}  // namespace braid
