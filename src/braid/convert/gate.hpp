// Verification gate of `braid convert`: the converted program must compile and, on N local
// ranks, produce the original's outputs on every rank before it is accepted.
//
// Annotated programs (`// braid:input x`, `// braid:output y`): both versions are instrumented
// (transform.hpp: instrument_for_gate), built with nvcc, run on the same seeded random inputs,
// and every output of every rank is compared (integers exactly, float32 to 1e-5 relative,
// bfloat16 to 1e-2 relative); the time from inputs ready to outputs ready is reported.
// Harness programs: both run `--mode bench` at the given size; the harness verifies every element
// on every rank itself (correct.json), and its candidate median time is compared.
// Programs with neither (real users' programs): the differential gate (diff_gate.hpp) compares
// every device buffer at its release, exit codes and stdout of the two programs.
#pragma once
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "braid/convert/analyzer.hpp"
#include "braid/convert/build_flags.hpp"
#include "braid/convert/transform.hpp"
#include "braid/eval/nvcc_builder.hpp"
#include "braid/util/json.hpp"
#include "braid/util/subprocess.hpp"

namespace braid::convert {

struct GateOptions {
  std::filesystem::path work_dir;    // both builds and runs live here
  std::filesystem::path source_dir;  // the original's folder: -I for its own headers
  std::vector<std::string> flags;    // nvcc flags; default_nvcc_flags() when empty
  std::vector<std::string> libs;     // link arguments besides -lcublas (-L/-l; MPI's)
  int ranks = 2;
  unsigned long long seed = 1;
  double run_timeout_s = 120.0;
  std::string harness_args = "--size 4096 --warmup 2 --iters 10 --input_sets 2 --rtol 0.02 --atol 0.02";
  bool run = true;                        // false: compile both, do not run
  std::vector<std::string> program_args;  // the differential gate: the program's command line
};

struct GateResult {
  bool built = false;   // both versions compiled
  bool ran = false;     // both ran on every rank
  bool passed = false;  // outputs matched on every rank
  std::string failure;  // why not, one paragraph
  double original_ms = 0.0, converted_ms = 0.0;
  json details = json::object();
};

// Builds (and runs, with options.run) both versions. Expected failures are values.
GateResult run_gate(const Analysis& analysis, const std::string& original_source, const Conversion& conversion,
                    const GateOptions& options);

// The gate for a whole program written elsewhere (the LLM rewrite loop, rewrite_loop.hpp):
// `candidate_source` keeps the original's annotations (or harness entry) and is instrumented the
// same way as the original; `candidate` is its analysis. An original with neither goes through the
// differential gate, every reduction of the original counted as possibly moved to device code.
GateResult run_gate_on_candidate(const Analysis& original, const std::string& original_source,
                                 const Analysis& candidate, const std::string& candidate_source,
                                 const GateOptions& options);

// Writes `source` to dir/program.cu and links dir/program with the gate's flags (cache under
// options.work_dir), for reruns of one side (diagnostic_rerun.hpp).
BuildResult build_program(const std::string& source, const std::filesystem::path& dir, const GateOptions& options);

// Runs `exe args` on `ranks` local ranks in `dir` with the gate's environment (BRAID_RANK,
// BRAID_WORLD_SIZE, BRAID_GATE_DIR=dir, BRAID_GATE_SEED=seed, ...) plus `env` (a value "{rank}"
// becomes the rank); per-rank stdout/stderr files in dir. Index = rank.
std::vector<SubprocessResult> run_local_ranks(const std::filesystem::path& exe, const std::vector<std::string>& args,
                                              int ranks, const std::filesystem::path& dir, unsigned long long seed,
                                              double timeout_s, const std::map<std::string, std::string>& env = {});

// nvcc -c only (no link): the check that a conversion compiles, for CI without GPUs.
BuildResult compile_only(const std::string& source, const std::filesystem::path& work_dir, const std::string& name,
                         const std::filesystem::path& source_dir, const std::vector<std::string>& flags);

// compile_only of a user's program (or its conversion) with `flags`; when that fails and the user
// named no language standard, once more with nvcc's own default, C++17, which the user's build most
// likely used (nvcc 13 rejects some C++17 code in braid's C++20 mode: a std::vector of an unnamed
// `typedef struct {...} T` is an internal compiler error). When the retry builds, `flags` keep
// -std=c++17 for every later build (the gate, the workload) and `note` says why.
BuildResult compile_user_program(const std::string& source, const std::filesystem::path& work_dir, const std::string& name,
                                 const std::filesystem::path& source_dir, BuildFlags& flags, std::string* note);

json gate_to_json(const GateResult& g);

}  // namespace braid::convert
