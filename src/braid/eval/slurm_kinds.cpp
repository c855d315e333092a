#include "braid/eval/slurm_kinds.hpp"

#include <fmt/format.h>

#include <sstream>

#include "braid/eval/diagnostics.hpp"
#include "braid/eval/launcher.hpp"
#include "braid/platform/machine.hpp"
#include "braid/platform/toolchain.hpp"
#include "braid/util/command_line.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"

namespace braid {
namespace fs = std::filesystem;

std::optional<StepEnd> read_step_end(const fs::path& file) {
  auto text = try_read_file(file);
  if (!text) return std::nullopt;
  std::istringstream in(*text);
  StepEnd s;
  if (!(in >> s.exit_code >> s.start >> s.end)) return std::nullopt;
  return s;
}

bool step_timed_out(const StepEnd& s, double limit_s) {
  return s.exit_code == 124 || (s.exit_code == 137 && s.end - s.start >= limit_s);
}

std::string log_tail(const fs::path& file, std::size_t bytes) {
  auto text = try_read_file(file);
  if (!text) return {};
  std::string tail = tail_text(*text, bytes);
  return tail.find_first_not_of(" \n\t") == std::string::npos ? std::string() : tail;
}

namespace {

// "<step>: exit code N (<where>)" and the tail of what the step said.
std::string step_crash(const fs::path& dir, const std::string& step, const StepEnd& s, const std::string& where) {
  std::string text = fmt::format("{}: exit code {} ({})", step, s.exit_code, where);
  std::string tail = log_tail(dir / "logs" / (step + ".stderr"), 1536);
  if (tail.empty()) tail = log_tail(dir / "logs" / (step + ".stdout"), 1024);
  if (tail.empty()) tail = log_tail(dir / "slurm.out", 1024);
  return tail.empty() ? text : text + "\n" + tail;
}

std::string unreported(const fs::path& dir, const std::string& where, const std::string& step) {
  return fmt::format("{}: the {} step did not report its end\n{}", where, step, log_tail(dir / "slurm.out", 1024));
}

class CascadeKind : public SlurmJobKind {
 public:
  explicit CascadeKind(CascadeConfig c) : c_(std::move(c)) {}

  std::string describe() const override {
    return fmt::format("build `{}` here, run `{}`{} as jobs", c_.build, c_.run,
                       c_.bench.empty() ? "" : ", bench `" + c_.bench + "`");
  }
  const fs::path& workload_dir() const override { return c_.workload_dir; }
  const std::string& program_filename() const override { return c_.program_filename; }
  const std::map<std::string, std::string>& env() const override { return c_.env; }

  bool build(const WorkFolder& folder, const EvalRequest& request, const JobObserver& jobs,
             EvalResult& result) override {
    result.level_reached = 1;
    StepSpec spec{"build", command_argv(c_.build, folder.placeholders), folder.dir, c_.build_timeout_s, c_.env};
    SubprocessResult build = run_step(spec, folder, request, jobs);
    result.timings["build"] = build.wall_s;
    auto fail = [&](FailureKind kind, const std::string& error) {
      record_failure(result, kind, error);
      return false;
    };
    if (!build.started) return fail(FailureKind::BuildFailed, "build command " + build.describe_end());
    if (build.timed_out)
      return fail(FailureKind::Timeout,
                  fmt::format("build timed out (limit {:g} s); the process group was killed", c_.build_timeout_s));
    if (build.succeeded()) return true;
    std::string error =
        trim_compiler_errors(build.stderr_text + build.stdout_text, folder.program.string(), c_.program_filename);
    if (error.find_first_not_of(" \n\t") == std::string::npos) error = "build " + build.describe_end();
    return fail(FailureKind::BuildFailed, error);
  }

  std::vector<SlurmStep> steps(const WorkFolder& folder, std::uint64_t) const override {
    std::vector<SlurmStep> s;
    s.push_back({.name = "run",
                 .timing = "run",
                 .launch = SlurmStep::Launch::Ranks,
                 .timeout_s = c_.run_timeout_s,
                 .argv = command_argv(c_.run, folder.placeholders),
                 .set_aside = true});
    // A run that failed or reported a wrong result is not benchmarked (braid reads verify/).
    if (!c_.bench.empty())
      s.push_back({.name = "bench",
                   .timing = "bench",
                   .launch = SlurmStep::Launch::Ranks,
                   .timeout_s = c_.bench_timeout_s,
                   .argv = command_argv(c_.bench, folder.placeholders),
                   .gated = true});
    return s;
  }

  void read_steps(const fs::path& dir, const std::string& where, EvalResult& result) const override {
    const auto run = read_step_end(dir / "run.exit");
    const auto bench = read_step_end(dir / "bench.exit");
    if (!run) return record_failure(result, FailureKind::RunFailed, unreported(dir, where, "run"));
    if (step_timed_out(*run, c_.run_timeout_s))
      return record_failure(result, FailureKind::Timeout,
                            fmt::format("run+verify timed out (limit {:g} s, {})", c_.run_timeout_s, where));
    auto verdict = read_verdict(dir / "verify");
    if (verdict && !verdict->correct) return record_failure(result, FailureKind::VerifyFailed, verdict->error);
    if (run->exit_code != 0) return record_failure(result, FailureKind::RunFailed, step_crash(dir, "run", *run, where));
    if (!verdict)
      return record_failure(result, FailureKind::RunFailed, "run exited 0 but wrote no valid results/correct.json");
    if (c_.bench.empty()) {
      std::error_code ec;
      fs::create_directories(dir / "results", ec);
      for (const char* f : {"correct.json", "metrics.json"})
        fs::copy_file(dir / "verify" / f, dir / "results" / f, fs::copy_options::overwrite_existing, ec);
      return read_metrics_contract(dir / "results", FailureKind::RunFailed, result);
    }
    result.level_reached = 3;
    if (!bench)
      return record_failure(result, FailureKind::BenchFailed, where + ": the bench step did not report its end");
    if (step_timed_out(*bench, c_.bench_timeout_s))
      return record_failure(result, FailureKind::Timeout,
                            fmt::format("bench timed out (limit {:g} s, {})", c_.bench_timeout_s, where));
    auto bench_verdict = read_verdict(dir / "results");
    if (bench_verdict && !bench_verdict->correct)
      return record_failure(result, FailureKind::VerifyFailed, bench_verdict->error);
    if (bench->exit_code != 0)
      return record_failure(result, FailureKind::BenchFailed, step_crash(dir, "bench", *bench, where));
    if (!bench_verdict) {
      std::error_code ec;
      fs::copy_file(dir / "verify/correct.json", dir / "results/correct.json", fs::copy_options::overwrite_existing,
                    ec);
    }
    read_metrics_contract(dir / "results", FailureKind::BenchFailed, result);
  }

 private:
  CascadeConfig c_;
};

class ExternalKind : public SlurmJobKind {
 public:
  explicit ExternalKind(ExternalConfig c) : c_(std::move(c)), workload_(fs::absolute(c_.workload_dir)) {}

  std::string describe() const override { return fmt::format("run the external evaluator `{}` as jobs", c_.command); }
  const fs::path& workload_dir() const override { return c_.workload_dir; }
  const std::string& program_filename() const override { return c_.program_filename; }
  const std::map<std::string, std::string>& env() const override { return c_.env; }
  int job_level() const override { return 1; }  // the evaluator builds, runs and benches in one step

  bool build(const WorkFolder&, const EvalRequest&, const JobObserver&, EvalResult&) override { return true; }

  std::vector<SlurmStep> steps(const WorkFolder& folder, std::uint64_t) const override {
    std::vector<std::string> argv = command_argv(c_.command, folder.placeholders);
    argv.insert(argv.end(), {"--program_path", folder.program.string(), "--results_dir", folder.results.string()});
    return {{.name = "external",
             .timing = "external",
             .launch = SlurmStep::Launch::Once,
             .timeout_s = c_.timeout_s,
             .argv = std::move(argv),
             .cwd = workload_}};
  }

  void read_steps(const fs::path& dir, const std::string& where, EvalResult& result) const override {
    result.level_reached = 1;
    const auto run = read_step_end(dir / "external.exit");
    if (!run) return record_failure(result, FailureKind::RunFailed, unreported(dir, where, "external"));
    if (step_timed_out(*run, c_.timeout_s))
      return record_failure(
          result, FailureKind::Timeout,
          fmt::format("evaluator timed out (limit {:g} s, {}); its process group was killed", c_.timeout_s, where));
    if (read_external_verdict(dir / "results", result)) return;
    // No usable verdict: say how the evaluator ended.
    if (run->exit_code != 0) result.error_text += "\n" + step_crash(dir, "external", *run, where);
  }

 private:
  ExternalConfig c_;
  fs::path workload_;
};

class GpuKind : public SlurmJobKind {
 public:
  explicit GpuKind(GpuCascadeConfig c) : c_(std::move(c)) {
    const std::string yaml = (c_.workload_dir / "workload.yaml").string();
    std::string why;
    auto toolchain = find_cuda_toolchain(&why);
    if (!toolchain)
      throw UserError(
          yaml,
          "evaluator kind gpu needs the CUDA toolkit here (candidates are built before they are submitted): " + why);
    auto arch = resolve_arch(c_.arch, detect_gpus());
    if (!arch) throw UserError(yaml, "evaluator arch '" + c_.arch + "' is not auto, sm_90, sm_90a, ...");
    arch_ = *arch;
    builder_ =
        std::make_unique<NvccBuilder>(*toolchain, c_.cache_dir.empty() ? default_compile_cache_dir() : c_.cache_dir);
  }

  std::string describe() const override {
    return fmt::format("build for {} here ({}), run the harness's {} rank(s) as jobs{}", arch_,
                       builder_->toolchain().describe(), c_.ranks,
                       c_.verify_in_bench ? " (verified in the bench run)" : "");
  }
  const fs::path& workload_dir() const override { return c_.workload_dir; }
  const std::string& program_filename() const override { return c_.program_filename; }
  const std::map<std::string, std::string>& env() const override { return c_.env; }
  std::vector<std::string> srun_args() const override { return c_.launcher_args; }

  bool build(const WorkFolder& folder, const EvalRequest& request, const JobObserver& jobs,
             EvalResult& result) override {
    result.level_reached = 1;
    const std::string who = request.candidate_id.empty() ? std::string() : request.candidate_id + " ";
    BuildResult build = builder_->build(harness_build_input(c_, arch_, folder), jobs, who + "build");
    result.timings["build"] = build.wall_s;
    result.private_metrics["build_cached"] = build.cached;
    if (!build.ok)
      record_failure(result, build.timed_out ? FailureKind::Timeout : FailureKind::BuildFailed, build.error);
    return build.ok;
  }

  std::vector<SlurmStep> steps(const WorkFolder& folder, std::uint64_t seed) const override {
    std::vector<SlurmStep> s;
    if (!c_.verify_in_bench)
      s.push_back({.name = "verify",
                   .timing = "run",
                   .launch = SlurmStep::Launch::RankLogs,
                   .timeout_s = c_.run_timeout_s,
                   .argv = harness_argv(c_, folder, seed, "verify", ""),
                   .set_aside = true});
    s.push_back({.name = "bench",
                 .timing = "bench",
                 .launch = SlurmStep::Launch::RankLogs,
                 .timeout_s = c_.bench_timeout_s,
                 .argv = harness_argv(c_, folder, seed, "bench", c_.bench_args),
                 .gated = !c_.verify_in_bench});
    return s;
  }

  void read_steps(const fs::path& dir, const std::string& where, EvalResult& result) const override {
    result.level_reached = 2;
    if (!c_.verify_in_bench) {
      LevelJudgement verify =
          judge(dir, "verify", "run+verify", c_.run_timeout_s, dir / "verify", FailureKind::RunFailed, where);
      if (verify.failure != FailureKind::Ok) return record_failure(result, verify.failure, verify.error);
      result.level_reached = 3;
    }
    // Without an earlier verify run, a crash of the bench run is the candidate's run failure.
    const FailureKind crash = c_.verify_in_bench ? FailureKind::RunFailed : FailureKind::BenchFailed;
    LevelJudgement bench = judge(dir, "bench", c_.verify_in_bench ? "run+verify+bench" : "bench", c_.bench_timeout_s,
                                 dir / "results", crash, where);
    if (bench.failure != FailureKind::Ok) return record_failure(result, bench.failure, bench.error);
    result.level_reached = 3;
    read_metrics_contract(dir / "results", FailureKind::BenchFailed, result);
  }

 private:
  // One step's ranks as the local launch would have reported them, judged as locally.
  LevelJudgement judge(const fs::path& dir, const std::string& name, const std::string& step, double limit_s,
                       const fs::path& results, FailureKind crash_kind, const std::string& where) const {
    const auto end = read_step_end(dir / (name + ".exit"));
    if (!end) return {crash_kind, unreported(dir, where, name), false};
    LaunchSpec spec;
    spec.kind = LauncherKind::Srun;
    spec.ranks = c_.ranks;
    spec.log_dir = dir / "logs" / name;
    SrunStepEnd srun{true, end->exit_code, step_timed_out(*end, limit_s), end->wall_s(),
                     try_read_file(spec.log_dir / "srun.stderr").value_or("")};
    LevelJudgement judged = judge_level(srun_step_result(spec, srun), read_verdict(results), step, crash_kind);
    if (judged.failure != FailureKind::Ok) judged.error += fmt::format("\n({})", where);
    return judged;
  }

  GpuCascadeConfig c_;
  std::string arch_;
  std::unique_ptr<NvccBuilder> builder_;
};

}  // namespace

std::unique_ptr<SlurmJobKind> cascade_job_kind(CascadeConfig config) {
  return std::make_unique<CascadeKind>(std::move(config));
}
std::unique_ptr<SlurmJobKind> external_job_kind(ExternalConfig config) {
  return std::make_unique<ExternalKind>(std::move(config));
}
std::unique_ptr<SlurmJobKind> gpu_job_kind(GpuCascadeConfig config) {
  return std::make_unique<GpuKind>(std::move(config));
}

}  // namespace braid
