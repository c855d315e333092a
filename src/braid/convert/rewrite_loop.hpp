// LLM rewrite loop of the fast path (issue #8): what the rules of `braid convert` left as host
// NCCL calls goes to a rewriter model, stage by stage, until the program compiles (and, with a
// GPU, passes the gate) or the iteration bound is reached.
//
// Stage A (infrastructure: symmetric memory, windows, the device communicator) runs before
// stage B (collectives); a stage the rules already finished costs no LLM call. Each iteration:
// a prompt (prompts/convert_rewrite.md: the current program, the rules' summary of what is left
// with lines, the primitive contract headers, the previous outcome and the judge's diagnosis),
// the answer's fenced code block (the whole program), checks that the frozen parts survived
// (`// braid:input` / `// braid:output` annotations, harness entry), compilation (nvcc -c when
// !run_gate, else the gate: build + run on N ranks + compare every rank's outputs with the
// original's), and on failure a short diagnosis from the judge (prompts/convert_judge.md, no
// code) that feeds the next rewrite prompt. A run failure is rerun instrumented
// (diagnostic_rerun.hpp) so the outcome names the failing step.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "braid/convert/analyzer.hpp"
#include "braid/convert/gate.hpp"
#include "braid/convert/transform.hpp"
#include "braid/llm/client.hpp"
#include "braid/util/json.hpp"

namespace braid::llm {
class PromptLibrary;
}

namespace braid::convert {

struct RewriteAttempt {
  std::string stage;  // "A" infrastructure | "B" collectives
  int iteration = 0;  // 1-based within the stage
  std::string prompt, answer, code;
  // no_code | llm_error | frozen_changed | not_converted (a host call the stage was to convert is
  // still there) | build_failed | run_failed | wrong_output | passed | compiled (CPU-only: gate
  // not run) | original_failed (the gate could not build or run the original: the loop stops)
  std::string outcome;
  std::string outcome_text;  // compiler text, gate failure, diagnostic rerun's located step
  std::string diagnosis;     // judge's text, no code
  std::string judge_prompt;  // what the judge was shown ("" when it was not asked)
};

struct RewriteOptions {
  int max_iterations_per_stage = 4;
  GateOptions gate;                   // work_dir, source_dir, flags, ranks, ... (gate.run is set by run_gate)
  bool run_gate = true;               // false: stop at compilation (no GPU)
  std::filesystem::path record_dir;   // attempts written here as files ("" = not written)
  std::filesystem::path prompts_dir;  // overrides of prompts/*.md by name ("" = shipped prompts)
  int max_tokens = 16384;             // rewrite answers hold a whole program
  int judge_max_tokens = 800;
  bool diagnostic_rerun = true;               // on run_failed, rerun instrumented to locate the failing step
  std::string replay_key_prefix = "convert";  // requests are keyed <prefix>/<stage>/<iteration>[/judge]
                                              // (exchange recording and replay): one prefix per program
};

struct RewriteResult {
  bool accepted = false;
  std::string source;  // final program (the last attempt that passed, else the rules' conversion)
  std::vector<RewriteAttempt> attempts;
  std::string failure;  // why not accepted, one paragraph
  json to_json() const;
};

// Starts from the rules' conversion; only what `rules_conversion.left` lists goes to the LLM.
// `rewriter` and `judge` are LlmClients (may be the same). Expected failures are values;
// SystemError only when the toolchain or the filesystem is unusable.
RewriteResult rewrite_loop(const Analysis& analysis, const std::string& original_source,
                           const Conversion& rules_conversion, llm::LlmClient& rewriter, llm::LlmClient& judge,
                           const RewriteOptions& options);

// The answer's program: the longest fenced ```cuda / ```cpp / ```c++ / ``` block; "" when none.
std::string extract_program(const std::string& answer);

// "" when `candidate` keeps the frozen parts of `original` (every braid:input/output annotation
// with its buffer, harness_main when the original used the harness, parses as a NCCL program),
// else one line saying what vanished.
std::string frozen_parts_problem(const Analysis& original, const std::string& candidate, const std::string& file);

// The rules' generated replacements, folded for prompts: the block between the prelude's markers
// becomes the one line kFoldMarker (a model need not read or copy ~500 generated lines), its
// interface (the replacements' declarations) goes into the prompt, and unfold_prelude() puts the
// block back into an answer that kept the marker line.
inline constexpr const char* kFoldMarker =
    "// ==== braid convert's replacements (generated; folded: keep this line as it is) ====";
struct FoldedProgram {
  std::string text;       // the program with the block folded ("" prelude: nothing to fold)
  std::string prelude;    // the folded block
  std::string api;        // declarations of the replacements a rewrite may call
  int marker_line = 0;    // line of the marker in `text` (= first line of the block unfolded)
  int prelude_lines = 0;  // lines of the block
};
FoldedProgram fold_prelude(const std::string& program);
std::string unfold_prelude(const std::string& program, const FoldedProgram& folded);

// Which stage each `left` entry belongs to: "A" for infrastructure constructs (allocation,
// window, communicator), "B" otherwise.
std::string stage_of(const Unconverted& u);

}  // namespace braid::convert
