#include "braid/convert/rewrite_loop.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <regex>
#include <set>
#include <sstream>

#include "braid/convert/diagnostic_rerun.hpp"
#include "braid/convert/transform_plan.hpp"
#include "braid/llm/prompt_template.hpp"
#include "braid/platform/device_headers.hpp"
#include "braid/platform/toolchain.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/log.hpp"
#include "braid/util/text.hpp"

namespace braid::convert {
namespace {

struct StageInfo {
  const char* id;
  const char* name;
  const char* goal;
};

const StageInfo kStages[] = {
    {"A", "infrastructure",
     "put the buffers that device-side communication touches in symmetric memory (ncclMemAlloc), register their "
     "windows and create the device communicator, with teardown before the communicator is destroyed."},
    {"B", "collectives",
     "replace the host NCCL calls listed below by device-initiated communication built from braid's primitives "
     "(or the rules' braid_converted replacements), keeping every rank's results identical to the original's."}};

// The contract comments of braid's device headers: the rewriter must build on these primitives.
std::string primitive_contracts() {
  std::string out;
  for (const auto& h : device_header_contracts(find_device_include())) out += h.prompt_section();
  if (out.empty())
    throw SystemError(
        "braid's device headers (device/include/braid/*.cuh) were not found: the rewrite prompt needs their contracts");
  return out;
}

// The statement text at `line` of `source` (one line, shortened), to locate a construct.
std::string line_text(const std::string& source, int line) {
  std::istringstream in(source);
  std::string l;
  for (int n = 1; std::getline(in, l); ++n)
    if (n == line) {
      std::string t = trimmed(l);
      return t.size() > 160 ? t.substr(0, 157) + "..." : t;
    }
  return "";
}

std::string left_list(const std::vector<Unconverted>& items, const std::string& original) {
  std::string out;
  for (const Unconverted& u : items)
    out += fmt::format("- line {}: {}: {}\n    `{}`\n", u.line, u.construct, u.reason, line_text(original, u.line));
  return out;
}

std::string frozen_list(const Analysis& a) {
  std::string out;
  for (const Annotation& an : a.annotations)
    out += fmt::format("    // braid:{} {}   (original line {})\n", an.kind, an.buffer, an.line);
  if (a.uses_harness) out += "    the harness entry (harness_main and the Candidate's run/teardown)\n";
  if (out.empty()) out = "    (no annotations)\n";
  return out;
}

// Failure text for a prompt: compiler output can be long and its head (the first error) matters most.
std::string clip(const std::string& text, std::size_t max_chars = 6000) {
  if (text.size() <= max_chars) return text;
  return text.substr(0, max_chars) + fmt::format("\n[... {} more characters]", text.size() - max_chars);
}

void record_attempt(const std::filesystem::path& dir, const RewriteAttempt& at) {
  if (dir.empty()) return;
  const std::string base = fmt::format("stage{}_iter{}", at.stage, at.iteration);
  write_file_atomic(dir / (base + ".prompt.md"), at.prompt);
  write_file_atomic(dir / (base + ".answer.md"), at.answer);
  if (!at.code.empty()) write_file_atomic(dir / (base + ".cu"), at.code);
  if (!at.judge_prompt.empty()) write_file_atomic(dir / (base + ".judge.md"), at.judge_prompt);
  json j{{"stage", at.stage},
         {"iteration", at.iteration},
         {"outcome", at.outcome},
         {"outcome_text", at.outcome_text},
         {"diagnosis", at.diagnosis}};
  write_file_atomic(dir / (base + ".outcome.json"), j.dump(2) + "\n");
}

// Host NCCL calls the stage was to convert that the candidate still makes. A left group stands
// for its point-to-point calls.
std::string still_host(const Analysis& candidate, const std::string& candidate_source,
                       const std::vector<Unconverted>& items) {
  std::set<std::string> names;
  for (const Unconverted& u : items) {
    if (nccl_signature(u.construct)) names.insert(u.construct);
    if (u.construct == "ncclGroupStart..ncclGroupEnd") names.insert({"ncclSend", "ncclRecv"});
  }
  std::string out;
  for (const Call& c : candidate.calls) {
    if (c.kind != CallKind::Nccl || !names.count(c.name)) continue;
    // analyze_converted reads braid_converted:: replacements back as NCCL names: those are device calls.
    if (candidate_source.compare(c.call_begin, 15, "braid_converted") == 0) continue;
    out += fmt::format("{}line {}: {} is still a host NCCL call", out.empty() ? "" : "; ", c.line, c.name);
  }
  return out;
}

// Stage A: buffers the rules could not move to symmetric memory (stream-ordered or managed
// allocations) that the candidate still does not allocate through braid_converted::sym_*, so the
// converted calls on them would fall back to host NCCL at run time.
std::string still_unmoved(const Analysis& original, const Analysis& candidate, const std::string& candidate_source,
                          const std::vector<Unconverted>& items) {
  std::string out;
  for (const Unconverted& u : items) {
    if (!stage_a_allocator(u.construct)) continue;
    for (const auto& [name, b] : original.buffers) {
      if (b.line != u.line || b.allocator != u.construct) continue;
      bool moved = false;
      if (auto it = candidate.buffers.find(name);
          it != candidate.buffers.end() && it->second.alloc_call < candidate.calls.size())
        moved = candidate_source.compare(candidate.calls[it->second.alloc_call].call_begin, 15, "braid_converted") == 0;
      if (!moved)
        out += fmt::format(
            "{}buffer `{}` (original line {}, {}) still does not come from braid_converted::sym_malloc: the converted "
            "calls on it would fall back to host NCCL",
            out.empty() ? "" : "; ", name, u.line, u.construct);
    }
  }
  return out;
}

const char* const kPreludeBegin = "// ==== braid convert: device-initiated replacements";
const char* const kPreludeEnd = "// ==== end of braid convert's replacements ====";

int line_of(const std::string& text, std::size_t pos) {
  return 1 + (int)std::count(text.begin(), text.begin() + (long)pos, '\n');
}

// The declarations of the replacements a rewrite may call (sym_malloc, all_reduce<SITE>, ...):
// the folded prelude's interface, so the model knows the signatures without the bodies.
std::string replacement_api(const std::string& prelude) {
  static const std::set<std::string> kPublic = {
      "sym_malloc",           "sym_nccl_alloc", "sym_free",   "sym_nccl_free",  "comm_destroy", "comm_finalize",
      "comm_abort",           "all_gather",     "all_reduce", "reduce_scatter", "broadcast",    "bcast",
      "all_to_all",           "send",           "recv",       "group_start",    "group_end",    "sym_malloc_agreed",
      "sym_nccl_alloc_agreed"};
  std::vector<std::string> lines;
  {
    std::istringstream in(prelude);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  std::string out;
  int depth = 0;  // namespace braid_converted's own level is 1: nested scopes are not its interface
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    if (depth == 1 && line.rfind("inline ", 0) == 0) {
      const std::size_t paren = line.find('(');
      std::size_t name_begin = paren == std::string::npos ? 0 : line.find_last_of(" *&", paren) + 1;
      const std::string name = paren == std::string::npos ? "" : line.substr(name_begin, paren - name_begin);
      if (kPublic.count(name)) {
        std::string decl = (i > 0 && lines[i - 1].rfind("template", 0) == 0) ? lines[i - 1] + "\n" : "";
        // The signature up to its body's brace (it may continue on the next line).
        std::string sig = line;
        for (std::size_t k = i + 1; sig.find('{') == std::string::npos && k < lines.size() && k < i + 4; ++k)
          sig += "\n" + lines[k];
        if (const std::size_t brace = sig.find('{'); brace != std::string::npos) sig = trimmed(sig.substr(0, brace));
        out += decl + sig + ";\n";
      }
    }
    for (char c : line) depth += c == '{' ? 1 : c == '}' ? -1 : 0;
  }
  return out;
}

// Compiler and rerun messages name lines of the unfolded program; the model sees the folded one.
std::string to_folded_lines(const std::string& text, const FoldedProgram& f) {
  if (f.prelude.empty()) return text;
  const int first_after = f.marker_line + f.prelude_lines;  // first unfolded line after the block
  const int shift = f.prelude_lines - 1;
  static const std::regex kLineRef(R"((\.cu\(|\.cu:|line )(\d+))");
  std::string out;
  auto begin = std::sregex_iterator(text.begin(), text.end(), kLineRef);
  std::size_t last = 0;
  for (auto it = begin; it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    int n = std::stoi(m[2].str());
    if (n >= first_after) n -= shift;
    out += text.substr(last, (std::size_t)m.position(0) - last) + m[1].str() + std::to_string(n);
    last = (std::size_t)(m.position(0) + m.length(0));
  }
  return out + text.substr(last);
}

// What every attempt of the loop reads.
struct LoopInputs {
  const Analysis& analysis;
  const std::string& original_source;
  const RewriteOptions& options;
  const llm::PromptLibrary& prompts;
  std::string contracts;  // read on the first LLM call: a finished conversion needs none
};

// One stage's work and what its previous attempt left for the next prompt.
struct StageState {
  const StageInfo& stage;
  std::vector<Unconverted> items;  // what the rules left for this stage
  std::string left;                // items as the prompt lists them
  std::string done;                // stages passed before this one ("A")
  RewriteAttempt previous;
  std::string previous_text;  // previous.outcome_text with lines of the folded program
};

std::string rewrite_prompt(const LoopInputs& in, const StageState& st, int it, const FoldedProgram& folded) {
  llm::PromptVars vars{{"stage", st.stage.id},
                       {"stage_name", st.stage.name},
                       {"stage_goal", st.stage.goal},
                       {"stage_done", st.done},
                       {"iteration", std::to_string(it)},
                       {"max_iterations", std::to_string(in.options.max_iterations_per_stage)},
                       {"left", st.left},
                       {"frozen", frozen_list(in.analysis)},
                       {"contracts", in.contracts},
                       {"file", in.analysis.file},
                       {"original", in.original_source},
                       {"program", folded.text},
                       {"api", folded.api},
                       {"fold_marker", folded.prelude.empty() ? "" : kFoldMarker},
                       {"previous_outcome", st.previous.outcome},
                       {"previous_text", st.previous_text},
                       {"diagnosis", st.previous.diagnosis}};
  return in.prompts.render("convert_rewrite.md", vars);
}

// The gate on a candidate that analyses and converts what the stage asked: at.outcome from its
// verdict ("original_failed" when the reference itself cannot run). True when the judge should look.
bool gate_candidate(const LoopInputs& in, const Analysis& cand, RewriteAttempt& at) {
  // One work folder for every iteration: the original's build stays in its compile cache.
  GateOptions go = in.options.gate;
  go.run = true;
  const GateResult g = run_gate_on_candidate(in.analysis, in.original_source, cand, at.code, go);
  if (!g.passed && g.failure.rfind("original ", 0) == 0) {
    // Nothing a rewrite can fix: the reference itself does not build or run here.
    at.outcome = "original_failed";
    at.outcome_text = g.failure;
    return false;
  }
  if (g.passed) {
    at.outcome = "passed";
  } else if (!g.built) {
    at.outcome = "build_failed";
  } else if (!g.ran) {
    at.outcome = "run_failed";
  } else {
    at.outcome = "wrong_output";
  }
  at.outcome_text = g.failure;
  if (at.outcome == "run_failed" && in.options.diagnostic_rerun) {
    const DiagnosticReport d = diagnostic_rerun(cand, at.code, go);
    at.outcome_text += "\ndiagnostic rerun (synchronised after every step): " + d.text;
  }
  return !g.passed;
}

// The rewriter's answer checked in order: an answer, a program in it, frozen parts kept, the
// stage's calls converted, then compiled (no gate) or through the gate. Sets at.outcome; true
// when the judge should diagnose the failure.
bool check_answer(const LoopInputs& in, const StageState& st, int it, const llm::LlmResponse& resp,
                  const FoldedProgram& folded, RewriteAttempt& at) {
  if (!resp.ok()) {
    at.outcome = "llm_error";
    at.outcome_text = resp.error_kind + ": " + resp.error;
    return false;
  }
  if ((at.code = unfold_prelude(extract_program(resp.text), folded)).empty()) {
    at.outcome = "no_code";
    at.outcome_text =
        "the answer holds no fenced ```cuda block with the whole program; answer with the complete program in one such "
        "block";
    return false;
  }
  if (const std::string problem = frozen_parts_problem(in.analysis, at.code, in.analysis.file); !problem.empty()) {
    at.outcome = "frozen_changed";
    at.outcome_text = problem + "; keep every frozen part exactly as in the original";
    return false;
  }
  const Analysis cand = analyze_converted(in.analysis.file, at.code);
  const std::string host = st.stage.id == std::string("B") ? still_host(cand, at.code, st.items)
                                                           : still_unmoved(in.analysis, cand, at.code, st.items);
  if (!host.empty()) {
    at.outcome = "not_converted";
    at.outcome_text = host;
    return false;
  }
  if (in.options.run_gate) return gate_candidate(in, cand, at);
  const BuildResult br = compile_only(at.code, in.options.gate.work_dir, fmt::format("stage{}_iter{}", st.stage.id, it),
                                      in.options.gate.source_dir, in.options.gate.flags);
  at.outcome = br.ok ? "compiled" : "build_failed";
  at.outcome_text = br.ok ? "" : br.error;
  return !br.ok;
}

// The judge's diagnosis of a failed attempt, for the next prompt (its prose only).
void ask_judge(const LoopInputs& in, const StageState& st, int it, llm::LlmClient& judge,
               const std::string& folded_outcome, const FoldedProgram& attempt_folded, RewriteAttempt& at) {
  llm::PromptVars jv{{"stage", st.stage.id},  {"stage_name", st.stage.name},    {"left", st.left},
                     {"outcome", at.outcome}, {"outcome_text", folded_outcome}, {"code", attempt_folded.text}};
  llm::LlmRequest jr;
  at.judge_prompt = in.prompts.render("convert_judge.md", jv);
  jr.messages.push_back({"user", at.judge_prompt});
  jr.max_tokens = in.options.judge_max_tokens;
  jr.purpose = "convert_judge";
  jr.replay_key = fmt::format("{}/{}/{}/judge", in.options.replay_key_prefix, st.stage.id, it);
  const llm::LlmResponse jresp = judge.complete(jr);
  // The judge writes no code: a fenced block in its answer is cut, its prose kept.
  if (jresp.ok()) {
    std::string d = jresp.text;
    if (const std::size_t fence = d.find("```"); fence != std::string::npos) d = d.substr(0, fence);
    at.diagnosis = trimmed(d);
  } else {
    // The loop goes on without a diagnosis: the outcome text alone still reaches the next prompt.
    log::warn("convert rewrite: judge call failed ({}: {})", jresp.error_kind, jresp.error);
  }
}

// One iteration of a stage: prompt, answer, checks, the judge on a failure. The attempt is
// recorded in `result`; its outcome text with folded lines becomes st.previous_text.
RewriteAttempt attempt_stage(const LoopInputs& in, StageState& st, int it, const std::string& current,
                             llm::LlmClient& rewriter, llm::LlmClient& judge, RewriteResult& result) {
  const FoldedProgram folded = fold_prelude(current);
  RewriteAttempt at;
  at.stage = st.stage.id;
  at.iteration = it;
  at.prompt = rewrite_prompt(in, st, it, folded);
  llm::LlmRequest req;
  req.messages.push_back({"user", at.prompt});
  req.max_tokens = in.options.max_tokens;
  req.purpose = "convert";
  req.replay_key = fmt::format("{}/{}/{}", in.options.replay_key_prefix, st.stage.id, it);
  const llm::LlmResponse resp = rewriter.complete(req);
  at.answer = resp.text;
  const bool judge_it = check_answer(in, st, it, resp, folded, at);
  if (at.outcome == "original_failed") {
    record_attempt(in.options.record_dir, at);
    result.attempts.push_back(at);
    return at;
  }
  const FoldedProgram attempt_folded = fold_prelude(at.code);
  // Compiler and rerun texts name lines of the compiled (unfolded) program; the other outcomes
  // name the original's lines or none.
  const bool names_compiled_lines = at.outcome == "build_failed" || at.outcome == "run_failed";
  const std::string folded_outcome =
      clip(names_compiled_lines ? to_folded_lines(at.outcome_text, attempt_folded) : at.outcome_text);
  if (judge_it) ask_judge(in, st, it, judge, folded_outcome, attempt_folded, at);
  log::info("convert rewrite: stage {} attempt {}: {}", st.stage.id, it, at.outcome);
  record_attempt(in.options.record_dir, at);
  result.attempts.push_back(at);
  st.previous = at;
  st.previous_text = folded_outcome;
  return at;
}

}  // namespace

std::string extract_program(const std::string& answer) {
  // Fences count at the start of a line only; an unterminated block is a truncated answer.
  std::string best, body, tag;
  bool open = false;
  std::istringstream in(answer);
  for (std::string line; std::getline(in, line);) {
    const std::string t = trimmed(line);
    if (t.rfind("```", 0) != 0) {
      if (open) body += line + "\n";
      continue;
    }
    if (!open) {
      open = true;
      tag = trimmed(t.substr(3));
      body.clear();
      continue;
    }
    open = false;
    const bool code_tag = tag.empty() || tag == "cuda" || tag == "cpp" || tag == "c++" || tag == "cu" || tag == "c";
    if (code_tag && body.size() > best.size()) best = body;
  }
  return best;
}

FoldedProgram fold_prelude(const std::string& program) {
  FoldedProgram f;
  f.text = program;
  const std::size_t b = program.find(kPreludeBegin);
  if (b == std::string::npos) return f;
  const std::size_t e = program.find(kPreludeEnd, b);
  if (e == std::string::npos) return f;
  const std::size_t end = e + std::strlen(kPreludeEnd);
  f.prelude = program.substr(b, end - b);
  f.prelude_lines = (int)std::count(f.prelude.begin(), f.prelude.end(), '\n') + 1;
  f.marker_line = line_of(program, b);
  f.api = replacement_api(f.prelude);
  f.text = program.substr(0, b) + kFoldMarker + program.substr(end);
  return f;
}

std::string unfold_prelude(const std::string& program, const FoldedProgram& folded) {
  const std::size_t at = program.find(kFoldMarker);
  if (folded.prelude.empty() || at == std::string::npos) return program;  // no fold, or the model wrote it out
  return program.substr(0, at) + folded.prelude + program.substr(at + std::strlen(kFoldMarker));
}

std::string stage_of(const Unconverted& u) {
  static const std::set<std::string> kInfrastructure = {
      "cudaMalloc",  "cudaMallocAsync",        "cudaMallocManaged", "ncclMemAlloc",  "cudaFree",
      "ncclMemFree", "ncclCommWindowRegister", "ncclDevCommCreate", "ncclCommSplit", "cudaMallocPitch"};
  if (kInfrastructure.count(u.construct) || u.construct == "cudaMallocFromPoolAsync") return "A";
  for (const char* word : {"symmetric memory", "window", "communicator"})
    if (u.reason.find(word) != std::string::npos && !nccl_signature(u.construct)) return "A";
  return "B";
}

std::string frozen_parts_problem(const Analysis& original, const std::string& candidate, const std::string& file) {
  Analysis cand;
  try {
    cand = analyze_converted(file, candidate);
  } catch (const UserError& e) {
    return std::string("the rewrite cannot be analysed: ") + e.what();
  }
  std::multiset<std::pair<std::string, std::string>> kept;
  for (const Annotation& an : cand.annotations) kept.insert({an.kind, an.buffer});
  std::string missing;
  for (const Annotation& an : original.annotations) {
    auto it = kept.find({an.kind, an.buffer});
    if (it == kept.end()) {
      missing += fmt::format("{}`// braid:{} {}` (original line {})", missing.empty() ? "" : ", ", an.kind, an.buffer,
                             an.line);
      continue;
    }
    kept.erase(it);
  }
  if (!missing.empty()) return "the rewrite dropped the frozen annotation(s) " + missing;
  if (original.uses_harness && !cand.uses_harness)
    return "the rewrite no longer runs through the braid harness (harness_main)";
  return "";
}

json RewriteResult::to_json() const {
  json atts = json::array();
  for (const RewriteAttempt& a : attempts)
    atts.push_back({{"stage", a.stage},
                    {"iteration", a.iteration},
                    {"outcome", a.outcome},
                    {"outcome_text", a.outcome_text},
                    {"diagnosis", a.diagnosis},
                    {"prompt_chars", a.prompt.size()},
                    {"answer_chars", a.answer.size()},
                    {"code_chars", a.code.size()}});
  json j{{"accepted", accepted}, {"attempts", atts}};
  if (!failure.empty()) j["failure"] = failure;
  return j;
}

RewriteResult rewrite_loop(const Analysis& analysis, const std::string& original_source,
                           const Conversion& rules_conversion, llm::LlmClient& rewriter, llm::LlmClient& judge,
                           const RewriteOptions& options) {
  RewriteResult result;
  result.source = rules_conversion.source;
  if (options.max_iterations_per_stage < 1) throw UserError("", "max_iterations_per_stage must be at least 1");
  if (!options.record_dir.empty()) std::filesystem::create_directories(options.record_dir);
  const llm::PromptLibrary prompts(options.prompts_dir);
  LoopInputs in{analysis, original_source, options, prompts, ""};

  std::string current = rules_conversion.source;
  std::string stage_done;
  for (const StageInfo& stage : kStages) {
    StageState st{stage, {}, "", stage_done, {}, ""};
    for (const Unconverted& u : rules_conversion.left)
      if (stage_of(u) == stage.id) st.items.push_back(u);
    if (st.items.empty()) continue;  // the rules did this stage: no LLM call
    if (in.contracts.empty()) in.contracts = primitive_contracts();
    st.left = left_list(st.items, original_source);
    bool stage_passed = false;
    for (int it = 1; it <= options.max_iterations_per_stage && !stage_passed; ++it) {
      const RewriteAttempt at = attempt_stage(in, st, it, current, rewriter, judge, result);
      if (at.outcome == "original_failed") {
        result.failure = "the gate cannot use the original program: " + at.outcome_text;
        return result;
      }
      stage_passed = at.outcome == "passed" || at.outcome == "compiled";
      if (stage_passed) current = at.code;
    }
    if (!stage_passed) {
      result.source = current;
      result.failure = fmt::format(
          "stage {} ({}): no rewrite accepted within the bound of {} iterations (max_iterations_per_stage); last "
          "outcome: {}{}",
          stage.id, stage.name, options.max_iterations_per_stage, st.previous.outcome,
          st.previous.outcome_text.empty() ? "" : ": " + clip(st.previous.outcome_text, 400));
      return result;
    }
    stage_done = stage_done.empty() ? stage.id : stage_done + ", " + stage.id;
  }
  result.accepted = true;
  result.source = current;
  return result;
}

}  // namespace braid::convert
