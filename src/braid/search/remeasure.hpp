// Re-evaluations of a stored program with fresh inputs: measurements, not candidates. Used by
// stop_when's `confirm` (runner) and by `braid rebench`.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "braid/eval/evaluator.hpp"

namespace braid {

// Evaluates `code` once more in `dir` (emptied first), inputs drawn from seed hash64(label,
// run_seed); `label` also names the evaluation for the job observer ("<id>-confirm1").
EvalResult remeasure(Evaluator& evaluator, const std::string& code, const std::string& label, std::uint64_t run_seed,
                     const std::filesystem::path& dir, const JobObserver& jobs);

// Median of a non-empty list (mean of the middle two for an even count).
double median(std::vector<double> values);

}  // namespace braid
