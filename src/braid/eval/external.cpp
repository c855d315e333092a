#include "braid/eval/external.hpp"

#include <fmt/format.h>

#include "braid/util/command_line.hpp"
#include "braid/eval/verdict_channel.hpp"
#include "braid/eval/work_folder.hpp"
#include "braid/util/fs.hpp"

namespace braid {

ExternalConfig ExternalConfig::from_json(const json& section, const std::filesystem::path& workload_dir,
                                         const std::string& program_filename) {
  ExternalConfig c;
  c.workload_dir = workload_dir;
  c.program_filename = program_filename;
  c.command = section.value("command", std::string());
  c.timeout_s = section.value("timeout_s", c.timeout_s);
  c.memory_limit_mb = section.value("memory_limit_mb", c.memory_limit_mb);
  if (auto e = section.find("env"); e != section.end())
    for (auto& [name, value] : e->items()) c.env[name] = value.get<std::string>();
  c.sandbox = SandboxSettings::from_json(section);
  c.verdict = section.value("verdict", c.verdict);
  return c;
}

bool read_external_verdict(const std::filesystem::path& results, EvalResult& result) {
  read_metrics_contract(results, FailureKind::RunFailed, result);
  if (result.failure == FailureKind::Ok) {
    result.level_reached = 3;
    return true;
  }
  if (result.failure != FailureKind::VerifyFailed) return false;
  result.level_reached = 2;
  // The evaluator may say which stage failed, in braid's words.
  json verdict = json::parse(try_read_file(results / "correct.json").value_or("{}"), nullptr, false);
  if (verdict.is_object() && verdict.contains("failure") && verdict["failure"].is_string()) {
    if (auto kind = failure_kind_from(verdict["failure"].get<std::string>()); kind && *kind != FailureKind::Ok) {
      result.failure = *kind;
      if (*kind == FailureKind::BuildFailed) result.level_reached = 1;
      if (*kind == FailureKind::BenchFailed) result.level_reached = 3;
    }
  }
  return true;
}

ExternalEvaluator::ExternalEvaluator(ExternalConfig config) : config_(std::move(config)) {}

std::string ExternalEvaluator::describe() const { return fmt::format("external: `{}`", config_.command); }

EvalResult ExternalEvaluator::evaluate(const EvalRequest& request, const JobObserver& jobs) {
  EvalResult result;
  WorkFolder folder = prepare_work_folder(request, config_.workload_dir, config_.program_filename);
  std::vector<std::string> argv = command_argv(config_.command, folder.placeholders);
  argv.insert(argv.end(), {"--program_path", folder.program.string(), "--results_dir", folder.results.string()});
  // Only an evaluator that relays its harness's record gets a channel; others' harnesses would
  // write to a descriptor the evaluator's own child never inherits.
  const std::string token = config_.verdict == "channel" ? new_eval_token() : "";
  StepSpec spec{"external", std::move(argv), std::filesystem::absolute(config_.workload_dir), config_.timeout_s,
                config_.env, config_.memory_limit_mb << 20,
                candidate_sandbox(config_.sandbox, folder, config_.memory_limit_mb << 20), token};
  SubprocessResult run = run_step(spec, folder, request, jobs);
  result.timings["external"] = run.wall_s;
  std::string channel_state = "unverified-channel";
  auto finish = [&]() -> EvalResult {
    record_isolation(result, run.sandbox_level, channel_state);
    return result;
  };
  auto fail = [&](FailureKind kind, const std::string& error) {
    record_failure(result, kind, error);
    write_failure_contract(folder, result);
    return finish();
  };

  result.level_reached = 1;
  if (!run.started) return fail(FailureKind::RunFailed, "evaluator " + run.describe_end());
  if (run.timed_out)
    return fail(FailureKind::Timeout,
                fmt::format("evaluator timed out (limit {:g} s); the process group was killed", config_.timeout_s));

  ChannelVerdict cv;
  if (!token.empty()) cv = read_channel(run.channel_text, {token, "bench", request.seed, run.wall_s, true});
  if (!cv.problem.empty()) return fail(FailureKind::VerifyFailed, cv.problem);
  if (cv.received) {
    channel_state = "verified";
    write_contract_files(folder.results, cv);
  } else if (config_.verdict == "channel") {
    if (!run.succeeded()) return fail(FailureKind::RunFailed, describe_crash("evaluator", run));
    return fail(FailureKind::RunFailed, "evaluator exited 0 but no verdict came through the verdict channel (BRAID_RESULT_FD)");
  }
  if (read_external_verdict(folder.results, result)) return finish();
  // No usable verdict: say how the evaluator ended.
  if (!run.succeeded()) result.error_text += "\n" + describe_crash("evaluator", run);
  write_failure_contract(folder, result);
  return finish();
}

}  // namespace braid
