// Plain value types stored in the program database.
#pragma once
#include <cstdint>
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

}  // namespace braid
