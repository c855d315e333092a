#include "braid/eval/cascade.hpp"

#include <fmt/format.h>

#include "braid/util/command_line.hpp"
#include "braid/eval/diagnostics.hpp"
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

}  // namespace

CascadeConfig CascadeConfig::from_json(const json& section, const std::filesystem::path& workload_dir,
                                       const std::string& program_filename) {
  CascadeConfig c;
  c.workload_dir = workload_dir;
  c.program_filename = program_filename;
  c.build = section.value("build", std::string());
  c.run = section.value("run", std::string());
  c.bench = section.value("bench", std::string());
  c.build_timeout_s = section.value("build_timeout_s", c.build_timeout_s);
  c.run_timeout_s = section.value("run_timeout_s", c.run_timeout_s);
  c.bench_timeout_s = section.value("bench_timeout_s", c.bench_timeout_s);
  c.env = env_from_json(section);
  c.memory_limit_mb = section.value("memory_limit_mb", c.memory_limit_mb);
  c.sandbox = SandboxSettings::from_json(section);
  c.harness_text = try_read_file(workload_dir / program_filename).value_or("");
  c.verdict = resolve_verdict_source(section.value("verdict", std::string("auto")), c.harness_text);
  return c;
}

CascadeEvaluator::CascadeEvaluator(CascadeConfig config) : config_(std::move(config)) {}

std::string CascadeEvaluator::describe() const {
  return fmt::format("cascade: build `{}`, run `{}`{}", config_.build, config_.run,
                     config_.bench.empty() ? "" : ", bench `" + config_.bench + "`");
}

EvalResult CascadeEvaluator::evaluate(const EvalRequest& request, const JobObserver& jobs) {
  EvalResult result;
  WorkFolder folder = prepare_work_folder(request, config_.workload_dir, config_.program_filename);
  const SandboxPolicy sandbox = candidate_sandbox(config_.sandbox, folder, config_.memory_limit_mb << 20);
  const bool channel = config_.verdict == VerdictSource::Channel;
  std::string sandbox_level = sandbox.enabled ? "" : "off";
  auto step = [&](const std::string& name, const std::string& command, double timeout_s, const std::string& token) {
    StepSpec spec{name,   command_argv(command, folder.placeholders), folder.dir, timeout_s, config_.env,
                  config_.memory_limit_mb << 20, sandbox, token};
    SubprocessResult run = run_step(spec, folder, request, jobs);
    result.timings[name] = run.wall_s;
    if (!run.sandbox_level.empty()) sandbox_level = run.sandbox_level;
    return run;
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
  // from the files. nullopt: none came.
  auto verdict_of = [&](const SubprocessResult& run, const std::string& mode, const std::string& token,
                        bool needs_score) -> std::pair<std::optional<Verdict>, std::string> {
    if (!channel) return {read_verdict(folder.results), ""};
    ChannelVerdict cv = read_channel(run.channel_text, {token, mode, request.seed, run.wall_s, needs_score});
    if (!cv.problem.empty()) return {std::nullopt, cv.problem};
    if (!cv.received) return {std::nullopt, ""};
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
  SubprocessResult run = step("run", config_.run, config_.run_timeout_s, run_token);
  if (run.timed_out) return fail(FailureKind::Timeout, timeout_text("run+verify", config_.run_timeout_s));
  auto [verdict, run_problem] = verdict_of(run, "verify", run_token, config_.bench.empty());
  if (!run_problem.empty()) return fail(FailureKind::VerifyFailed, run_problem);
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
  SubprocessResult bench = step("bench", config_.bench, config_.bench_timeout_s, bench_token);
  if (bench.timed_out) return fail(FailureKind::Timeout, timeout_text("bench", config_.bench_timeout_s));
  auto [bench_verdict, bench_problem] = verdict_of(bench, "bench", bench_token, true);
  if (!bench_problem.empty()) return fail(FailureKind::VerifyFailed, bench_problem);
  if (bench_verdict && !bench_verdict->correct) return fail(FailureKind::VerifyFailed, bench_verdict->error);
  if (!bench.succeeded()) return fail(FailureKind::BenchFailed, describe_crash("bench", bench));
  if (channel && !bench_verdict) return fail(FailureKind::BenchFailed, "bench exited 0" + no_record);
  if (!bench_verdict) write_file_atomic(folder.results / "correct.json", verify_verdict);
  read_metrics_contract(folder.results, FailureKind::BenchFailed, result);
  if (result.failure != FailureKind::Ok) write_failure_contract(folder, result);
  return finish();
}

}  // namespace braid
