// `braid run seed.cu`: the whole flow on one host-driven program, resumable step by step.
//
//   convert   rules (transform.hpp), then the LLM rewrite loop for what they left when --llm is
//             given; the result must compile (nvcc -c) where a toolkit exists
//   gate      original vs converted on --ranks local GPUs (every rank's outputs compared);
//             --no-gate or no GPU: status "unverified", said on the terminal and in the record
//   annotate  evolve blocks and knobs (annotate.hpp; the LLM proposes them when --llm is given)
//   workload  <results>/workload/: workload.yaml (kind gpu), config.yaml, gen0.cu, seed.cu
//   record    <results>/evolution.db with the run's metadata, the conversion summary included
//             (meta "conversion": what `braid report` and `braid serve` show)
//   evolve    the island search over gen0.cu (the same runner as `braid evolve`/`braid resume`)
//
// <results>/run_state.json records each finished step with the hashes of its outputs; running
// `braid run` again (or `braid resume <results>`) continues from the first step that is not
// finished or whose outputs changed, and the evolve step resumes the search from the database.
#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <ctime>
#include <random>

#include <fmt/format.h>

#include "braid/cli/command.hpp"
#include "braid/cli/run_lock.hpp"
#include "braid/cli/run_setup.hpp"
#include "braid/convert/analyzer.hpp"
#include "braid/convert/annotate.hpp"
#include "braid/convert/build_flags.hpp"
#include "braid/convert/gate.hpp"
#include "braid/convert/rewrite_loop.hpp"
#include "braid/convert/transform.hpp"
#include "braid/llm/settings.hpp"
#include "braid/mutate/llm_runtime.hpp"
#include "braid/platform/toolchain.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/hash.hpp"
#include "braid/util/log.hpp"

namespace braid::cli {

namespace fs = std::filesystem;

namespace {

constexpr const char* kStateFile = "run_state.json";
const std::vector<std::string> kSteps = {"convert", "gate", "annotate", "workload", "record", "evolve"};

struct RunArgs {
  fs::path input;
  fs::path results;
  fs::path config;
  std::string llm;           // "" or "none": no LLM
  std::int64_t generations = -1;
  int parallel = -1;
  std::int64_t seed = -1;
  int ranks = 2;
  bool no_gate = false;
  bool no_build = false;     // skip nvcc -c of the conversion (the evolve builds gen0 anyway)
  std::string until;         // stop after this step
  std::vector<std::string> includes, defines, lib_dirs, lib_names;  // -I -D -L -l
  std::string nvcc_flags;                                          // other nvcc flags, one string
};

bool wants_llm(const std::string& llm) { return !llm.empty() && llm != "none"; }

std::string file_hash(const fs::path& p) {
  auto text = try_read_file(p);
  return text ? hash_hex(*text) : "";
}

// The state file: what each finished step wrote, with hashes, and the options of the run.
class RunState {
 public:
  explicit RunState(fs::path results) : results_(std::move(results)) {
    if (auto text = try_read_file(results_ / kStateFile)) {
      try {
        j_ = json::parse(*text);
      } catch (const std::exception& e) {
        throw UserError((results_ / kStateFile).string(), std::string("unreadable run state: ") + e.what());
      }
    } else {
      j_ = {{"version", 1}, {"steps", json::object()}};
    }
  }
  json& root() { return j_; }
  const json& root() const { return j_; }
  bool exists() const { return fs::exists(results_ / kStateFile); }

  // Finished, and every output still has the hash it was written with.
  bool done(const std::string& step) const {
    const json* s = step_json(step);
    if (s == nullptr || !s->value("done", false)) return false;
    const json outputs = s->value("outputs", json::object());
    for (auto& [rel, hash] : outputs.items())
      if (file_hash(results_ / rel) != hash.get<std::string>()) return false;
    return true;
  }
  json info(const std::string& step) const {
    const json* s = step_json(step);
    return s ? s->value("info", json::object()) : json::object();
  }
  void finish(const std::string& step, const std::vector<std::string>& outputs, json info = json::object()) {
    json out = json::object();
    for (const auto& rel : outputs) out[rel] = file_hash(results_ / rel);
    j_["steps"][step] = {{"done", true}, {"outputs", out}, {"info", std::move(info)}, {"finished_at", std::time(nullptr)}};
    save();
  }
  // A step that runs again makes every later step unfinished.
  void reopen_from(const std::string& step) {
    bool later = false;
    for (const auto& s : kSteps) {
      if (s == step) later = true;
      if (later && j_["steps"].contains(s)) j_["steps"].erase(s);
    }
    save();
  }
  void save() { write_file_atomic(results_ / kStateFile, j_.dump(2) + "\n"); }

 private:
  const json* step_json(const std::string& step) const {
    auto it = j_.find("steps");
    if (it == j_.end() || !it->contains(step)) return nullptr;
    return &(*it)[step];
  }
  fs::path results_;
  json j_;
};

fs::path default_results(const fs::path& input) {
  auto t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", std::localtime(&t));
  return fs::path("results") / fmt::format("{}-{}", input.stem().string(), buf);
}

void say(const std::string& step, const std::string& text) { std::printf("%-9s %s\n", (step + ":").c_str(), text.c_str()); std::fflush(stdout); }

class Pipeline {
 public:
  Pipeline(RunArgs args, fs::path results) : a_(std::move(args)), results_(std::move(results)), state_(results_) {}

  // Everything that can fail on bad input, before anything is written.
  void validate() {
    if (fs::is_directory(a_.input)) throw UserError(a_.input.string(), "is a folder: give one CUDA/NCCL source file (.cu)");
    if (!fs::is_regular_file(a_.input)) throw UserError(a_.input.string(), "no such file");
    original_ = read_file(a_.input);
    {
      convert::BuildFlags user;
      for (const auto& d : a_.includes) user.includes.push_back(fs::absolute(d).string());
      user.defines = a_.defines;
      for (const auto& d : a_.lib_dirs) user.libs.push_back("-L" + fs::absolute(d).string());
      for (const auto& l : a_.lib_names) user.libs.push_back("-l" + l);
      user.extra = convert::split_flags(a_.nvcc_flags);
      flags_ = convert::resolve_build_flags(a_.input.string(), original_, user);
    }
    analysis_ = convert::analyze(a_.input.string(), original_);
    rules_ = convert::transform(analysis_, original_);
    if (rules_.converted_calls == 0 && !wants_llm(a_.llm))
      throw UserError(a_.input.string(), "no NCCL call can be converted by rules (" + std::to_string(rules_.nccl_calls) +
                                             " found): pass --llm MODEL to rewrite them, or see `braid convert --explain`");
    if (a_.ranks < 2) throw UserError("--ranks", "needs at least 2 ranks");
    if (!a_.until.empty() && std::find(kSteps.begin(), kSteps.end(), a_.until) == kSteps.end())
      throw UserError("--until", "unknown step '" + a_.until + "' (convert, gate, annotate, workload, record, evolve)");
    if (!a_.config.empty() && !fs::is_regular_file(a_.config)) throw UserError(a_.config.string(), "no such file");
    if (wants_llm(a_.llm)) parse_llm_settings(llm_config(), a_.config.empty() ? "--llm" : a_.config.string());
    if (fs::exists(results_)) {
      if (!state_.exists()) {
        // A folder holding only the lock is one whose first run died before its state was saved.
        const bool only_lock = fs::is_directory(results_) && std::distance(fs::directory_iterator(results_), fs::directory_iterator()) == 1 &&
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
  }

  int run() {
    const bool created = !fs::exists(results_);
    fs::create_directories(results_);
    RunLock lock(results_);  // one braid per results folder, for every step (the evolve step re-enters it)
    json& r = state_.root();
    if (!r.contains("input")) {
      r["input"] = fs::absolute(a_.input).lexically_normal().string();
      r["input_hash"] = hash_hex(original_);
      r["options"] = {{"ranks", a_.ranks}, {"gate", !a_.no_gate}, {"build", !a_.no_build}, {"llm", a_.llm}, {"config", a_.config.empty() ? "" : fs::absolute(a_.config).string()},
                      {"includes", a_.includes}, {"defines", a_.defines}, {"lib_dirs", a_.lib_dirs}, {"lib_names", a_.lib_names},
                      {"nvcc_flags", a_.nvcc_flags}};
      state_.save();
    }
    try {
      llm_client();  // a missing API key is bad input too: found before any step writes
      return run_steps();
    } catch (const UserError&) {
      // LLM keys are checked when the first client is made: nothing stays behind for bad input.
      if (created && state_.root()["steps"].empty()) fs::remove_all(results_);
      throw;
    }
  }

 private:
  json llm_config() const {
    json cfg = json::object();
    if (!a_.config.empty()) {
      YAML::Node y;
      try {
        y = YAML::LoadFile(a_.config.string());
      } catch (const YAML::Exception& e) {
        throw UserError(a_.config.string(), std::string("not readable YAML: ") + e.what());
      }
      for (const auto& key : llm_config_keys())
        if (y[key]) {
          YAML::Emitter e;
          e << YAML::Flow << YAML::DoubleQuoted << y[key];
          try {
            cfg[key] = json::parse(e.c_str());
          } catch (const std::exception&) {
            cfg[key] = y[key].as<std::string>();
          }
        }
    }
    return cfg;
  }

  // One client for the rewrite loop, its judge and the annotator: the first model of --llm.
  llm::LlmClient* llm_client() {
    if (!wants_llm(a_.llm)) return nullptr;
    if (!runtime_) {
      LlmSettings s = parse_llm_settings(llm_config(), a_.config.empty() ? "--llm" : a_.config.string());
      runtime_ = make_llm_runtime(s, a_.llm, nullptr, results_ / "convert", "convert and annotate " + a_.input.filename().string(), "cuda");
    }
    return &runtime_->client(runtime_->mutation_models.front());
  }

  std::string rel(const fs::path& p) const { return fs::relative(p, results_).string(); }

  // Writes <results>/<relative>, making its folder.
  void write_out(const std::string& relative, const std::string& text) const {
    fs::create_directories((results_ / relative).parent_path());
    write_file_atomic(results_ / relative, text);
  }

  int run_steps() {
    bool rerun = false;  // once a step runs, every later step runs too
    for (const auto& step : kSteps) {
      // The evolve step always runs: the search itself resumes from the database (and stops at
      // once when every generation is in), and -g may ask for more.
      // A gate left unverified earlier runs once it can (a GPU machine, no --no-gate).
      const bool gate_now_possible = step == "gate" && state_.info(step).value("status", "") == "unverified" && gate_possible().empty();
      if (!rerun && step != "evolve" && !gate_now_possible && state_.done(step)) {
        say(step, "done earlier (kept)" + kept_note(step));
        load(step);
      } else {
        if (!rerun) state_.reopen_from(step);
        rerun = true;
        const int rc = run_step(step);
        if (rc != 0) return rc;
      }
      if (step == a_.until) {
        std::printf("stopped after %s (--until): continue with `braid run %s -o %s`\n", step.c_str(), a_.input.string().c_str(),
                    results_.string().c_str());
        return 0;
      }
    }
    return 0;
  }

  std::string kept_note(const std::string& step) const {
    const json i = state_.info(step);
    if (step == "gate") return ": " + i.value("status", std::string("?"));
    return "";
  }

  // Values later steps need from a step finished earlier.
  void load(const std::string& step) {
    if (step == "convert") converted_ = read_file(results_ / "convert/converted.cu");
    if (step == "gate") gate_ = read_json(results_ / "convert/gate.json");
    if (step == "annotate") annotation_ = read_json(results_ / "annotate/annotation.json");
  }

  static json read_json(const fs::path& p) { return json::parse(read_file(p)); }

  int run_step(const std::string& step) {
    if (step == "convert") return step_convert();
    if (step == "gate") return step_gate();
    if (step == "annotate") return step_annotate();
    if (step == "workload") return step_workload();
    if (step == "record") return step_record();
    return step_evolve();
  }

  int step_convert() {
    using namespace convert;
    json summary = conversion_to_json(rules_);
    converted_ = rules_.source;
    std::string method = "rules";
    say("convert", fmt::format("{} of {} NCCL calls converted by rules ({} changes); {} left", rules_.converted_calls, rules_.nccl_calls,
                               rules_.changes.size(), rules_.left.size()));
    if (!rules_.left.empty() && wants_llm(a_.llm)) {
      RewriteOptions ro;
      ro.gate.work_dir = results_ / "convert/rewrite";
      ro.gate.source_dir = fs::absolute(a_.input).parent_path();
      ro.gate.ranks = a_.ranks;
      ro.gate.flags = flags_.compile_flags();
      ro.gate.libs = flags_.libs;
      ro.run_gate = gate_possible().empty();
      ro.record_dir = results_ / "convert/rewrite";
      llm::LlmClient* client = llm_client();
      RewriteResult rr = rewrite_loop(analysis_, original_, rules_, *client, *client, ro);
      summary["rewrite"] = rr.to_json();
      if (rr.accepted) {
        converted_ = rr.source;
        method = "rules+llm";
      }
      say("convert", fmt::format("LLM rewrite of what was left: {} after {} attempt(s){}", rr.accepted ? "accepted" : "not accepted",
                                 rr.attempts.size(), rr.accepted ? "" : " (" + rr.failure + "); the rules' conversion stays"));
    } else if (!rules_.left.empty()) {
      say("convert", "what is left stays host NCCL (correct, not device-initiated); --llm MODEL would rewrite it");
    }
    if (converted_ == original_ || converted_.find("braid_converted::") == std::string::npos)
      throw UserError(a_.input.string(), "nothing was converted to device-initiated calls; nothing to evolve");
    std::string compiled = a_.no_build ? "not checked (--no-build)" : "not checked (no CUDA toolkit here)";
    if (!a_.no_build && find_cuda_toolchain()) {
      const BuildResult br =
          compile_only(converted_, results_ / "convert/compile", "converted", fs::absolute(a_.input).parent_path(), flags_.compile_flags());
      if (!br.ok) {
        std::fprintf(stderr, "braid: %s: the converted program does not compile:\n%s\n", a_.input.string().c_str(), br.error.c_str());
        return 1;
      }
      compiled = "compiles (nvcc -c)";
    }
    say("convert", compiled);
    summary["method"] = method;
    summary["compiled"] = compiled;
    write_out("convert/converted.cu", converted_);
    write_out("convert/summary.json", summary.dump(2) + "\n");
    write_out("convert/summary.txt", conversion_to_text(rules_));
    state_.finish("convert", {"convert/converted.cu", "convert/summary.json"}, {{"method", method}});
    return 0;
  }

  // "" when the gate can run here, else why not.
  std::string gate_possible() const {
    if (a_.no_gate) return "--no-gate";
    const auto gpus = detect_gpus();
    if ((int)gpus.size() < a_.ranks) return fmt::format("{} GPU(s) here, the gate needs {}", gpus.size(), a_.ranks);
    if (!find_cuda_toolchain()) return "no CUDA toolkit here";
    return "";
  }

  int step_gate() {
    using namespace convert;
    const std::string why_not = gate_possible();
    if (!why_not.empty()) {
      gate_ = {{"status", "unverified"}, {"reason", why_not}};
      say("gate", "UNVERIFIED (" + why_not + "): the converted program was not run against the original; the evolve's own "
                  "verification still checks every candidate");
    } else {
      GateOptions g;
      g.work_dir = results_ / "convert/gate";
      g.source_dir = fs::absolute(a_.input).parent_path();
      g.ranks = a_.ranks;
      g.flags = flags_.compile_flags();
      g.libs = flags_.libs;
      // The rules' conversion is gated as `braid convert --verify` does; a rewrite by the LLM is
      // a whole program of its own (analysed as converted code, instrumented like the original).
      const GateResult r = converted_ == rules_.source
                               ? run_gate(analysis_, original_, rules_, g)
                               : run_gate_on_candidate(analysis_, original_, analyze_converted(a_.input.string(), converted_), converted_, g);
      gate_ = gate_to_json(r);
      gate_["status"] = r.passed ? "verified" : "failed";
      if (!r.passed) {
        write_out("convert/gate.json", gate_.dump(2) + "\n");
        say("gate", "FAILED: " + r.failure);
        std::fprintf(stderr, "braid: %s: the converted program failed the gate; fix it or rerun with --no-gate to evolve it unverified\n",
                     a_.input.string().c_str());
        return 1;
      }
      say("gate", fmt::format("verified: outputs match on {} ranks; original {:.3f} ms, converted {:.3f} ms", a_.ranks, r.original_ms,
                              r.converted_ms));
    }
    write_out("convert/gate.json", gate_.dump(2) + "\n");
    state_.finish("gate", {"convert/gate.json"}, {{"status", gate_.value("status", "")}});
    return 0;
  }

  int step_annotate() {
    convert::AnnotateOptions o;
    o.llm = llm_client();
    o.work_dir = results_ / "annotate";
    o.source_dir = fs::absolute(a_.input).parent_path();
    o.record_dir = wants_llm(a_.llm) ? results_ / "annotate" : fs::path();
    const convert::AnnotatedProgram an = convert::annotate(a_.input.filename().string(), converted_, o);
    annotation_ = an.to_json();
    write_out("workload/gen0.cu", an.source);
    write_out("annotate/annotation.json", annotation_.dump(2) + "\n");
    std::string how = an.method == "llm" ? "by the LLM (checked: parses, frozen parts kept, compiles)" : "by rules";
    if (!an.llm_outcome.empty() && an.method != "llm") how += " (LLM answer not taken: " + an.llm_outcome + ")";
    say("annotate", fmt::format("{} blocks, {} knobs {}", an.blocks.size(), an.knob_count, how));
    state_.finish("annotate", {"workload/gen0.cu", "annotate/annotation.json"}, {{"method", an.method}});
    return 0;
  }

  // workload.yaml: the seed folder's own workload.yaml when it has one (its evaluator, task and
  // sizes), else a GPU workload for the program as it is.
  int step_workload() {
    const fs::path seed_dir = fs::absolute(a_.input).parent_path().lexically_normal();
    const fs::path wdir = results_ / "workload";
    YAML::Node w;
    const fs::path own = seed_dir / "workload.yaml";
    std::string origin = "generated";
    if (fs::is_regular_file(own)) {
      YAML::Node src = YAML::LoadFile(own.string());
      if (src["evaluator"] && src["evaluator"]["kind"] && src["evaluator"]["kind"].as<std::string>() == "gpu") {
        w = src;
        origin = own.string();
      }
    }
    if (!w["evaluator"]) {
      w["task"] = "Make the converted program (" + a_.input.filename().string() +
                  ") as fast as possible on every rank while producing the same outputs. The harness, initialisation and "
                  "verification outside the EVOLVE-BLOCKs are frozen.";
      YAML::Node ev;
      ev["kind"] = "gpu";
      ev["ranks"] = a_.ranks;
      ev["launcher"] = "local";
      ev["arch"] = "auto";
      if (original_.find("cublas") != std::string::npos) ev["libs"].push_back("-lcublas");
      if (flags_.mpi) ev["launcher"] = "mpirun";  // MPI programs bootstrap through MPI
      if (analysis_.uses_harness) ev["args"] = "--size 4096";
      ev["env"]["NCCL_NVLS_ENABLE"] = "0";
      w["evaluator"] = ev;
    }
    w["name"] = a_.input.stem().string();
    w["program"] = "gen0.cu";
    w["language"] = "cuda";
    w["config"] = "config.yaml";
    w["evaluator"]["ranks"] = a_.ranks;
    // Includes resolve against the seed's folder (its own headers), wherever the results are.
    YAML::Node includes;
    includes.push_back(seed_dir.string());
    if (w["evaluator"]["includes"])
      for (const auto& inc : w["evaluator"]["includes"]) {
        const fs::path p = inc.as<std::string>();
        std::string abs = (p.is_absolute() ? p : (seed_dir / p)).lexically_normal().string();
        while (abs.size() > 1 && abs.back() == '/') abs.pop_back();
        if (abs != seed_dir.string()) includes.push_back(abs);
      }
    // The program's own build flags (-I, -D, -L, -l, --nvcc-flags, MPI's), as the gate used them.
    for (const auto& inc : flags_.includes) includes.push_back(inc);
    w["evaluator"]["includes"] = includes;
    if (!flags_.defines.empty() || !flags_.extra.empty()) {
      YAML::Node nf;
      for (const auto& f : flags_.compile_flags())
        if (f.rfind("-I", 0) != 0) nf.push_back(f);
      w["evaluator"]["nvcc_flags"] = nf;
    }
    for (const auto& l : flags_.libs) w["evaluator"]["libs"].push_back(l);
    YAML::Emitter e;
    e << w;
    write_out("workload/workload.yaml", fmt::format("# Written by `braid run {}` ({}).\n{}\n", a_.input.string(), origin, e.c_str()));

    YAML::Node c;
    const fs::path own_config = seed_dir / "config.yaml";
    if (origin != "generated" && fs::is_regular_file(own_config)) c = YAML::LoadFile(own_config.string());
    if (!c["num_generations"]) c["num_generations"] = 20;
    if (!c["max_parallel_jobs"]) c["max_parallel_jobs"] = 1;
    if (!c["num_islands"]) c["num_islands"] = 2;
    YAML::Emitter ce;
    ce << c;
    write_out("workload/config.yaml", std::string("# Search config of this run (braid run); -g/-j/--seed override it.\n") + ce.c_str() + "\n");
    write_out("workload/seed.cu", original_);
    write_out("workload/README.md",
                      fmt::format("# {}\n\nWritten by `braid run {}`. `seed.cu` is the host-driven input, `gen0.cu` its conversion "
                                  "to device-initiated NCCL calls annotated for the search (see ../convert/summary.txt and "
                                  "../annotate/annotation.json). Gate: {}.\n",
                                  a_.input.stem().string(), a_.input.string(), gate_.value("status", std::string("?"))));
    say("workload", rel(wdir) + "/ (workload.yaml, config.yaml, gen0.cu, seed.cu)");
    state_.finish("workload", {"workload/workload.yaml", "workload/config.yaml", "workload/gen0.cu"});
    return 0;
  }

  EvolveRequest evolve_request() const {
    EvolveRequest req;
    req.workload = fs::absolute(results_ / "workload");
    req.config = a_.config.empty() ? fs::path() : fs::absolute(a_.config);
    if (a_.generations >= 0) req.generations = a_.generations;
    if (a_.parallel > 0) req.parallel = a_.parallel;
    if (a_.seed >= 0) req.seed = (std::uint64_t)a_.seed;
    req.results = results_;
    req.llm = wants_llm(a_.llm) ? a_.llm : "none";
    return req;
  }

  json conversion_record() const {
    json summary = read_json(results_ / "convert/summary.json");
    json rec;
    rec["input"] = state_.root().value("input", "");
    rec["method"] = summary.value("method", "rules");
    rec["nccl_calls"] = summary.value("nccl_calls", 0);
    rec["converted_calls"] = summary.value("converted_calls", 0);
    rec["changes"] = summary.value("changes", json::array());
    rec["left"] = summary.value("left", json::array());
    rec["compiled"] = summary.value("compiled", "");
    if (summary.contains("rewrite")) {
      const json& rw = summary["rewrite"];
      rec["rewrite"] = {{"accepted", rw.value("accepted", false)},
                        {"attempts", rw.contains("attempts") ? rw["attempts"].size() : 0},
                        {"failure", rw.value("failure", "")}};
    }
    rec["gate"] = gate_;
    rec["annotation"] = annotation_;
    return rec;
  }

  int step_record() {
    const EvolveRequest req = evolve_request();
    WorkloadSpec spec = load_workload(req.workload);
    SearchConfig cfg = resolve_config(req, spec);
    if (cfg.seed == 0) cfg.seed = std::random_device{}() | (std::uint64_t(std::random_device{}()) << 32);
    ProgramDatabase db(db_path(results_));
    db.set_meta("workload_dir", fs::absolute(spec.dir).string());
    db.set_meta("config", cfg.to_json().dump());
    db.set_meta("run_seed", std::to_string(cfg.seed));
    db.set_meta("llm", req.llm);
    db.set_meta("replay_evals", "0");
    db.set_meta("braid_version", BRAID_VERSION);
    db.set_meta("conversion", conversion_record().dump());
    write_out("config.json", cfg.to_json().dump(2));
    say("record", fmt::format("{} (run seed {}, {} generations; conversion summary in the run's metadata)", rel(db_path(results_)),
                              cfg.seed, cfg.num_generations));
    state_.finish("record", {"config.json"});
    return 0;
  }

  int step_evolve() {
    ProgramDatabase db(db_path(results_));
    const auto config = db.meta("config");
    if (!config) throw UserError(db_path(results_).string(), "run metadata missing (config)");
    EvolveRequest req = evolve_request();
    WorkloadSpec spec = load_workload(req.workload);
    register_extra_config_keys(llm_config_keys());
    SearchConfig cfg = search_config_from_json(json::parse(*config), db_path(results_).string());
    if (a_.generations >= 0) cfg.num_generations = a_.generations;
    if (a_.parallel > 0) cfg.max_parallel_jobs = a_.parallel;
    if (auto s = db.meta("run_seed")) cfg.seed = std::stoull(*s);
    RunnerParts parts;
    try {
      parts = prepare_run(req, spec, cfg);
    } catch (const UserError&) {
      say("evolve", "cannot start on this machine; the run is recorded: continue where its evaluator can run with `braid resume " +
                        results_.string() + "`");
      throw;
    }
    attach_llm(parts, req, db, results_);
    db.set_meta("config", cfg.to_json().dump());
    if (int ended = end_orphaned_jobs(db)) log::warn("ended {} process group(s) left running by an interrupted braid", ended);
    say("evolve", fmt::format("{} generations over {} ({} programs stored so far)", cfg.num_generations, rel(results_ / "workload/gen0.cu"),
                              db.count()));
    EvolutionRunner runner(results_, db, std::move(parts));
    const int rc = run_with_status(runner, results_);
    if (rc == 0) state_.finish("evolve", {}, {{"generations", cfg.num_generations}});
    return rc;
  }

  RunArgs a_;
  fs::path results_;
  RunState state_;
  std::string original_, converted_;
  convert::Analysis analysis_;
  convert::Conversion rules_;
  json gate_ = json::object(), annotation_ = json::object();
  convert::BuildFlags flags_;
  std::shared_ptr<LlmRuntime> runtime_;
};

int do_run(const RunArgs& args) {
  const fs::path results = args.results.empty() ? default_results(args.input) : args.results;
  Pipeline p(args, results);
  p.validate();
  return p.run();
}

}  // namespace

bool is_pipeline_run(const fs::path& results) { return fs::is_regular_file(results / kStateFile); }

int continue_pipeline(const fs::path& results, std::int64_t generations, int parallel) {
  RunState state(results);
  const json& r = state.root();
  const json opts = r.value("options", json::object());
  RunArgs a;
  a.input = r.value("input", std::string());
  a.results = results;
  a.ranks = opts.value("ranks", 2);
  a.no_gate = !opts.value("gate", true);
  a.no_build = !opts.value("build", true);
  a.llm = opts.value("llm", std::string());
  a.config = opts.value("config", std::string());
  a.includes = opts.value("includes", std::vector<std::string>());
  a.defines = opts.value("defines", std::vector<std::string>());
  a.lib_dirs = opts.value("lib_dirs", std::vector<std::string>());
  a.lib_names = opts.value("lib_names", std::vector<std::string>());
  a.nvcc_flags = opts.value("nvcc_flags", std::string());
  a.generations = generations;
  a.parallel = parallel;
  return do_run(a);
}

namespace {

Registrar run_reg(12, [](CLI::App& app, Action& action) {
  static RunArgs a;
  auto* cmd = app.add_subcommand("run", "Convert, verify, annotate and evolve a host-driven NCCL program (resumable)");
  cmd->add_option("file", a.input, "Host-driven CUDA/NCCL source (.cu)")->required();
  cmd->add_option("-r,--results,-o", a.results, "Results folder (default results/<name>-<time>); an existing one is continued");
  cmd->add_option("--llm", a.llm, "Model for the rewrite loop, the annotation and the search (none: rules and the knob mutator)")
      ->envname("BRAID_LLM");
  cmd->add_option("--config,-c", a.config, "Search config (YAML; also the LLM keys)");
  cmd->add_option("--generations,-g", a.generations, "Generations of the evolve step");
  cmd->add_option("--parallel,-j", a.parallel, "Evaluations in flight");
  cmd->add_option("--seed,-s", a.seed, "RNG seed of the search (default: random, stored)");
  cmd->add_option("--ranks", a.ranks, "Ranks (GPUs) of the gate and the workload")->default_val(2);
  cmd->add_flag("--no-gate", a.no_gate, "Do not run the gate: the conversion is recorded as unverified");
  cmd->add_flag("--no-build", a.no_build, "Do not compile the conversion before annotating it (the evolve builds gen0)");
  cmd->add_option("--until", a.until, "Stop after this step (convert, gate, annotate, workload, record)");
  cmd->add_option("-I", a.includes, "Include folder for the program's headers (as nvcc -I)");
  cmd->add_option("-D", a.defines, "Macro definition NAME[=VALUE] (as nvcc -D)");
  cmd->add_option("-L", a.lib_dirs, "Library folder (as nvcc -L)");
  cmd->add_option("-l", a.lib_names, "Library to link (as nvcc -l)");
  cmd->add_option("--nvcc-flags", a.nvcc_flags, "Other nvcc flags, one quoted string");
  cmd->callback([&action] { action = [] { return do_run(a); }; });
});

}  // namespace
}  // namespace braid::cli
