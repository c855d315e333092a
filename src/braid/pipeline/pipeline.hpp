// `braid run seed.cu`: the whole flow on one host-driven program, resumable step by step.
//
//   convert   rules (convert/transform.hpp), then the LLM rewrite loop for what they left when an
//             LLM is given; the result must compile (nvcc -c) where a toolkit exists
//   gate      original vs converted on `ranks` local GPUs (every rank's outputs compared);
//             no_gate or no GPU: status "unverified", said in the progress and in the record
//   annotate  evolve blocks and knobs (convert/annotate.hpp; the LLM proposes them when given)
//   workload  <results>/workload/: workload.yaml (kind gpu), config.yaml, gen0.cu, seed.cu
//   record    <results>/evolution.db with the run's metadata, the conversion summary included
//             (meta "conversion": what `braid report` and `braid serve` show)
//   evolve    the island search over gen0.cu (the same runner as `braid evolve`/`braid resume`)
//
// <results>/run_state.json (pipeline_state.hpp) records each finished step with the hashes of
// its outputs; running again continues from the first step that is not finished or whose
// outputs changed, and the evolve step resumes the search from the database.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "braid/pipeline/user_flags.hpp"
#include "braid/search/runner.hpp"

namespace braid {

struct PipelineOptions {
  std::filesystem::path input;    // host-driven CUDA/NCCL source (.cu)
  std::filesystem::path results;  // "" = results/<name>-<time>; an existing run is continued
  std::filesystem::path config;   // search config (YAML; also the LLM keys), optional
  std::string llm;                // "" or "none": no LLM
  std::int64_t generations = -1;  // < 0: the config's
  int parallel = -1;              // <= 0: the config's
  std::int64_t seed = -1;         // < 0: drawn and stored
  int ranks = 2;
  double gate_timeout_s = 120.0;  // each side's run in the gate
  bool no_gate = false;
  bool no_build = false;  // skip nvcc -c of the conversion (the evolve builds gen0 anyway)
  std::string until;      // stop after this step ("" = run them all)
  UserFlags flags;        // -I -D -L -l --nvcc-flags
};

// How the caller follows the steps and runs the search of the evolve step.
struct PipelineHooks {
  std::function<void(const std::string& step, const std::string& text)> progress;  // one line per event
  // Runs the search to its end (or an interruption) and returns the exit code.
  std::function<int(EvolutionRunner& runner, const std::filesystem::path& results)> search;
};

// What a run came to. Bad input (the file, the options, an LLM key) is a UserError thrown
// before any step writes; a step that fails on a valid input is a value here.
struct PipelineReport {
  int exit_code = 0;              // 0, 1 (a step failed) or the search's code (130: interrupted)
  std::filesystem::path results;  // the folder used (the default one when none was given)
  std::string failed_step;        // "" unless a step failed
  std::string failure;            // why, naming the input
  std::string stopped_after;      // the step of `until` when the run stopped there
};

PipelineReport run_pipeline(const PipelineOptions& options, const PipelineHooks& hooks);

// Whether <results> is a `braid run` folder (it holds run_state.json).
bool is_pipeline_run(const std::filesystem::path& results);
// The options a `braid run` folder was started with (to continue it, e.g. `braid resume`).
PipelineOptions stored_pipeline_options(const std::filesystem::path& results);

}  // namespace braid
