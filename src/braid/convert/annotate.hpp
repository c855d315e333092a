// Annotator: the last step of the fast path. A converted program (transform.hpp, or the LLM
// rewrite loop's result) becomes an evolvable one: EVOLVE-BLOCK regions around the converted
// collectives and the compute next to them, and braid:knob declarations that drive real code
// paths of the inserted prelude. Harness, initialisation and verification stay frozen.
//
// By rules (always):
//   * a file-scope block `knobs` right after the prelude declares, per converted call site N,
//       kSiteNIssuer     braid::dev::Issuer::Thread|Warp|Cta   thread group copying one chunk
//       kSiteNCtas       0|8|16|32|64|132                      CTAs of the collective (0 = rule)
//       kSiteNChunkBytes 0|16384|65536|262144|1048576          bytes per chunk (0 = rule)
//       kSiteNBackend    braid::dev::Backend::Lsa|Gin          pinned to Lsa by a braid:require:
//                        the converted device communicator requests no GIN resources
//     and `using BraidSiteN = braid_converted::Site<N, kSiteNIssuer, kSiteNCtas, kSiteNChunkBytes,
//     kSiteNBackend>;`; the call `braid_converted::all_gather<N>` becomes
//     `...all_gather<BraidSiteN>` (one template argument: it may sit in a one-argument macro; for
//     a send/recv group: its group_end<N>; a group of collectives only gets no knobs there). The
//     defaults (Cta, 0, 0, Lsa) are the prelude's Shape<> defaults, which take exactly the rules'
//     launch (device/include/braid/converted/prelude_shape.cuh: rule_shape), so gen0 behaves as the converted program.
//   * a block `comm_N` around each call's statement and the statements next to it in the same
//     scope (kernel launches, cuBLAS and other compute calls, stream-ordered async copies),
//     bounded by anything that must stay frozen: braid:input/output annotations, host
//     synchronisation, events, allocation and release, communicator calls, host NCCL, return,
//     compound statements, preprocessor lines, scope ends. Adjacent regions merge.
// LLM-assisted (with a client): the model gets the rules' annotation and may move blocks and add
// knobs; its program is taken only if it parses with >= 1 block and knob, keeps every frozen line
// (annotate_llm_problem) and compiles (nvcc -c); otherwise the rules' annotation stays, and the
// reason is recorded.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "braid/util/json.hpp"

namespace braid::llm {
class LlmClient;
}

namespace braid::convert {

struct AnnotatedSite {
  int site = 0;
  std::string function;  // all_gather, all_reduce, ..., group_end
  int line = 0;          // line of the call in the converted program
  std::string block;     // comm_N holding the call, "" when its statement could not be blocked
  std::vector<std::string> knobs;
};

struct AnnotateOptions {
  llm::LlmClient* llm = nullptr;     // nullptr: rules only
  std::filesystem::path work_dir;    // nvcc -c of the LLM's answer happens here
  std::filesystem::path source_dir;  // -I for the program's own headers
  std::vector<std::string> flags;    // nvcc flags; default_nvcc_flags() when empty
  int llm_max_tokens = 16384;
  std::filesystem::path record_dir;  // prompt and answer written here ("" = not written)
};

struct AnnotatedProgram {
  std::string source;  // the annotated program (gen0)
  std::string method;  // "rules" | "llm"
  std::vector<AnnotatedSite> sites;
  std::vector<std::string> blocks;  // block names in order
  int knob_count = 0;
  std::string rules_source;  // the rules' annotation (equal to source when method == "rules")
  std::string
      llm_outcome;  // "" (no LLM) | accepted | llm_error | no_code | parse_failed | frozen_changed | build_failed
  std::string llm_detail;  // why the LLM's answer was not taken, one paragraph
  json to_json() const;    // without the sources
};

// The rules' annotation of a converted program. Throws UserError when the text has no converted
// call site (nothing to tune): `file` names it.
AnnotatedProgram annotate_rules(const std::string& file, const std::string& converted_source);

// Rules, then the LLM when options.llm is set. Expected LLM failures are values.
AnnotatedProgram annotate(const std::string& file, const std::string& converted_source, const AnnotateOptions& options);

// "" when `candidate` (an LLM's annotated program) keeps the frozen parts of `rules` (the rules'
// annotation of the same converted program): its lines outside blocks are, in order, lines of the
// converted program; the prelude and every frozen-only line (annotations, synchronisation,
// allocation, communicator, harness entry) stay outside blocks. Else one line naming the problem.
std::string annotate_llm_problem(const std::string& converted_source, const std::string& candidate);

// The text with every EVOLVE-BLOCK marker line, knob block and knob template argument removed:
// for an annotation by rules this is the converted program again (the test of "same code path").
std::string strip_annotation(const std::string& annotated);

}  // namespace braid::convert
