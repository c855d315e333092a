// Re-evaluations of a stored program with fresh inputs: measurements, not candidates. Used by
// stop_when's `confirm` (runner) and by `braid rebench`.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "braid/eval/evaluator.hpp"
#include "braid/search/shared_database.hpp"

namespace braid {

// Evaluates `code` once more in `dir` (emptied first), inputs drawn from seed hash64(label,
// run_seed); `label` also names the evaluation for the job observer ("<id>-confirm1").
EvalResult remeasure(Evaluator& evaluator, const std::string& code, const std::string& label, std::uint64_t run_seed,
                     const std::filesystem::path& dir, const JobObserver& jobs);

// The re-measurement `label` of `code` as the database keeps it, or else `measure()`'s result,
// then kept (unless `stopped()` says a stop cut it short): a run resumed after a stop takes what
// was measured before it instead of measuring again (a 4-rank confirmation is minutes of GPUs).
EvalResult remeasure_kept(SharedDatabase& db, const std::string& code, const std::string& label,
                          const std::function<EvalResult()>& measure, const std::function<bool()>& stopped);

// Runs `measure` on a thread of its own and calls `tick(n)` every 200 ms until it returns: the
// caller's thread stays free to show progress and to end the measurement on a stop.
EvalResult measure_beside(const std::function<EvalResult()>& measure, const std::function<void(int n)>& tick);

// Median of a non-empty list (mean of the middle two for an even count).
double median(std::vector<double> values);

}  // namespace braid
