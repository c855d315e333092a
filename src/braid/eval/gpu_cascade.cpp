#include "braid/eval/gpu_cascade.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>

#include "braid/eval/compile_cache.hpp"
#include "braid/eval/verdict_channel.hpp"
#include "braid/eval/work_folder.hpp"
#include "braid/platform/toolchain.hpp"
#include "braid/util/command_line.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/hash.hpp"
#include "braid/util/log.hpp"

namespace braid {
namespace {

// The frozen harness prints "harness: <what>" on stderr when a rank ends on an exception (a CUDA
// or NCCL error, a dead peer): the run failed, as opposed to a verification it completed.
std::optional<std::string> harness_exception_line(const std::string& stderr_text) {
  std::size_t start = 0;
  while (start < stderr_text.size()) {
    std::size_t end = stderr_text.find('\n', start);
    if (end == std::string::npos) end = stderr_text.size();
    if (stderr_text.compare(start, 9, "harness: ") == 0) return stderr_text.substr(start, end - start);
    start = end + 1;
  }
  return std::nullopt;
}

std::vector<std::string> string_list(const json& section, const char* key) {
  std::vector<std::string> out;
  if (auto it = section.find(key); it != section.end() && it->is_array())
    for (const auto& v : *it) out.push_back(v.get<std::string>());
  return out;
}

std::filesystem::path expand_home(const std::string& path) {
  if (path.rfind("~/", 0) == 0) {
    const char* home = std::getenv("HOME");
    return std::filesystem::path(home ? home : "/tmp") / path.substr(2);
  }
  return path;
}

}  // namespace

bool runs_braid_harness(const std::filesystem::path& program, std::vector<std::filesystem::path> include_dirs) {
  if (auto device = find_device_include(); !device.empty()) include_dirs.push_back(device);
  bool harness = false, calls_main = false;
  auto calls_harness_main = [](const std::filesystem::path& file) {
    auto text = try_read_file(file);
    return text && text->find("harness_main(") != std::string::npos;
  };
  calls_main = calls_harness_main(program);
  for (const auto& header : included_headers(program, include_dirs)) {
    const bool braids =
        header.parent_path().filename() == "braid" || header.parent_path().parent_path().filename() == "braid";
    if (header.filename() == "harness.cuh" && header.parent_path().filename() == "braid") harness = true;
    if (!braids && !calls_main) calls_main = calls_harness_main(header);  // a workload header's main
  }
  return harness && calls_main;
}

std::filesystem::path default_compile_cache_dir() {
  if (const char* d = std::getenv("BRAID_CACHE_DIR"); d && *d) return std::filesystem::path(d) / "nvcc";
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return std::filesystem::path(d) / "braid" / "nvcc";
  const char* home = std::getenv("HOME");
  return std::filesystem::path(home && *home ? home : "/tmp") / ".cache" / "braid" / "nvcc";
}

GpuCascadeConfig GpuCascadeConfig::from_json(const json& section, const std::filesystem::path& workload_dir,
                                             const std::string& program_filename) {
  GpuCascadeConfig c;
  c.workload_dir = workload_dir;
  c.program_filename = program_filename;
  c.ranks = section.value("ranks", c.ranks);
  c.launcher = parse_launcher_kind(section.value("launcher", std::string("local"))).value_or(LauncherKind::Local);
  c.arch = section.value("arch", c.arch);
  if (section.contains("nvcc_flags")) c.nvcc_flags = string_list(section, "nvcc_flags");
  for (const auto& inc : string_list(section, "includes")) {
    std::filesystem::path p = expand_home(inc);
    c.includes.push_back(p.is_absolute() ? p : (workload_dir / p).lexically_normal());
  }
  c.libs = string_list(section, "libs");
  c.args = section.value("args", std::string());
  c.bench_args = section.value("bench_args", std::string());
  c.build_timeout_s = section.value("build_timeout_s", c.build_timeout_s);
  c.run_timeout_s = section.value("run_timeout_s", c.run_timeout_s);
  c.bench_timeout_s = section.value("bench_timeout_s", c.bench_timeout_s);
  c.bench_exclusive = section.value("bench_exclusive", c.bench_exclusive);
  c.verify_in_bench = section.value("verify_in_bench", c.verify_in_bench);
  c.gpus_per_rank = section.value("gpus_per_rank", c.gpus_per_rank);
  if (auto it = section.find("gpus"); it != section.end() && it->is_array())
    for (const auto& g : *it) c.gpus.push_back(g.get<int>());
  c.health_probe = section.value("health_probe", c.health_probe);
  c.launcher_args = string_list(section, "launcher_args");
  if (auto d = section.value("cache_dir", std::string()); !d.empty()) {
    std::filesystem::path p = expand_home(d);
    c.cache_dir = p.is_absolute() ? p : workload_dir / p;
  }
  if (auto e = section.find("env"); e != section.end())
    for (auto& [name, value] : e->items()) c.env[name] = value.get<std::string>();
  if (auto p = section.find("profile"); p != section.end()) c.profile = NcuConfig::from_json(*p);
  c.sandbox.enabled = section.value("sandbox", c.sandbox.enabled);
  c.sandbox.max_processes = section.value("max_processes", c.sandbox.max_processes);
  c.rank_memory_bytes = static_cast<std::size_t>(section.value("memory_limit_mb", 0L)) << 20;
  // auto: the channel wherever it can carry the verdict (braid's own local ranks, a program on
  // braid's harness). Judged once from the workload's program, so a candidate cannot opt out:
  // one that drops the harness sends no record and fails.
  const std::string verdict = section.value("verdict", std::string("auto"));
  c.verdict_channel =
      c.launcher == LauncherKind::Local &&
      (verdict == "channel" || (verdict == "auto" && runs_braid_harness(workload_dir / program_filename, c.includes)));
  return c;
}

LevelJudgement judge_level(const LaunchResult& run, const std::optional<Verdict>& verdict, const std::string& step,
                           FailureKind crash_kind) {
  LevelJudgement out;
  if (!run.started) {
    out.failure = crash_kind;
    out.error = run.describe_failure(step);
    return out;
  }
  if (run.timed_out) {
    out.failure = FailureKind::Timeout;
    out.error = run.describe_failure(step);
    out.crashed = true;
    return out;
  }
  std::optional<std::string> exception_line;
  for (const auto& r : run.ranks)
    if (!exception_line) exception_line = harness_exception_line(r.stderr_text);
  bool signalled = false;
  for (const auto& r : run.ranks) signalled = signalled || (r.failed() && r.term_signal != 0);
  if (signalled || (!run.succeeded() && exception_line) || (!run.succeeded() && !verdict)) {
    out.failure = crash_kind;
    out.error = run.describe_failure(step);
    if (verdict && !verdict->correct && out.error.find(verdict->error) == std::string::npos)
      out.error += "\nreported: " + verdict->error;
    out.crashed = true;
  } else if (verdict && !verdict->correct) {
    out.failure = FailureKind::VerifyFailed;
    out.error = verdict->error;
  } else if (!verdict) {
    out.failure = crash_kind;
    out.error = step + ": every rank exited 0 but none wrote a valid results/correct.json";
  } else if (!run.succeeded()) {
    // correct.json says correct but a rank failed: the run is not to be trusted.
    out.failure = crash_kind;
    out.error = run.describe_failure(step);
    out.crashed = true;
  }
  return out;
}

std::vector<std::string> harness_argv(const GpuCascadeConfig& config, const WorkFolder& folder, std::uint64_t seed,
                                      const std::string& mode, const std::string& extra) {
  std::vector<std::string> argv = {
      folder.artifact.string(), "--mode", mode, "--seed", std::to_string(seed), "--results_dir",
      folder.results.string()};
  for (const std::string& args : {config.args, extra}) {
    if (args.empty()) continue;
    auto words = command_argv(args, folder.placeholders);
    argv.insert(argv.end(), words.begin(), words.end());
  }
  return argv;
}

BuildInput harness_build_input(const GpuCascadeConfig& config, const std::string& arch, const WorkFolder& folder) {
  BuildInput input;
  input.source = folder.program;
  input.output = folder.artifact;
  input.arch = arch;
  input.flags = config.nvcc_flags;
  input.includes = config.includes;
  input.libs = config.libs;
  input.timeout_s = config.build_timeout_s;
  input.display_name = config.program_filename;
  input.log_dir = folder.logs;
  return input;
}

struct GpuCascadeEvaluator::LevelOutcome {
  FailureKind failure = FailureKind::Ok;
  std::string error;
  double wall_s = 0.0;
  bool probed = false;
  std::string sandbox_level;
};

// `verdict: channel`: the ranks' records (rank 0's verdict; a rank whose harness failed adds its
// own) replace whatever the candidate's process left in results/; a missing or inconsistent
// record leaves no verdict files and is the problem returned ("" when the verdict came intact).
std::string take_channel_verdict(const LaunchResult& run, const ChannelExpectation& expect,
                                 const std::filesystem::path& results) {
  std::string records;
  for (const auto& r : run.ranks)
    records += r.channel_text + (r.channel_text.empty() || r.channel_text.back() == '\n' ? "" : "\n");
  std::error_code ec;
  std::filesystem::remove(results / "correct.json", ec);
  std::filesystem::remove(results / "metrics.json", ec);
  const ChannelVerdict verdict = read_channel(records, expect);
  if (!verdict.received) return "no verdict came through the verdict channel";
  if (!verdict.problem.empty()) return verdict.problem;
  write_contract_files(results, verdict);
  return "";
}

bool within(const std::filesystem::path& path, const std::filesystem::path& dir) {
  const auto rel = path.lexically_normal().lexically_relative(dir.lexically_normal());
  return !rel.empty() && *rel.begin() != "..";
}

// The ranks' sandbox: the CPU candidates' policy (the run folder and the home hidden, writes only
// in the work folder) in the GPU profile, without a memory limit. Files and folders the user's
// own `args` / `bench_args` name by absolute path (`--data /home/me/weights.bin`,
// `--data=/scratch/x`) stay readable: they are the workload's inputs. Never the run's own
// folders (another candidate, evolution.db) nor a folder above this evaluation's.
SandboxPolicy rank_sandbox(const GpuCascadeConfig& config, const std::filesystem::path& work_dir) {
  SandboxPolicy policy = candidate_sandbox(config.sandbox, work_dir, config.workload_dir, 0, SandboxProfile::Gpu);
  policy.resident_bytes = config.rank_memory_bytes;
  const char* home_var = std::getenv("HOME");
  const std::filesystem::path home = home_var && *home_var ? std::filesystem::path(home_var).lexically_normal() : "";
  auto run_folder = [&](const std::filesystem::path& named) {
    if (within(work_dir, named)) return true;
    for (const auto& h : policy.hidden)
      if (h.lexically_normal() != home && within(named, h)) return true;
    return false;
  };
  std::error_code ec;
  for (const std::string& args : {config.args, config.bench_args})
    for (const std::string& word : split_command_words(args).value_or(std::vector<std::string>{})) {
      const std::size_t slash = word.find('/');
      if (slash == std::string::npos || (slash > 0 && word[slash - 1] != '=')) continue;
      const std::filesystem::path named = std::filesystem::path(word.substr(slash)).lexically_normal();
      if (std::filesystem::exists(named, ec) && !run_folder(named)) policy.read_only.push_back(named);
    }
  return policy;
}

GpuCascadeEvaluator::GpuCascadeEvaluator(GpuCascadeConfig config) : config_(std::move(config)) {
  const std::string yaml = (config_.workload_dir / "workload.yaml").string();
  std::string why;
  auto toolchain = find_cuda_toolchain(&why);
  if (!toolchain) throw UserError(yaml, "evaluator kind gpu needs the CUDA toolkit: " + why);
  const auto gpus = detect_gpus();
  std::vector<int> devices = config_.gpus;
  if (devices.empty())
    for (const auto& g : gpus) devices.push_back(g.index);
  const int needed = config_.ranks * config_.gpus_per_rank;
  if (static_cast<int>(devices.size()) < needed)
    throw UserError(yaml,
                    fmt::format("evaluator kind gpu needs {} GPU{} ({} ranks x {} per rank); this machine has {} "
                                "(nvidia-smi -L, /proc/driver/nvidia/gpus)",
                                needed, needed == 1 ? "" : "s", config_.ranks, config_.gpus_per_rank, devices.size()));
  auto arch = resolve_arch(config_.arch, gpus);
  if (!arch) throw UserError(yaml, "evaluator arch '" + config_.arch + "' is not auto, sm_90, sm_90a, ...");
  arch_ = *arch;
  builder_ = std::make_shared<NvccBuilder>(*toolchain,
                                           config_.cache_dir.empty() ? default_compile_cache_dir() : config_.cache_dir);
  pool_ = std::make_shared<GpuPool>(devices);
  if (config_.health_probe)
    probe_ = std::make_unique<GpuHealthProbe>(builder_, builder_->cache().dir() / "health_probe", arch_,
                                              config_.probe_timeout_s);
  log::info("gpu evaluator: {}; GPUs {}; arch {}", builder_->toolchain().describe(), fmt::join(devices, ","), arch_);
  set_up_profiler();
}

GpuCascadeEvaluator::GpuCascadeEvaluator(GpuCascadeConfig config, std::shared_ptr<NvccBuilder> builder,
                                         std::shared_ptr<GpuPool> pool)
    : config_(std::move(config)), builder_(std::move(builder)), pool_(std::move(pool)) {
  auto arch = resolve_arch(config_.arch, detect_gpus());
  if (!arch)
    throw UserError((config_.workload_dir / "workload.yaml").string(),
                    "evaluator arch '" + config_.arch + "' is not valid");
  arch_ = *arch;
  if (config_.health_probe)
    probe_ = std::make_unique<GpuHealthProbe>(builder_, builder_->cache().dir() / "health_probe", arch_,
                                              config_.probe_timeout_s);
  set_up_profiler();
}

void GpuCascadeEvaluator::set_up_profiler() {
  if (!config_.profile.enabled) return;
  profile_gate_ = std::make_unique<ProfileGate>(config_.profile.top_k);
  ncu_ = find_ncu(config_.profile.ncu, builder_->toolchain().cuda_home, &ncu_missing_);
  // Said once here; each candidate that would have been profiled carries the note.
  if (!ncu_) log::warn("profile: {}; candidates are evaluated without profiles", ncu_missing_);
}

std::string GpuCascadeEvaluator::describe() const {
  std::string text = fmt::format("gpu cascade: {} ranks via {}, {}, {}", config_.ranks, to_string(config_.launcher),
                                 arch_, builder_->toolchain().describe());
  if (profile_gate_)
    text += ncu_ ? fmt::format("; profiles the top {} with {}", config_.profile.top_k, ncu_->string())
                 : "; no profiles: " + ncu_missing_;
  if (auto note = pool_->status_line(); !note.empty()) text += "; " + note;
  return text;
}

std::string GpuCascadeEvaluator::status_note() const { return pool_->status_line(); }

void GpuCascadeEvaluator::warm_up() {
  if (!probe_) return;
  BuildResult built = probe_->build();
  if (!built.ok) log::warn("gpu health probe does not build: {}", built.error);
}

LaunchSpec GpuCascadeEvaluator::level_spec(const std::string& level, const EvalRequest& request,
                                           const std::vector<std::string>& argv, double timeout_s,
                                           const std::vector<int>& gpus, const std::filesystem::path& results,
                                           const std::filesystem::path& work_dir) const {
  LaunchSpec spec;
  spec.kind = config_.launcher;
  spec.ranks = config_.ranks;
  spec.argv = argv;
  spec.cwd = work_dir;
  spec.env = config_.env;
  spec.env["BRAID_METRICS_PATH"] = (results / "metrics.json").string();
  spec.env["BRAID_RESULTS_DIR"] = results.string();
  spec.env["BRAID_SEED"] = std::to_string(request.seed);
  spec.gpus = gpus;
  spec.gpus_per_rank = config_.gpus_per_rank;
  spec.log_dir = work_dir / "logs" / level;
  spec.eval_dir = work_dir;
  spec.timeout_s = timeout_s;
  spec.peer_grace_s = config_.peer_grace_s;
  spec.launcher_args = config_.launcher_args;
  spec.name = request.candidate_id.empty() ? level : request.candidate_id + " " + level;
  spec.sandbox = rank_sandbox(config_, work_dir);
  return spec;
}

GpuCascadeEvaluator::LevelOutcome GpuCascadeEvaluator::run_level(const std::string& level, const EvalRequest& request,
                                                                 const std::vector<std::string>& argv, double timeout_s,
                                                                 bool exclusive, const std::filesystem::path& results,
                                                                 const std::filesystem::path& work_dir,
                                                                 const JobObserver& jobs) {
  LevelOutcome out;
  const bool bench = level == "bench";
  // Without an earlier verify run, a crash of the bench run is the candidate's run failure.
  const FailureKind crash_kind = bench && !config_.verify_in_bench ? FailureKind::BenchFailed : FailureKind::RunFailed;
  std::string why;
  auto lease = pool_->acquire(config_.ranks * config_.gpus_per_rank, exclusive, &why);
  // No healthy GPUs left ends the run: no candidate could be judged.
  if (!lease) throw SystemError("gpu evaluator: " + why);

  LaunchSpec spec = level_spec(level, request, argv, timeout_s, lease->devices(), results, work_dir);
  if (config_.verdict_channel) spec.verdict_token = new_eval_token();
  LaunchResult run = launch_ranks(spec, jobs);
  out.wall_s = run.wall_s;
  out.sandbox_level = run.sandbox_level;
  const std::string channel_problem =
      config_.verdict_channel
          ? take_channel_verdict(run, ChannelExpectation{spec.verdict_token, level, request.seed, run.wall_s, bench},
                                 results)
          : "";

  const std::string step = !bench ? "run+verify" : config_.verify_in_bench ? "run+verify+bench" : "bench";
  LevelJudgement judged = judge_level(run, read_verdict(results), step, crash_kind);
  if (!channel_problem.empty() && !judged.crashed) {
    // Every rank ended well, but the verdict did not come (or not intact) through the channel.
    const bool none = channel_problem.find("no verdict came") != std::string::npos;
    judged.failure = none ? crash_kind : FailureKind::VerifyFailed;
    judged.error = step + ": " + channel_problem;
  }
  out.failure = judged.failure;
  out.error = judged.error;
  const bool crashed = judged.crashed;  // the GPUs may be left in a bad state: probe them

  if (crashed && probe_) {
    out.probed = true;
    ProbeOutcome health = probe_->check(lease->devices(), jobs);
    if (!health.healthy) {
      const std::string reason = fmt::format("health probe failed after a {} of {}", to_string(out.failure), spec.name);
      pool_->quarantine(lease->devices(), reason);
      log::warn("GPUs {} quarantined: {}: {}", lease->cuda_visible_devices(), reason, health.detail);
      out.error += fmt::format("\nGPUs {} failed the health probe and are quarantined for the rest of this run",
                               lease->cuda_visible_devices());
    }
  }
  return out;
}

EvalResult GpuCascadeEvaluator::evaluate(const EvalRequest& request, const JobObserver& jobs) {
  EvalResult result;
  WorkFolder folder = prepare_work_folder(request, config_.workload_dir, config_.program_filename);
  auto fail = [&](FailureKind kind, const std::string& error) {
    record_failure(result, kind, error);
    write_failure_contract(folder, result);
    return result;
  };

  // The channel is the frozen harness's alone: a candidate that names it is not run.
  if (config_.verdict_channel)
    if (const std::string why = channel_tampering(request.code, ""); !why.empty())
      return fail(FailureKind::VerifyFailed, why);

  // L1: build.
  result.level_reached = 1;
  BuildInput input = harness_build_input(config_, arch_, folder);
  const std::string who = request.candidate_id.empty() ? std::string() : request.candidate_id + " ";
  BuildResult build = builder_->build(input, jobs, who + "build");
  result.timings["build"] = build.wall_s;
  result.private_metrics["build_cached"] = build.cached;
  if (!build.ok) return fail(build.timed_out ? FailureKind::Timeout : FailureKind::BuildFailed, build.error);

  auto argv_for = [&](const std::string& mode, const std::string& extra) {
    return harness_argv(config_, folder, request.seed, mode, extra);
  };

  // L2: run and verify on a shared lease (or, with verify_in_bench, in the bench run below).
  result.level_reached = 2;
  if (!config_.verify_in_bench) {
    LevelOutcome verify = run_level("verify", request, argv_for("verify", ""), config_.run_timeout_s, false,
                                    folder.results, folder.dir, jobs);
    result.timings["run"] = verify.wall_s;
    if (verify.failure != FailureKind::Ok) return fail(verify.failure, verify.error);
    result.level_reached = 3;
  }

  // L3: benchmark, alone on the node unless configured otherwise. The verify run's files are
  // set aside so that only the bench's count.
  std::filesystem::remove(folder.results / "correct.json");
  std::filesystem::remove(folder.results / "metrics.json");
  LevelOutcome bench = run_level("bench", request, argv_for("bench", config_.bench_args), config_.bench_timeout_s,
                                 config_.bench_exclusive, folder.results, folder.dir, jobs);
  result.timings["bench"] = bench.wall_s;
  if (bench.failure != FailureKind::Ok) return fail(bench.failure, bench.error);
  result.level_reached = 3;
  read_metrics_contract(folder.results, FailureKind::BenchFailed, result);
  result.private_metrics["build_cached"] = build.cached;  // the harness's private metrics replaced it
  // The harness runs in the candidate's process and writes the verdict files (docs/sandbox.md).
  record_isolation(result, bench.sandbox_level, config_.verdict_channel ? "verified" : "files");
  if (result.failure != FailureKind::Ok) {
    write_failure_contract(folder, result);
    return result;
  }
  // Re-measurements (search/remeasure.hpp labels them "<id>-confirm1", "<id>-noise2", ...) keep
  // only their score: a profile taken there would be thrown away.
  const bool remeasurement = request.candidate_id.find('-') != std::string::npos;
  if (result.correct && profile_gate_ &&
      profile_gate_->admit(hash_hex(request.code), result.combined_score, !remeasurement))
    profile_level(request, argv_for("bench", config_.bench_args), folder.dir, jobs, result);
  return result;
}

void GpuCascadeEvaluator::profile_level(const EvalRequest& request, const std::vector<std::string>& argv,
                                        const std::filesystem::path& work_dir, const JobObserver& jobs,
                                        EvalResult& result) {
  if (!ncu_) {
    result.public_metrics["profile"] = profile_note(ncu_missing_);
    return;
  }
  std::string why;
  // Alone on the node like the bench: other kernels would share the counters' passes.
  auto lease = pool_->acquire(config_.ranks * config_.gpus_per_rank, true, &why);
  if (!lease) throw SystemError("gpu evaluator: " + why);
  // The candidate's own results are final; the profiled run writes beside them.
  const std::filesystem::path results = work_dir / "profile_results";
  std::filesystem::create_directories(results);
  std::vector<std::string> program = argv;
  for (std::size_t i = 0; i + 1 < program.size(); ++i)
    if (program[i] == "--results_dir") program[i + 1] = results.string();

  LaunchSpec spec = level_spec("profile", request, ncu_argv(config_.profile, ncu_->string(), program),
                               config_.profile.timeout_s, lease->devices(), results, work_dir);
  spec.output_cap_bytes = 4 << 20;  // the CSV comes last on stdout; a cut would lose kernels
  // ncu is the user's tool, not the candidate's code: it needs its own files and lock folders.
  // Only candidates already judged under the sandbox get here (docs/sandbox.md, "GPU ranks").
  spec.sandbox.enabled = false;
  LaunchResult run = launch_ranks(spec, jobs);
  result.timings["profile"] = run.wall_s;

  // Rank 0's stdout holds its program's output, then ncu's CSV.
  const std::string out = run.ranks.empty() ? std::string() : run.ranks.front().stdout_text;
  NcuProfile parsed = parse_ncu_csv(out);
  if (!run.started || run.timed_out || !parsed.ok()) {
    std::string note = !run.started || run.timed_out ? run.describe_failure("profile") : parsed.error;
    // ncu says what went wrong on lines of its own (ERR_NVGPUCTRPERM, an unknown metric, ...).
    for (const auto& r : run.ranks)
      for (const std::string& text : {r.stdout_text, r.stderr_text})
        for (std::size_t at = text.find("==ERROR=="); at != std::string::npos; at = text.find("==ERROR==", at + 1))
          note += "\n" + text.substr(at, text.find('\n', at) - at);
    if (note.size() > 2000) note = note.substr(0, 2000) + " [...]";
    result.public_metrics["profile"] = profile_note(note);
    log::warn("profile of {}: {}", spec.name, note.substr(0, note.find('\n')));
    return;
  }
  // ncu's whole output stays in logs/profile/rank0.stdout.
  result.public_metrics["profile"] = profile_metrics(parsed);
}

}  // namespace braid
