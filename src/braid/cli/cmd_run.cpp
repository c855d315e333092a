// `braid run seed.cu`: convert, gate, annotate, workload, record, evolve (pipeline/pipeline.hpp),
// resumable step by step. This file parses the options, calls the pipeline and prints.
#include <cstdio>

#include "braid/cli/command.hpp"
#include "braid/cli/run_setup.hpp"
#include "braid/pipeline/pipeline.hpp"

namespace braid::cli {

namespace {

void say(const std::string& step, const std::string& text) {
  std::printf("%-9s %s\n", (step + ":").c_str(), text.c_str());
  std::fflush(stdout);
}

int do_run(const PipelineOptions& options) {
  const PipelineReport report = run_pipeline(options, PipelineHooks{say, run_with_status});
  if (!report.failure.empty()) std::fprintf(stderr, "braid: %s\n", report.failure.c_str());
  if (!report.stopped_after.empty())
    std::printf("stopped after %s (--until): continue with `braid run %s -o %s`\n", report.stopped_after.c_str(),
                options.input.string().c_str(), report.results.string().c_str());
  return report.exit_code;
}

}  // namespace

int continue_pipeline(const std::filesystem::path& results, std::int64_t generations, int parallel) {
  PipelineOptions o = stored_pipeline_options(results);
  o.generations = generations;
  o.parallel = parallel;
  return do_run(o);
}

namespace {

Registrar run_reg(12, [](CLI::App& app, Action& action) {
  static PipelineOptions a;
  auto* cmd = app.add_subcommand("run", "Convert, verify, annotate and evolve a host-driven NCCL program (resumable)");
  cmd->add_option("file", a.input, "Host-driven CUDA/NCCL source (.cu)")->required();
  cmd->add_option("-r,--results,-o", a.results,
                  "Results folder (default results/<name>-<time>); an existing one is continued");
  cmd->add_option("--llm", a.llm,
                  "Model for the rewrite loop, the annotation and the search (none: rules and the knob mutator)")
      ->envname("BRAID_LLM");
  cmd->add_option("--config,-c", a.config, "Search config (YAML; also the LLM keys)");
  cmd->add_option("--generations,-g", a.generations, "Generations of the evolve step");
  cmd->add_option("--parallel,-j", a.parallel, "Evaluations in flight");
  cmd->add_option("--seed,-s", a.seed, "RNG seed of the search (default: random, stored)");
  cmd->add_option("--ranks", a.ranks, "Ranks (GPUs) of the gate and the workload")->default_val(2);
  cmd->add_option("--gate-timeout", a.gate_timeout_s,
                  "Seconds each side (original, converted) may run in the gate before it counts as a hang")
      ->default_val(120);
  cmd->add_flag("--no-gate", a.no_gate, "Do not run the gate: the conversion is recorded as unverified");
  cmd->add_flag("--no-build", a.no_build,
                "Do not compile the conversion before annotating it (the evolve builds gen0)");
  cmd->add_option("--until", a.until, "Stop after this step (convert, gate, annotate, workload, record)");
  add_user_flag_options(*cmd, a.flags);
  cmd->callback([&action] { action = [] { return do_run(a); }; });
});

}  // namespace
}  // namespace braid::cli
