#include "braid/pipeline/pipeline.hpp"

#include <algorithm>
#include <ctime>

#include <fmt/format.h>

#include "braid/llm/settings.hpp"
#include "braid/pipeline/pipeline_impl.hpp"
#include "braid/pipeline/run_lock.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/hash.hpp"

namespace braid {
namespace pipeline_detail {

namespace {

fs::path default_results(const fs::path& input) {
  auto t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", std::localtime(&t));
  return fs::path("results") / fmt::format("{}-{}", input.stem().string(), buf);
}

json read_json(const fs::path& p) { return json::parse(read_file(p)); }

}  // namespace

Pipeline::Pipeline(PipelineOptions options, PipelineHooks hooks)
    : o_(std::move(options)),
      hooks_(std::move(hooks)),
      results_(o_.results.empty() ? default_results(o_.input) : o_.results),
      state_(results_) {}

void Pipeline::validate() {
  read_input();
  check_options();
  check_results_folder();
}

// The seed, its build flags and what the rules convert: a seed that neither the rules nor an
// LLM can convert is bad input.
void Pipeline::read_input() {
  if (fs::is_directory(o_.input))
    throw UserError(o_.input.string(), "is a folder: give one CUDA/NCCL source file (.cu)");
  if (!fs::is_regular_file(o_.input)) throw UserError(o_.input.string(), "no such file");
  // The program's own headers that call NCCL are written into it (the seed), so that their calls convert too.
  const convert::InlinedSource inlined = read_user_program(o_.input, o_.flags);
  original_ = inlined.text;
  flags_ = convert::resolve_build_flags(o_.input.string(), original_, to_build_flags(o_.flags));
  analysis_ = convert::analyze(o_.input.string(), original_, true,
                               convert::with_inlined(convert::SourceContext{flags_.includes, flags_.defines}, inlined));
  rules_ = convert::transform(analysis_, original_);
  if (rules_.converted_calls == 0 && !wants_llm(o_.llm))
    throw UserError(o_.input.string(),
                    "no NCCL call can be converted by rules (" + std::to_string(rules_.nccl_calls) +
                        " found): pass --llm MODEL to rewrite them, or see `braid convert --explain`");
}

void Pipeline::check_options() {
  if (o_.ranks < 2) throw UserError("--ranks", "needs at least 2 ranks");
  if (!(o_.gate_timeout_s > 0)) throw UserError("--gate-timeout", "must be a number of seconds > 0");
  const auto& steps = pipeline_steps();
  if (!o_.until.empty() && std::find(steps.begin(), steps.end(), o_.until) == steps.end())
    throw UserError("--until", "unknown step '" + o_.until + "' (convert, gate, annotate, workload, record, evolve)");
  if (!o_.config.empty() && !fs::is_regular_file(o_.config)) throw UserError(o_.config.string(), "no such file");
  if (wants_llm(o_.llm)) parse_llm_settings(llm_config(), o_.config.empty() ? "--llm" : o_.config.string());
}

// A new folder, an empty one, or one holding a run of this very program.
void Pipeline::check_results_folder() {
  if (!fs::exists(results_)) return;
  if (!state_.exists()) {
    // A folder holding only the lock is one whose first run died before its state was saved.
    const bool only_lock = fs::is_directory(results_) &&
                           std::distance(fs::directory_iterator(results_), fs::directory_iterator()) == 1 &&
                           fs::exists(results_ / kLockFile);
    if (!fs::is_directory(results_) || (!fs::is_empty(results_) && !only_lock))
      throw UserError(results_.string(), "exists and holds no braid run (no run_state.json): choose a new folder");
  } else {
    const json& r = state_.root();
    if (r.value("input_hash", "") != hash_hex(original_))
      throw UserError(results_.string(), "holds a run of another program (" + r.value("input", std::string("?")) +
                                             "): choose a new folder");
  }
}

PipelineReport Pipeline::run() {
  const bool created = !fs::exists(results_);
  fs::create_directories(results_);
  RunLock lock(results_);  // one braid per results folder, for every step (the evolve step re-enters it)
  record_options();
  try {
    llm_client();  // a missing API key is bad input too: found before any step writes
    return run_steps();
  } catch (const UserError&) {
    // LLM keys are checked when the first client is made: nothing stays behind for bad input.
    if (created && state_.root()["steps"].empty()) fs::remove_all(results_);
    throw;
  }
}

// The first run of a folder records its input and options (stored_pipeline_options reads them).
void Pipeline::record_options() {
  json& r = state_.root();
  if (r.contains("input")) return;
  r["input"] = fs::absolute(o_.input).lexically_normal().string();
  r["input_hash"] = hash_hex(original_);
  const UserFlags& f = o_.flags;
  r["options"] = {{"ranks", o_.ranks},
                  {"gate_timeout_s", o_.gate_timeout_s},
                  {"gate", !o_.no_gate},
                  {"build", !o_.no_build},
                  {"llm", o_.llm},
                  {"config", o_.config.empty() ? "" : fs::absolute(o_.config).string()},
                  {"includes", f.includes},
                  {"defines", f.defines},
                  {"lib_dirs", f.lib_dirs},
                  {"lib_names", f.lib_names},
                  {"nvcc_flags", f.nvcc_flags},
                  {"keep_headers", f.keep_headers}};
  state_.save();
}

PipelineReport Pipeline::run_steps() {
  PipelineReport report;
  report.results = results_;
  bool rerun = false;  // once a step runs, every later step runs too
  for (const auto& step : pipeline_steps()) {
    if (!rerun && keep(step)) {
      say(step, "done earlier (kept)" + kept_note(step));
      load(step);
    } else {
      if (!rerun) state_.reopen_from(step);
      rerun = true;
      const StepResult r = run_step(step);
      if (r.exit_code != 0) {
        report.exit_code = r.exit_code;
        if (!r.failure.empty()) report.failed_step = step;
        report.failure = r.failure;
        return report;
      }
    }
    if (step == o_.until) {
      report.stopped_after = step;
      return report;
    }
  }
  return report;
}

// Whether a step finished earlier stays. The evolve step always runs: the search itself resumes
// from the database (and stops at once when every generation is in), and -g may ask for more.
// A gate left unverified earlier runs once it can (a GPU machine, no --no-gate).
bool Pipeline::keep(const std::string& step) const {
  if (step == "evolve") return false;
  const bool gate_now_possible =
      step == "gate" && state_.info(step).value("status", "") == "unverified" && gate_possible().empty();
  return !gate_now_possible && state_.done(step);
}

std::string Pipeline::kept_note(const std::string& step) const {
  const json i = state_.info(step);
  if (step == "gate") return ": " + i.value("status", std::string("?"));
  return "";
}

// Values later steps need from a step finished earlier.
void Pipeline::load(const std::string& step) {
  if (step == "convert") converted_ = read_file(results_ / "convert/converted.cu");
  if (step == "gate") gate_ = read_json(results_ / "convert/gate.json");
  if (step == "annotate") annotation_ = read_json(results_ / "annotate/annotation.json");
}

StepResult Pipeline::run_step(const std::string& step) {
  if (step == "convert") return step_convert();
  if (step == "gate") return step_gate();
  if (step == "annotate") return step_annotate();
  if (step == "workload") return step_workload();
  if (step == "record") return step_record();
  return step_evolve();
}

// The LLM keys of --config, read as the search reads its config (search/config.hpp).
json Pipeline::llm_config() const {
  if (o_.config.empty()) return json::object();
  register_extra_config_keys(llm_config_keys());
  return load_search_config(o_.config).llm;
}

// One client for the rewrite loop, its judge and the annotator: the first model of --llm.
llm::LlmClient* Pipeline::llm_client() {
  if (!wants_llm(o_.llm)) return nullptr;
  if (!runtime_) {
    LlmSettings s = parse_llm_settings(llm_config(), o_.config.empty() ? "--llm" : o_.config.string());
    runtime_ = make_llm_runtime(s, o_.llm, nullptr, results_ / "convert",
                                "convert and annotate " + o_.input.filename().string(), "cuda");
  }
  return &runtime_->client(runtime_->mutation_models.front());
}

void Pipeline::say(const std::string& step, const std::string& text) const {
  if (hooks_.progress) hooks_.progress(step, text);
}

void Pipeline::write_out(const std::string& relative, const std::string& text) const {
  fs::create_directories((results_ / relative).parent_path());
  write_file_atomic(results_ / relative, text);
}

}  // namespace pipeline_detail

PipelineReport run_pipeline(const PipelineOptions& options, const PipelineHooks& hooks) {
  pipeline_detail::Pipeline p(options, hooks);
  p.validate();
  return p.run();
}

bool is_pipeline_run(const std::filesystem::path& results) {
  return std::filesystem::is_regular_file(results / kPipelineStateFile);
}

PipelineOptions stored_pipeline_options(const std::filesystem::path& results) {
  PipelineState state(results);
  const json& r = state.root();
  const json opts = r.value("options", json::object());
  PipelineOptions o;
  o.input = r.value("input", std::string());
  o.results = results;
  o.ranks = opts.value("ranks", 2);
  o.gate_timeout_s = opts.value("gate_timeout_s", 120.0);
  o.no_gate = !opts.value("gate", true);
  o.no_build = !opts.value("build", true);
  o.llm = opts.value("llm", std::string());
  o.config = opts.value("config", std::string());
  o.flags.includes = opts.value("includes", std::vector<std::string>());
  o.flags.defines = opts.value("defines", std::vector<std::string>());
  o.flags.lib_dirs = opts.value("lib_dirs", std::vector<std::string>());
  o.flags.lib_names = opts.value("lib_names", std::vector<std::string>());
  o.flags.nvcc_flags = opts.value("nvcc_flags", std::string());
  o.flags.keep_headers = opts.value("keep_headers", false);  // a resume reads the program as the run did
  return o;
}

}  // namespace braid
