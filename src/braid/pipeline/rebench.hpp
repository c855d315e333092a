// `braid rebench`: a run's best programs (one per program text) evaluated again with fresh
// inputs, `runs` times each, ranked by the median score and kept in meta "rebench" and in
// <results>/rebench.json. Re-runs are measurements, not candidates: `programs` is not touched.
#pragma once
#include <filesystem>

#include "braid/util/json.hpp"

namespace braid {

// Returns the table as stored: {"round", "runs", "metric" ("" without stop_when), "rows": [{"id",
// "knobs", "recorded", "reported", "scores", "failures", "median", ["recorded_metric",
// "median_metric"]}]}, rows ranked by "median". UserError on bad input (top, runs, the folder).
json rebench(const std::filesystem::path& results, int top, int runs);

}  // namespace braid
