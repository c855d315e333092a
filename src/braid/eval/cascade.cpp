#include "braid/eval/cascade.hpp"

#include <fmt/format.h>

#include "braid/util/command_line.hpp"
#include "braid/eval/diagnostics.hpp"
#include "braid/eval/driver_build.hpp"
#include "braid/eval/work_folder.hpp"
#include "braid/util/fs.hpp"

namespace braid {
namespace {

std::map<std::string, std::string> env_from_json(const json& section) {
  std::map<std::string, std::string> env;
  if (auto e = section.find("env"); e != section.end())
    for (auto& [name, value] : e->items()) env[name] = value.get<std::string>();
  return env;
}


std::string timeout_text(const std::string& step, double limit_s) {
  return fmt::format("{} timed out (limit {:g} s); the process group was killed", step, limit_s);
}

// A run or bench step's end: the command's, and beside a driver the worker's.
struct StepRun {
  SubprocessResult run;
  std::optional<SubprocessResult> worker;
  bool timed_out() const { return run.timed_out || (worker && worker->timed_out); }
};

// Why the worker beside a driver failed its step, "" when it did its part or the driver's
// verdict is the diagnosis: it could not start, ended before answering (`driver_failure`: the
// driver's record says run_failed or bench_failed), or crashed though its answers were right.
// Stopped by braid after the driver: done.
std::string worker_failure(const StepRun& step, const std::string& name, const std::string& driver_failure,
                           const std::optional<Verdict>& verdict) {
  if (!step.worker) return {};
  const SubprocessResult& w = *step.worker;
  if (!w.started) return name + ": the worker could not start: " + w.start_error;
  if ((driver_failure == "run_failed" || driver_failure == "bench_failed") && verdict)
    return name + ": " + verdict->error + "\n" + describe_crash(name + " (worker)", w);
  if ((verdict && !verdict->correct) || w.stopped || w.succeeded()) return {};
  return describe_crash(name + " (worker)", w);
}

}  // namespace

CascadeConfig CascadeConfig::from_json(const json& section, const std::filesystem::path& workload_dir,
                                       const std::string& program_filename) {
  CascadeConfig c;
  c.workload_dir = workload_dir;
  c.program_filename = program_filename;
  c.build = section.value("build", std::string());
  c.run = section.value("run", std::string());
  c.bench = section.value("bench", std::string());
  c.driver_build = section.value("driver_build", std::string());
  c.worker = section.value("worker", std::string());
  c.build_timeout_s = section.value("build_timeout_s", c.build_timeout_s);
  c.run_timeout_s = section.value("run_timeout_s", c.run_timeout_s);
  c.bench_timeout_s = section.value("bench_timeout_s", c.bench_timeout_s);
  c.env = env_from_json(section);
  c.memory_limit_mb = section.value("memory_limit_mb", c.memory_limit_mb);
  c.sandbox = SandboxSettings::from_json(section);
  c.harness_text = try_read_file(workload_dir / program_filename).value_or("");
  c.verdict = resolve_verdict_source(section.value("verdict", std::string("auto")), c.harness_text);
  if (!c.driver_build.empty()) c.verdict = VerdictSource::Channel;  // only the driver can report
  return c;
}

CascadeEvaluator::CascadeEvaluator(CascadeConfig config) : config_(std::move(config)) {}

std::string CascadeEvaluator::describe() const {
  return fmt::format("cascade: build `{}`, run `{}`{}{}", config_.build, config_.run,
                     config_.bench.empty() ? "" : ", bench `" + config_.bench + "`",
                     config_.driver_build.empty() ? "" : ", worker `" + config_.worker + "` beside the driver");
}

std::pair<std::filesystem::path, std::string> CascadeEvaluator::driver() {
  std::lock_guard lock(driver_mutex_);
  if (!driver_.empty()) return {driver_, ""};
  DriverBuild built = build_driver(config_.driver_build, config_.workload_dir, config_.env, config_.build_timeout_s,
                                   default_driver_cache_dir());
  if (built.error.empty()) driver_ = built.binary;
  return {built.binary, built.error};
}

EvalResult CascadeEvaluator::evaluate(const EvalRequest& request, const JobObserver& jobs) {
  EvalResult result;
  WorkFolder folder = prepare_work_folder(request, config_.workload_dir, config_.program_filename);
  const SandboxPolicy sandbox = candidate_sandbox(config_.sandbox, folder, config_.memory_limit_mb << 20);
  const bool channel = config_.verdict == VerdictSource::Channel;
  const bool driven = !config_.driver_build.empty();
  SandboxPolicy driver_sandbox = sandbox;
  std::string sandbox_level = sandbox.enabled ? "" : "off";
  auto step = [&](const std::string& name, const std::string& command, double timeout_s, const std::string& token) {
    StepSpec spec{name,   command_argv(command, folder.placeholders), folder.dir, timeout_s, config_.env,
                  config_.memory_limit_mb << 20, sandbox, token};
    SubprocessResult run = run_step(spec, folder, request, jobs);
    result.timings[name] = run.wall_s;
    if (!run.sandbox_level.empty()) sandbox_level = run.sandbox_level;
    return run;
  };
  auto verdict_step = [&](const std::string& name, const std::string& command, double timeout_s,
                          const std::string& token) -> StepRun {
    if (!driven) return {step(name, command, timeout_s, token), std::nullopt};
    StepSpec driver{name,   command_argv(command, folder.placeholders), folder.dir, timeout_s, config_.env,
                    config_.memory_limit_mb << 20, driver_sandbox, token};
    StepSpec worker{name + ".worker", command_argv(config_.worker, folder.placeholders), folder.dir, timeout_s,
                    config_.env,      config_.memory_limit_mb << 20, sandbox, ""};
    DrivenRun both = run_driven_step(std::move(driver), std::move(worker), folder, request, jobs);
    result.timings[name] = both.driver.wall_s;
    if (!both.driver.sandbox_level.empty()) sandbox_level = both.driver.sandbox_level;
    return {std::move(both.driver), std::move(both.worker)};
  };
  auto finish = [&]() -> EvalResult {
    record_isolation(result, sandbox_level, channel ? "verified" : "unverified-channel");
    return result;
  };
  auto fail = [&](FailureKind kind, const std::string& error) {
    record_failure(result, kind, error);
    write_failure_contract(folder, result);
    return finish();
  };
  // The verdict of a run or bench step: from the channel (checked) or, for an old harness,
  // from the files. nullopt: none came. `failure`: the record's failure kind, if any.
  std::string failure;
  auto verdict_of = [&](const SubprocessResult& run, const std::string& mode, const std::string& token,
                        bool needs_score) -> std::pair<std::optional<Verdict>, std::string> {
    if (!channel) return {read_verdict(folder.results), ""};
    ChannelVerdict cv = read_channel(run.channel_text, {token, mode, request.seed, run.wall_s, needs_score});
    if (!cv.problem.empty()) return {std::nullopt, cv.problem};
    if (!cv.received) return {std::nullopt, ""};
    failure = cv.failure;
    write_contract_files(folder.results, cv);
    return {Verdict{cv.correct, cv.error}, ""};
  };
  const std::string no_record =
      " but no verdict came through the verdict channel (BRAID_RESULT_FD); files in results/ are not read";

  // L1: build.
  result.level_reached = 1;
  if (channel)
    if (std::string problem = channel_tampering(request.code, config_.harness_text); !problem.empty())
      return fail(FailureKind::VerifyFailed, problem);
  if (driven) {
    auto [binary, error] = driver();
    if (!error.empty()) return fail(FailureKind::BuildFailed, error);
    folder.placeholders["driver"] = binary.string();
    driver_sandbox.read_only.push_back(binary.parent_path());  // the cache is outside the work folder
  }
  SubprocessResult build = step("build", config_.build, config_.build_timeout_s, "");
  if (!build.started) return fail(FailureKind::BuildFailed, "build command " + build.describe_end());
  if (build.timed_out) return fail(FailureKind::Timeout, timeout_text("build", config_.build_timeout_s));
  if (!build.succeeded()) {
    std::string errors = trim_compiler_errors(build.stderr_text + build.stdout_text, folder.program.string(),
                                              config_.program_filename);
    if (errors.find_first_not_of(" \n\t") == std::string::npos) errors = "build " + build.describe_end();
    return fail(FailureKind::BuildFailed, errors);
  }

  // L2: run and verify.
  result.level_reached = 2;
  const std::string run_token = new_eval_token();
  std::filesystem::remove(folder.results / "correct.json");
  std::filesystem::remove(folder.results / "metrics.json");
  const StepRun driven_run = verdict_step("run", config_.run, config_.run_timeout_s, run_token);
  const SubprocessResult& run = driven_run.run;
  if (driven_run.timed_out()) return fail(FailureKind::Timeout, timeout_text("run+verify", config_.run_timeout_s));
  auto [verdict, run_problem] = verdict_of(run, "verify", run_token, config_.bench.empty());
  if (!run_problem.empty()) return fail(FailureKind::VerifyFailed, run_problem);
  if (auto w = worker_failure(driven_run, "run", failure, verdict); !w.empty())
    return fail(FailureKind::RunFailed, w);
  // A harness may exit non-zero after reporting a wrong result: the report is the diagnosis.
  if (verdict && !verdict->correct) return fail(FailureKind::VerifyFailed, verdict->error);
  if (!run.succeeded()) return fail(FailureKind::RunFailed, describe_crash("run", run));
  if (!verdict)
    return fail(FailureKind::RunFailed, channel ? "run exited 0" + no_record : "run exited 0 but wrote no valid results/correct.json");

  if (config_.bench.empty()) {
    read_metrics_contract(folder.results, FailureKind::RunFailed, result);
    if (result.failure != FailureKind::Ok) write_failure_contract(folder, result);
    return finish();
  }

  // L3: benchmark. The verify run's files are set aside so that only the bench's count.
  result.level_reached = 3;
  const std::string verify_verdict = read_file(folder.results / "correct.json");
  std::filesystem::remove(folder.results / "correct.json");
  std::filesystem::remove(folder.results / "metrics.json");
  const std::string bench_token = new_eval_token();
  failure.clear();
  const StepRun driven_bench = verdict_step("bench", config_.bench, config_.bench_timeout_s, bench_token);
  const SubprocessResult& bench = driven_bench.run;
  if (driven_bench.timed_out()) return fail(FailureKind::Timeout, timeout_text("bench", config_.bench_timeout_s));
  auto [bench_verdict, bench_problem] = verdict_of(bench, "bench", bench_token, true);
  if (!bench_problem.empty()) return fail(FailureKind::VerifyFailed, bench_problem);
  if (auto w = worker_failure(driven_bench, "bench", failure, bench_verdict); !w.empty())
    return fail(FailureKind::BenchFailed, w);
  if (bench_verdict && !bench_verdict->correct) return fail(FailureKind::VerifyFailed, bench_verdict->error);
  if (!bench.succeeded()) return fail(FailureKind::BenchFailed, describe_crash("bench", bench));
  if (channel && !bench_verdict) return fail(FailureKind::BenchFailed, "bench exited 0" + no_record);
  if (!bench_verdict) write_file_atomic(folder.results / "correct.json", verify_verdict);
  read_metrics_contract(folder.results, FailureKind::BenchFailed, result);
  if (result.failure != FailureKind::Ok) write_failure_contract(folder, result);
  return finish();
}

}  // namespace braid
