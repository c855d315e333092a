// Trust in the reported best. One evaluation's score can be a lucky timing; so a candidate that
// would become the run's best is re-measured (fresh inputs) interleaved with the incumbent best,
// and promoted only when the median of its re-runs beats the incumbent's re-runs taken beside
// them. The seed is re-timed at the start to measure the run's noise level.
//
// Stored beside the programs table (which keeps each evaluation as it happened):
//   table confirmations: one row per confirmation (program, code hash, re-run scores, median,
//                        the incumbent's re-run scores, promoted or not, why);
//   meta "best":  the confirmed best {id, score, runs, spread, samples, first} (what best/ holds);
//   meta "noise": the seed re-timed {id, samples, median, spread}.
// A run recorded before confirmations existed has neither: readers fall back to the highest
// single measurement and say so.
#pragma once
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "braid/db/database.hpp"
#include "braid/util/json.hpp"


namespace braid {

struct Confirmation {
  std::string id;                        // the candidate re-measured
  std::string code_hash;                 // hash_hex(code): copies (migrants, seeds) share it
  double first = 0.0;                    // the evaluation's own score (not part of the estimate)
  std::vector<double> samples;           // re-run scores, all correct
  std::string against;                   // the incumbent best re-measured beside it ("" if none)
  std::string against_hash;              // its code hash
  std::vector<double> against_samples;
  bool promoted = false;                 // became the best
  std::string why;                       // a failed re-run, or "median a vs incumbent b"
  double created_at = 0.0;

  // The figure to trust: the median of the re-runs; 0 when a re-run failed (empty samples).
  double estimate() const;
  // (max - min) / median of the re-runs, as a fraction; 0 with fewer than 2.
  double spread() const;
};

// Relative spread of measurements: (max - min) / median; 0 with fewer than 2 values.
double relative_spread(const std::vector<double>& values);

// Creates the table where absent (a read-write database; old runs gain it on resume).
void ensure_confirmation_table(ProgramDatabase& db);
void store_confirmation(ProgramDatabase& db, const Confirmation& c);
// Every confirmation, oldest first; empty when the table is absent (a run from before).
std::vector<Confirmation> load_confirmations(const ProgramDatabase& db);

// Per program text, the latest trusted estimate: the median of every re-run of that text
// (as candidate or as incumbent), with how many runs it rests on.
struct Estimate {
  double score = 0.0;
  std::vector<double> samples;
  bool refuted = false;  // a re-run failed, or it lost to the incumbent
};
std::unordered_map<std::string, Estimate> estimates_by_code(const std::vector<Confirmation>& all);

// The best as reported to the user (top, export, report, serve).
struct ReportedBest {
  ProgramRecord record;
  double score = 0.0;         // confirmed median, or the single measurement
  int runs = 1;               // measurements behind `score`
  double spread = 0.0;        // relative, of those runs
  bool confirmed = false;     // false: one measurement (a run without confirmation)
  std::string describe() const;  // "1.62 (median of 3 re-runs, spread 4%)" / "(single measurement)"
};
std::optional<ReportedBest> reported_best(const ProgramDatabase& db);

// Correct candidates ranked by the trusted figure (confirmed median where there is one, the
// single measurement otherwise), one row per program text, best first.
struct RankedCandidate {
  ProgramRecord record;
  double score = 0.0;
  int runs = 1;
  double spread = 0.0;
  bool confirmed = false;
  bool refuted = false;   // re-measured below its first score / lost to the incumbent
};
std::vector<RankedCandidate> rank_by_trusted_score(const ProgramDatabase& db, int limit);

// The seed re-timed (meta "noise"); nullopt when not measured.
struct NoiseLevel {
  std::string id;
  std::vector<double> samples;
  double median = 0.0;
  double spread = 0.0;  // relative
  json to_json() const;
  std::string describe() const;  // "noise: seed re-timed 3x, spread 12% (median 1.68)"
};
std::optional<NoiseLevel> noise_level(const ProgramDatabase& db);
std::optional<NoiseLevel> noise_from_json(const std::string& text);

// A candidate id from a unique prefix (as the UI and tables show them). Throws UserError naming
// `origin` when no candidate or several match.
std::string resolve_candidate_id(const ProgramDatabase& db, const std::string& prefix, const std::string& origin);

}  // namespace braid
