// The terminal side of runs, shared by `evolve`, `resume` and `run`; assembling a run from user
// input is the library's (pipeline/run_setup.hpp).
#pragma once
#include <cstdint>
#include <filesystem>

#include "braid/pipeline/run_setup.hpp"

namespace braid::cli {

// Runs with a live status line (terminal) or periodic log lines, SIGINT/SIGTERM stop cleanly.
int run_with_status(EvolutionRunner& runner, const std::filesystem::path& results);

// `braid resume` of a `braid run` folder (pipeline/pipeline.hpp): continues it through the
// remaining steps (convert .. evolve).
int continue_pipeline(const std::filesystem::path& results, std::int64_t generations, int parallel);

}  // namespace braid::cli
