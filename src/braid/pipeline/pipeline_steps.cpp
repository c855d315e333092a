// The steps of `braid run` (pipeline.hpp): each writes its outputs under <results> and records
// them in the state file; a failure on a valid input is a StepResult, bad input a UserError.
#include <random>

#include <fmt/format.h>

#include "braid/convert/annotate.hpp"
#include "braid/convert/diff_gate.hpp"
#include "braid/convert/gate.hpp"
#include "braid/convert/rewrite_loop.hpp"
#include "braid/pipeline/pipeline_impl.hpp"
#include "braid/pipeline/seed_workload.hpp"
#include "braid/platform/toolchain.hpp"
#include "braid/search/evaluation_jobs.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/log.hpp"

namespace braid::pipeline_detail {

namespace {

json read_json(const fs::path& p) { return json::parse(read_file(p)); }

}  // namespace

StepResult Pipeline::step_convert() {
  using namespace convert;
  json summary = conversion_to_json(rules_);
  converted_ = rules_.source;
  std::string method = "rules";
  say("convert", fmt::format("{} of {} NCCL calls converted by rules ({} changes); {} left", rules_.converted_calls,
                             rules_.nccl_calls, rules_.changes.size(), rules_.left.size()));
  if (!rules_.left.empty() && wants_llm(o_.llm)) {
    RewriteOptions ro;
    ro.gate.work_dir = results_ / "convert/rewrite";
    ro.gate.source_dir = seed_dir();
    ro.gate.ranks = o_.ranks;
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
    say("convert",
        fmt::format("LLM rewrite of what was left: {} after {} attempt(s){}", rr.accepted ? "accepted" : "not accepted",
                    rr.attempts.size(), rr.accepted ? "" : " (" + rr.failure + "); the rules' conversion stays"));
  } else if (!rules_.left.empty()) {
    say("convert", "what is left stays host NCCL (correct, not device-initiated); --llm MODEL would rewrite it");
  }
  if (converted_ == original_ || converted_.find("braid_converted::") == std::string::npos)
    throw UserError(o_.input.string(), "nothing was converted to device-initiated calls; nothing to evolve");
  std::string compiled;
  if (StepResult r = compile_conversion(compiled); r.exit_code != 0) return r;
  say("convert", compiled);
  summary["method"] = method;
  summary["compiled"] = compiled;
  write_out("convert/converted.cu", converted_);
  write_out("convert/summary.json", summary.dump(2) + "\n");
  write_out("convert/summary.txt", conversion_to_text(rules_));
  state_.finish("convert", {"convert/converted.cu", "convert/summary.json"}, {{"method", method}});
  return {};
}

// nvcc -c of the conversion where a toolkit exists (and --no-build is not given).
StepResult Pipeline::compile_conversion(std::string& compiled) {
  compiled = o_.no_build ? "not checked (--no-build)" : "not checked (no CUDA toolkit here)";
  if (o_.no_build || !find_cuda_toolchain()) return {};
  std::string note;
  const BuildResult br =
      convert::compile_user_program(converted_, results_ / "convert/compile", "converted", seed_dir(), flags_, &note);
  if (!br.ok) return {1, o_.input.string() + ": the converted program does not compile:\n" + br.error};
  compiled = note.empty() ? "compiles (nvcc -c)" : "compiles (nvcc -c), " + note;
  return {};
}

std::string Pipeline::gate_possible() const {
  if (o_.no_gate) return "--no-gate";
  const auto gpus = detect_gpus();
  if ((int)gpus.size() < o_.ranks) return fmt::format("{} GPU(s) here, the gate needs {}", gpus.size(), o_.ranks);
  if (!find_cuda_toolchain()) return "no CUDA toolkit here";
  return "";
}

StepResult Pipeline::step_gate() {
  using namespace convert;
  const std::string why_not = gate_possible();
  if (!why_not.empty()) {
    gate_ = {{"status", "unverified"}, {"reason", why_not}};
    say("gate", "UNVERIFIED (" + why_not +
                    "): the converted program was not run against the original; the evolve's own "
                    "verification still checks every candidate");
  } else {
    GateOptions g;
    g.work_dir = results_ / "convert/gate";
    g.source_dir = seed_dir();
    g.ranks = o_.ranks;
    g.run_timeout_s = o_.gate_timeout_s;
    g.flags = flags_.compile_flags();
    g.libs = flags_.libs;
    // The rules' conversion is gated as `braid convert --verify` does; a rewrite by the LLM is
    // a whole program of its own (analysed as converted code, instrumented like the original).
    const GateResult r = converted_ == rules_.source
                             ? run_gate(analysis_, original_, rules_, g)
                             : run_gate_on_candidate(analysis_, original_,
                                                     analyze_converted(o_.input.string(), converted_), converted_, g);
    gate_ = gate_to_json(r);
    gate_["status"] = r.passed ? "verified" : "failed";
    if (!r.passed) {
      write_out("convert/gate.json", gate_.dump(2) + "\n");
      say("gate", "FAILED: " + r.failure);
      return {1, o_.input.string() +
                     ": the converted program failed the gate; fix it or rerun with --no-gate to evolve it unverified"};
    }
    if (r.details.value("mode", std::string()) == "differential")  // a program without markers or harness
      say("gate", fmt::format("verified (differential, {}): {}", r.details.value("launcher", std::string()),
                              diff_gate_summary(r)));
    else
      say("gate", fmt::format("verified: outputs match on {} ranks; original {:.3f} ms, converted {:.3f} ms", o_.ranks,
                              r.original_ms, r.converted_ms));
  }
  write_out("convert/gate.json", gate_.dump(2) + "\n");
  state_.finish("gate", {"convert/gate.json"}, {{"status", gate_.value("status", "")}});
  return {};
}

StepResult Pipeline::step_annotate() {
  convert::AnnotateOptions o;
  o.llm = llm_client();
  o.work_dir = results_ / "annotate";
  o.source_dir = seed_dir();
  o.record_dir = wants_llm(o_.llm) ? results_ / "annotate" : fs::path();
  const convert::AnnotatedProgram an = convert::annotate(o_.input.filename().string(), converted_, o);
  annotation_ = an.to_json();
  write_out("workload/gen0.cu", an.source);
  write_out("annotate/annotation.json", annotation_.dump(2) + "\n");
  std::string how = an.method == "llm" ? "by the LLM (checked: parses, frozen parts kept, compiles)" : "by rules";
  if (!an.llm_outcome.empty() && an.method != "llm") how += " (LLM answer not taken: " + an.llm_outcome + ")";
  say("annotate", fmt::format("{} blocks, {} knobs {}", an.blocks.size(), an.knob_count, how));
  state_.finish("annotate", {"workload/gen0.cu", "annotate/annotation.json"}, {{"method", an.method}});
  return {};
}

StepResult Pipeline::step_workload() {
  SeedWorkloadInput in;
  in.input = o_.input;
  in.source = original_;
  in.ranks = o_.ranks;
  in.uses_harness = analysis_.uses_harness;
  in.flags = flags_;
  in.gate_status = gate_.value("status", std::string("?"));
  const SeedWorkloadFiles files = seed_workload_files(in);
  write_out("workload/workload.yaml", files.workload_yaml);
  write_out("workload/config.yaml", files.config_yaml);
  write_out("workload/seed.cu", original_);
  write_out("workload/README.md", files.readme);
  say("workload", rel(results_ / "workload") + "/ (workload.yaml, config.yaml, gen0.cu, seed.cu)");
  state_.finish("workload", {"workload/workload.yaml", "workload/config.yaml", "workload/gen0.cu"});
  return {};
}

EvolveRequest Pipeline::evolve_request() const {
  EvolveRequest req;
  req.workload = fs::absolute(results_ / "workload");
  req.config = o_.config.empty() ? fs::path() : fs::absolute(o_.config);
  if (o_.generations >= 0) req.generations = o_.generations;
  if (o_.parallel > 0) req.parallel = o_.parallel;
  if (o_.seed >= 0) req.seed = (std::uint64_t)o_.seed;
  req.results = results_;
  req.llm = wants_llm(o_.llm) ? o_.llm : "none";
  return req;
}

// The database's "conversion" meta: the conversion summary, the gate and the annotation.
json Pipeline::conversion_record() const {
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

StepResult Pipeline::step_record() {
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
  say("record", fmt::format("{} (run seed {}, {} generations; conversion summary in the run's metadata)",
                            rel(db_path(results_)), cfg.seed, cfg.num_generations));
  state_.finish("record", {"config.json"});
  return {};
}

StepResult Pipeline::step_evolve() {
  ProgramDatabase db(db_path(results_));
  const auto config = db.meta("config");
  if (!config) throw UserError(db_path(results_).string(), "run metadata missing (config)");
  EvolveRequest req = evolve_request();
  WorkloadSpec spec = load_workload(req.workload);
  SearchConfig cfg = continued_config(db, *config, db_path(results_).string(), req.generations, req.parallel);
  RunnerParts parts;
  try {
    parts = prepare_run(req, spec, cfg);
  } catch (const UserError&) {
    say("evolve",
        "cannot start on this machine; the run is recorded: continue where its evaluator can run with `braid resume " +
            results_.string() + "`");
    throw;
  }
  attach_llm(parts, req, db, results_);
  db.set_meta("config", cfg.to_json().dump());
  if (int ended = end_orphaned_jobs(db))
    log::warn("ended {} process group(s) left running by an interrupted braid", ended);
  say("evolve", fmt::format("{} generations over {} ({} programs stored so far)", cfg.num_generations,
                            rel(results_ / "workload/gen0.cu"), db.count()));
  EvolutionRunner runner(results_, db, std::move(parts));
  const int rc = hooks_.search(runner, results_);
  if (rc == 0) state_.finish("evolve", {}, {{"generations", cfg.num_generations}});
  return {rc, ""};
}

}  // namespace braid::pipeline_detail
