// Plain value types stored in the program database.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "braid/util/json.hpp"

namespace braid {

// Outcome of a candidate; names match docs/architecture.md and are stored as text.
enum class FailureKind { Ok, BuildFailed, RunFailed, Timeout, VerifyFailed, BenchFailed, Rejected };
std::string_view to_string(FailureKind k);  // "ok", "build_failed", ...
std::optional<FailureKind> failure_kind_from(std::string_view s);

struct ProgramRecord {
  std::string id;                      // 16 hex digits, unique
  std::string code;                    // full source text
  std::int64_t generation = 0;         // 0 for seeds; one proposed child per generation
  int island_idx = 0;
  std::string parent_id;               // primary parent ("" for seeds)
  std::vector<std::string> parent_ids; // all parents (crossover has 2-3)
  std::string patch_type;              // "seed", "diff", "full", "cross", "migrant"
  std::string code_diff;               // the patch text that produced this child
  double combined_score = 0.0;         // 0 for failures
  bool correct = false;
  FailureKind failure = FailureKind::Ok;
  std::string error_text;              // trimmed diagnostics of a failure
  json public_metrics = json::object();
  json private_metrics = json::object();
  std::string text_feedback;
  std::vector<float> embedding;        // stored as a float32 BLOB
  std::string knob_key;                // Program::knob_key(), "" when the program has no knobs
  std::string archive_cell;            // MAP-Elites cell key
  bool in_archive = false;
  std::string model;                   // "knob" or the LLM model that proposed it
  double cost_usd = 0.0;
  json timings = json::object();       // seconds per cascade level: {"build":..,"run":..,"bench":..}
  std::string system_msg_hash;         // island's system message, when islands differ
  double created_at = 0.0;             // unix seconds
  std::uint64_t run_seed = 0;          // RNG seed of the run
  std::string migrated_from;           // id of the original when patch_type == "migrant"
};

// The profiler's per-kernel lines stored with a program (public_metrics["profile"]["summary"],
// written by the GPU cascade's profile level, eval/ncu_profile.hpp); "" when the program was
// not profiled or its profile failed (then public_metrics["profile"]["note"] says why).
inline std::string profile_summary(const json& public_metrics) {
  if (!public_metrics.is_object()) return {};
  auto p = public_metrics.find("profile");
  if (p == public_metrics.end() || !p->is_object()) return {};
  auto s = p->find("summary");
  return s != p->end() && s->is_string() ? s->get<std::string>() : std::string();
}

// The compact view the search keeps in memory for every program (selection, archive,
// novelty); loaded once at start and extended on every insert.
struct ProgramSummary {
  std::string id;
  std::string parent_id;
  std::string patch_type;   // needed to tell proposed children from seeds and migrants
  std::string migrated_from;
  std::int64_t generation = 0;
  int island_idx = 0;
  double combined_score = 0.0;
  bool correct = false;
  FailureKind failure = FailureKind::Ok;
  std::string knob_key;
  std::string archive_cell;
  bool in_archive = false;
  std::vector<float> embedding;
};

// A patch attempt that failed to apply or was rejected for novelty; kept for diagnosis and
// shown to later mutations.
struct AttemptRecord {
  std::int64_t generation = 0;
  std::string parent_id;
  std::string patch_type;
  std::string patch_text;
  std::string reason;    // "patch", "novelty", "llm"
  std::string error;
  double created_at = 0.0;
};

// One confirmation of a would-be best by re-runs (search/confirmation.hpp says what it means);
// a row of the confirmations table.
struct ConfirmationRecord {
  std::string id;                        // the candidate re-measured
  std::string code_hash;
  double first = 0.0;                    // the evaluation's own score
  std::vector<double> samples;           // re-run scores
  std::string against;                   // the incumbent re-measured beside it ("" if none)
  std::string against_hash;
  std::vector<double> against_samples;
  bool promoted = false;
  std::string why;
  double created_at = 0.0;
};

// One re-measurement of a stored program (search/remeasure.hpp: a best's confirmation, the
// seed's noise runs, a goal's re-runs) as it came out; a row of the remeasurements table, so that
// a run resumed after a stop takes it instead of measuring it again. Keyed by its label (which
// also seeds its inputs) and the program text's hash.
struct RemeasurementRecord {
  std::string label;
  std::string code_hash;
  FailureKind failure = FailureKind::Ok;
  bool correct = false;
  double combined_score = 0.0;
  json public_metrics = json::object();
  std::string error_text;
  double created_at = 0.0;
};

// One LLM call as the cost ledger finished it (llm/ledger.hpp's CallRecord); a row of llm_calls.
struct LlmCallRecord {
  std::int64_t seq = 0;
  std::string replay_key;
  std::string purpose;
  std::string model;
  std::int64_t generation = -1;
  std::int64_t tokens_in = 0;
  std::int64_t tokens_out = 0;
  double cost_usd = 0.0;
  double latency_s = 0.0;
  int attempts = 0;
  std::string error_kind;
  std::string error;
  std::vector<std::string> retried_errors;
  double created_at = 0.0;
};

// Sums over llm_calls; all zero when the run made no LLM call (no table).
struct LlmCallTotals {
  std::int64_t calls = 0;
  std::int64_t tokens_in = 0;
  std::int64_t tokens_out = 0;
  double cost_usd = 0.0;
  std::map<std::string, std::int64_t> errors;  // by kind: failed calls and retried attempts
  std::int64_t errors_total = 0;
};

// The number of LLM calls and their cost, as any braid version wrote them (older tables name
// the cost column `cost`); cost_usd is absent when the table has no cost column.
struct LlmCallCost {
  std::int64_t calls = 0;
  std::optional<double> cost_usd;
};

// A Slurm job braid submitted for one evaluation (eval/slurm_jobs.hpp); a row of slurm_jobs.
struct SlurmJobEntry {
  std::string candidate_id;  // the evaluation (EvalRequest::candidate_id)
  std::string job_id;
  std::string code_hash;     // of the candidate's code and seed: adopt only the same evaluation
  std::string job_dir;
  std::string state = "submitted";  // submitted | collected | cancelled
  int attempts = 1;          // submissions for this candidate (requeues add one)
  double submitted_at = 0.0; // unix seconds of the latest submission
  double updated_at = 0.0;
};

// One candidate's compact columns (no code, no JSON texts), as the live views list them.
struct CandidateRow {
  std::int64_t rowid = 0;
  std::string id;
  std::string parent_id;
  std::string patch_type;
  std::string model;
  std::string archive_cell;
  std::int64_t generation = 0;
  int island = 0;
  double score = 0.0;
  bool correct = false;
  std::string failure;           // failure kind as stored ("ok", "build_failed", ...)
  double created_at = 0.0;
  double cost_usd = 0.0;
  bool in_archive = false;
  std::optional<double> ratio_to_bound;  // public_metrics.ratio_to_bound when recorded
  std::string knob_key;                  // "name=value;..." of the knobs it set ("" without knobs)
  std::vector<std::pair<std::string, double>> metrics;  // numeric public metrics, by name
};

// A program's text with the figures shown beside a diff against it.
struct ProgramCode {
  std::string code;
  double combined_score = 0.0;
  std::int64_t generation = 0;
};

}  // namespace braid
