#include "braid/eval/slurm_evaluator.hpp"

#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "braid/db/database.hpp"
#include "braid/util/command_line.hpp"
#include "braid/eval/diagnostics.hpp"
#include "braid/eval/work_folder.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/hash.hpp"
#include "braid/util/log.hpp"

namespace braid {
namespace fs = std::filesystem;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Single quotes for the batch script: nothing inside is expanded.
std::string shell_quote(const std::string& word) {
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string quoted_words(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : " ") + shell_quote(w);
  return out;
}

// "<exit code> <start> <end>" as the script writes it into <step>.exit.
struct StepEnd {
  int exit_code = -1;
  double start = 0.0, end = 0.0;
};
std::optional<StepEnd> read_step_end(const fs::path& file) {
  auto text = try_read_file(file);
  if (!text) return std::nullopt;
  std::istringstream in(*text);
  StepEnd s;
  if (!(in >> s.exit_code >> s.start >> s.end)) return std::nullopt;
  return s;
}

std::optional<double> read_time(const fs::path& file, bool after_job_id) {
  auto text = try_read_file(file);
  if (!text) return std::nullopt;
  std::istringstream in(*text);
  std::string id;
  double t = 0;
  if (after_job_id && !(in >> id)) return std::nullopt;
  if (!(in >> t)) return std::nullopt;
  return t;
}

std::string log_tail(const fs::path& file, std::size_t bytes) {
  auto text = try_read_file(file);
  if (!text) return {};
  std::string tail = tail_text(*text, bytes);
  return tail.find_first_not_of(" \n\t") == std::string::npos ? std::string() : tail;
}

// Whether `limit_s` was used up: timeout(1) exits 124 (137 when its KILL follow-up was needed).
bool step_timed_out(const StepEnd& s, double limit_s) {
  return s.exit_code == 124 || (s.exit_code == 137 && s.end - s.start >= limit_s);
}

void copy_tree(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  if (!fs::exists(from, ec)) return;
  fs::create_directories(to, ec);
  fs::copy(from, to, fs::copy_options::recursive | fs::copy_options::overwrite_existing, ec);
  if (ec) log::warn("could not copy {} to {}: {}", from.string(), to.string(), ec.message());
}

}  // namespace

struct SlurmEvaluator::Job {
  std::string candidate_id;
  std::string code_hash;
  WorkFolder folder;  // in the job folder
  std::string job_id;
  int attempts = 0;
  double submitted_at = 0.0;
};

SlurmEvaluator::SlurmEvaluator(CascadeConfig cascade, SlurmConfig slurm)
    : cascade_(std::move(cascade)), slurm_(std::move(slurm)) {
  if (!SlurmClient::available())
    throw UserError((cascade_.workload_dir / "workload.yaml").string(),
                    "evaluator.slurm needs sbatch, squeue and scancel on PATH (Slurm's client commands), and none or "
                    "not all were found");
}

std::string SlurmEvaluator::describe() const {
  std::string where = slurm_.partition.empty() ? "default partition" : "partition " + slurm_.partition;
  return fmt::format("slurm ({}, {} rank(s), {} GPU(s) per rank): build `{}` here, run `{}`{} as jobs", where, slurm_.ranks,
                     slurm_.gpus_per_task, cascade_.build, cascade_.run,
                     cascade_.bench.empty() ? "" : ", bench `" + cascade_.bench + "`");
}

void SlurmEvaluator::attach_run(ProgramDatabase& db, const fs::path& results_dir) {
  ledger_ = std::make_unique<SlurmJobLedger>(db);
  results_dir_ = fs::absolute(results_dir);
}

fs::path SlurmEvaluator::job_dir_for(const EvalRequest& request) const {
  fs::path shared = slurm_.shared_dir;
  if (shared.empty()) shared = results_dir_.empty() ? fs::absolute(request.work_dir) / "slurm" : results_dir_ / "slurm_jobs";
  else if (shared.is_relative()) shared = cascade_.workload_dir / shared;
  return (shared / request.candidate_id).lexically_normal();
}

std::string SlurmEvaluator::time_limit() const {
  if (!slurm_.time.empty()) return slurm_.time;
  // Both steps' limits and a minute for the steps to start and the script to finish (minutes).
  const double seconds = cascade_.run_timeout_s + (cascade_.bench.empty() ? 0.0 : cascade_.bench_timeout_s) + 60.0;
  return std::to_string(long(std::ceil(seconds / 60.0)));
}

std::vector<std::string> SlurmEvaluator::sbatch_args(const std::string& candidate_id, const fs::path& job_dir) const {
  std::vector<std::string> a = {"--job-name=braid-" + candidate_id, "--output=" + (job_dir / "slurm.out").string(),
                                "--open-mode=append", "--chdir=" + job_dir.string(),
                                // braid resubmits itself: Slurm's own requeue would run a job twice behind its back.
                                "--no-requeue", "--ntasks=" + std::to_string(slurm_.ranks),
                                "--cpus-per-task=" + std::to_string(slurm_.cpus_per_task)};
  if (int nodes = slurm_.node_count(); nodes > 0) a.push_back("--nodes=" + std::to_string(nodes));
  if (slurm_.gpus_per_task > 0) a.push_back("--gpus-per-task=" + std::to_string(slurm_.gpus_per_task));
  a.push_back("--time=" + time_limit());
  if (!slurm_.partition.empty()) a.push_back("--partition=" + slurm_.partition);
  if (!slurm_.account.empty()) a.push_back("--account=" + slurm_.account);
  if (!slurm_.qos.empty()) a.push_back("--qos=" + slurm_.qos);
  if (!slurm_.mem.empty()) a.push_back("--mem=" + slurm_.mem);
  a.insert(a.end(), slurm_.sbatch_args.begin(), slurm_.sbatch_args.end());
  return a;
}

std::string SlurmEvaluator::job_script(const fs::path& job_dir, const std::string& seed) const {
  WorkFolder f;  // only the placeholders: the folder itself was prepared before
  f.dir = job_dir;
  f.program = job_dir / cascade_.program_filename;
  f.artifact = job_dir / (fs::path(cascade_.program_filename).stem().string() + ".out");
  f.results = job_dir / "results";
  f.placeholders = {{"program", f.program.string()},
                    {"artifact", f.artifact.string()},
                    {"work_dir", job_dir.string()},
                    {"workload_dir", fs::absolute(cascade_.workload_dir).string()},
                    {"seed", seed},
                    {"results_dir", f.results.string()}};
  std::string srun = "srun --ntasks=" + std::to_string(slurm_.ranks) + " --kill-on-bad-exit=1";
  if (int nodes = slurm_.node_count(); nodes > 0) srun += " --nodes=" + std::to_string(nodes);
  if (slurm_.gpus_per_task > 0) srun += " --gpus-per-task=" + std::to_string(slurm_.gpus_per_task);
  if (slurm_.ranks > 1) srun += " --label";  // one log per step; lines prefixed with the rank

  std::string s;
  s += "#!/bin/bash\n";
  s += "# Written by braid: run+verify and bench of one candidate as Slurm job steps.\n";
  s += "cd " + shell_quote(job_dir.string()) + " || exit 1\n";
  s += "echo \"$SLURM_JOB_ID $(date +%s.%N)\" >> runs.log\n";
  s += "echo \"$SLURM_JOB_ID $(date +%s.%N)\" > started.tmp && mv started.tmp started\n";
  s += "export BRAID_WORK_DIR=" + shell_quote(job_dir.string()) + "\n";
  s += "export BRAID_RESULTS_DIR=" + shell_quote(f.results.string()) + "\n";
  s += "export BRAID_WORKLOAD_DIR=" + shell_quote(f.placeholders["workload_dir"]) + "\n";
  s += "export BRAID_SEED=" + shell_quote(seed) + "\n";
  // The harness's rank bootstrap (device/include/braid/runtime.cuh) reads SLURM_PROCID,
  // SLURM_NTASKS and SLURM_LOCALID, and exchanges the ncclUniqueId through this folder.
  s += "export BRAID_EVAL_DIR=" + shell_quote(job_dir.string()) + "\n";
  for (const auto& [name, value] : cascade_.env) s += "export " + name + "=" + shell_quote(value) + "\n";
  s += "step() {  # name, time limit, command...\n";
  s += "  local name=$1 limit=$2; shift 2\n";
  s += "  local t0; t0=$(date +%s.%N)\n";
  s += "  BRAID_RUN_ID=\"slurm-$SLURM_JOB_ID-$name\" " + srun +
       " --output=\"logs/$name.stdout\" --error=\"logs/$name.stderr\" timeout -k 2 \"$limit\" \"$@\"\n";
  s += "  local rc=$?\n";
  s += "  echo \"$rc $t0 $(date +%s.%N)\" > \"$name.exit.tmp\" && mv \"$name.exit.tmp\" \"$name.exit\"\n";
  s += "  return $rc\n";
  s += "}\n";
  s += fmt::format("step run {:g} {}\n", cascade_.run_timeout_s, quoted_words(command_argv(cascade_.run, f.placeholders)));
  s += "rc=$?\n";
  s += "mkdir -p verify && for f in correct.json metrics.json; do [ -f \"results/$f\" ] && mv \"results/$f\" verify/; done\n";
  if (!cascade_.bench.empty()) {
    // A run that failed or reported a wrong result is not benchmarked (braid reads verify/).
    s += "if [ $rc -eq 0 ] && [ -f verify/correct.json ] && ! grep -Eq '\"correct\"[[:space:]]*:[[:space:]]*false' "
         "verify/correct.json; then\n";
    s += fmt::format("  step bench {:g} {}\n", cascade_.bench_timeout_s,
                     quoted_words(command_argv(cascade_.bench, f.placeholders)));
    s += "fi\n";
  }
  s += "date +%s.%N > done.tmp && mv done.tmp done\n";
  return s;
}

void SlurmEvaluator::set_active(const std::string& candidate_id, const Active& a) {
  std::lock_guard lock(mutex_);
  active_[candidate_id] = a;
}

void SlurmEvaluator::forget_active(const std::string& candidate_id) {
  std::lock_guard lock(mutex_);
  active_.erase(candidate_id);
}

std::string SlurmEvaluator::status_note() const {
  std::lock_guard lock(mutex_);
  if (active_.empty()) return {};
  int running = 0, queued = 0;
  std::map<std::string, int> reasons;
  for (const auto& [id, a] : active_) {
    if (a.state == "PENDING" || a.state == "REQUEUED" || a.state == "CONFIGURING") {
      ++queued;
      if (!a.reason.empty() && a.reason != "None") ++reasons[a.reason];
    } else {
      ++running;
    }
  }
  std::string note = fmt::format("slurm: {} running, {} queued", running, queued);
  if (!reasons.empty()) {
    std::string why;
    for (const auto& [r, n] : reasons) why += (why.empty() ? "" : ", ") + r;
    note += " (" + why + ")";
  }
  return note;
}

void SlurmEvaluator::cancel_jobs() {
  cancelled_ = true;
  std::vector<std::string> ids;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [cand, a] : active_) ids.push_back(a.job_id);
  }
  if (!ids.empty() && !client_.cancel(ids)) log::warn("scancel of braid's Slurm jobs failed; cancel them by hand: scancel {}", fmt::join(ids, " "));
}

bool SlurmEvaluator::submit(Job& job, EvalResult& result) {
  const fs::path dir = job.folder.dir;
  for (const char* stale : {"started", "done", "run.exit", "bench.exit"}) fs::remove(dir / stale);
  std::error_code ec;
  fs::remove_all(dir / "verify", ec);
  fs::remove(job.folder.results / "correct.json");
  fs::remove(job.folder.results / "metrics.json");
  std::string error;
  auto id = client_.submit(sbatch_args(job.candidate_id, dir), (dir / "job.sh").string(), &error);
  if (!id) {
    record_failure(result, FailureKind::RunFailed, "slurm: sbatch refused the job: " + error);
    log::error("slurm: sbatch refused the job of {}: {}", job.candidate_id, error);
    return false;
  }
  job.job_id = *id;
  job.attempts += 1;
  job.submitted_at = now_s();
  set_active(job.candidate_id, {job.job_id, "PENDING", ""});
  if (ledger_) {
    SlurmJobEntry e{job.candidate_id, job.job_id, job.code_hash, dir.string(), "submitted", job.attempts, job.submitted_at, job.submitted_at};
    ledger_->put(e);
  }
  log::info("slurm: {} submitted as job {}{}", job.candidate_id, job.job_id,
            job.attempts > 1 ? fmt::format(" (attempt {})", job.attempts) : "");
  return true;
}

EvalResult SlurmEvaluator::evaluate(const EvalRequest& request, const JobObserver& jobs) {
  EvalResult result;
  Job job;
  job.candidate_id = request.candidate_id.empty() ? hash_hex(request.code, request.seed) : request.candidate_id;
  job.code_hash = hash_hex(request.code, request.seed);
  const fs::path dir = job_dir_for(request);

  std::optional<SlurmJobEntry> earlier;
  if (ledger_) earlier = ledger_->find(job.candidate_id);
  const bool adopt = earlier && earlier->code_hash == job.code_hash && earlier->state != "cancelled" && fs::exists(dir / "job.sh");
  if (adopt) {
    job.job_id = earlier->job_id;
    job.attempts = earlier->attempts;
    job.submitted_at = earlier->submitted_at;
    job.folder.dir = dir;
    job.folder.program = dir / cascade_.program_filename;
    job.folder.results = dir / "results";
    job.folder.logs = dir / "logs";
    set_active(job.candidate_id, {job.job_id, "PENDING", ""});
    log::info("slurm: {} found again as job {} (submitted by an earlier braid)", job.candidate_id, job.job_id);
  } else {
    if (earlier && earlier->state == "submitted") client_.cancel({earlier->job_id});  // another program under this id
    std::error_code ec;
    fs::remove_all(dir, ec);
    EvalRequest local = request;
    local.work_dir = dir;
    job.folder = prepare_work_folder(local, cascade_.workload_dir, cascade_.program_filename);
    // L1 builds here, as the cascade does: only what needs the cluster goes to it.
    result.level_reached = 1;
    StepSpec spec{"build", command_argv(cascade_.build, job.folder.placeholders), job.folder.dir, cascade_.build_timeout_s, cascade_.env};
    SubprocessResult build = run_step(spec, job.folder, local, jobs);
    result.timings["build"] = build.wall_s;
    std::string build_error;
    FailureKind build_failure = FailureKind::Ok;
    if (!build.started) build_failure = FailureKind::BuildFailed, build_error = "build command " + build.describe_end();
    else if (build.timed_out)
      build_failure = FailureKind::Timeout, build_error = fmt::format("build timed out (limit {:g} s); the process group was killed", cascade_.build_timeout_s);
    else if (!build.succeeded()) {
      build_failure = FailureKind::BuildFailed;
      build_error = trim_compiler_errors(build.stderr_text + build.stdout_text, job.folder.program.string(), cascade_.program_filename);
      if (build_error.find_first_not_of(" \n\t") == std::string::npos) build_error = "build " + build.describe_end();
    }
    if (build_failure != FailureKind::Ok) {
      record_failure(result, build_failure, build_error);
      WorkFolder out = prepare_work_folder(request, cascade_.workload_dir, cascade_.program_filename);
      copy_tree(dir / "logs", out.logs);
      write_failure_contract(out, result);
      return result;
    }
    write_file_atomic(dir / "job.sh", job_script(dir, std::to_string(request.seed)));
    fs::permissions(dir / "job.sh", fs::perms::owner_exec, fs::perm_options::add);
    if (cancelled_ || !submit(job, result)) {
      if (cancelled_) record_failure(result, FailureKind::RunFailed, "slurm: not submitted, braid is stopping");
      WorkFolder out = prepare_work_folder(request, cascade_.workload_dir, cascade_.program_filename);
      write_failure_contract(out, result);
      return result;
    }
  }
  EvalResult ran = wait_and_collect(job, request);
  ran.timings.update(result.timings);
  forget_active(job.candidate_id);
  return ran;
}

EvalResult SlurmEvaluator::wait_and_collect(Job& job, const EvalRequest& request) {
  EvalResult result;
  result.level_reached = 2;
  const fs::path dir = job.folder.dir;
  const double query_every = std::max(2.0, slurm_.poll_interval_s);
  double last_query = 0.0;
  std::string ended_state;  // set when the job ended without its script finishing
  int end_marker_checks = 0;
  auto mark = [&](const std::string& state) {
    if (ledger_) ledger_->put({job.candidate_id, job.job_id, job.code_hash, dir.string(), state, job.attempts, job.submitted_at, now_s()});
  };
  auto requeue = [&](const std::string& why) -> bool {
    if (job.attempts > slurm_.max_requeues) {
      record_failure(result, FailureKind::RunFailed,
                     fmt::format("slurm job {} {}; not scored, and given up after {} submission(s) (max_requeues {})", job.job_id,
                                 why, job.attempts, slurm_.max_requeues));
      return false;
    }
    log::warn("slurm job {} of {} {}: not scored, submitting it again", job.job_id, job.candidate_id, why);
    return submit(job, result);
  };

  while (true) {
    if (cancelled_) {
      client_.cancel({job.job_id});
      mark("cancelled");
      record_failure(result, FailureKind::RunFailed, "slurm: job " + job.job_id + " cancelled, braid is stopping");
      return result;
    }
    if (fs::exists(dir / "done")) break;
    const double t = now_s();
    if (t - last_query >= query_every) {
      last_query = t;
      auto st = client_.query(job.job_id);
      if (st) {
        if (st->known) set_active(job.candidate_id, {job.job_id, st->state, st->reason});
        const SlurmOutcome outcome = st->known ? classify_slurm_state(st->state) : SlurmOutcome::Requeue;
        const std::string state = st->known ? st->state : "GONE";
        if (outcome == SlurmOutcome::Waiting) {
          end_marker_checks = 0;
        } else if (fs::exists(dir / "done")) {
          break;
        } else if (outcome == SlurmOutcome::Ended && ++end_marker_checks < 3) {
          // The script's last file may reach a shared file system after Slurm saw the end.
        } else if (outcome == SlurmOutcome::Requeue) {
          const std::string why = st->known ? "ended " + state : "is no longer known to Slurm and did not finish";
          if (!requeue(why)) break;
          last_query = 0.0;
          end_marker_checks = 0;
        } else {
          ended_state = state;
          break;
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(slurm_.poll_interval_s));
  }
  const double noticed = now_s();
  mark("collected");

  // Timings: how long Slurm kept the job waiting, and the steps as the script measured them.
  if (auto started = read_time(dir / "started", true)) result.timings["slurm_queue"] = std::max(0.0, *started - job.submitted_at);
  if (auto done = read_time(dir / "done", false)) result.timings["slurm_collect"] = std::max(0.0, noticed - *done);
  result.timings["slurm_job"] = std::stod(job.job_id.substr(0, job.job_id.find('_')));
  result.timings["slurm_attempts"] = job.attempts;
  const auto run = read_step_end(dir / "run.exit");
  const auto bench = read_step_end(dir / "bench.exit");
  if (run) result.timings["run"] = run->end - run->start;
  if (bench) result.timings["bench"] = bench->end - bench->start;

  auto finish = [&]() {
    WorkFolder out = prepare_work_folder(request, cascade_.workload_dir, cascade_.program_filename);
    copy_tree(dir / "logs", out.logs);
    std::error_code ec;
    fs::copy_file(dir / "slurm.out", out.logs / "slurm.out", fs::copy_options::overwrite_existing, ec);
    if (result.failure == FailureKind::Ok) copy_tree(dir / "results", out.results);
    else write_failure_contract(out, result);
    return result;
  };
  if (result.failure != FailureKind::Ok) return finish();  // given up after requeues
  const std::string where = fmt::format("slurm job {}", job.job_id);
  const std::string in_step = run && !bench && !cascade_.bench.empty() && fs::exists(dir / "verify/correct.json") ? "bench" : run ? "the end" : "run";
  if (!ended_state.empty()) {
    if (ended_state == "TIMEOUT")
      record_failure(result, FailureKind::Timeout, fmt::format("{} hit its time limit ({}) during {}", where, "--time=" + time_limit(), in_step));
    else if (ended_state == "OUT_OF_MEMORY")
      record_failure(result, FailureKind::RunFailed, fmt::format("{} ran out of memory (OUT_OF_MEMORY) during {}", where, in_step));
    else {
      std::string text = fmt::format("{} ended {} before its script finished", where, ended_state);
      if (auto tail = log_tail(dir / "slurm.out", 1024); !tail.empty()) text += "\n" + tail;
      record_failure(result, FailureKind::RunFailed, text);
    }
    return finish();
  }

  // The script finished: read the steps as the cascade would.
  auto crash = [&](const std::string& step, const StepEnd& s) {
    std::string text = fmt::format("{}: exit code {} ({})", step, s.exit_code, where);
    std::string tail = log_tail(dir / "logs" / (step + ".stderr"), 1536);
    if (tail.empty()) tail = log_tail(dir / "logs" / (step + ".stdout"), 1024);
    if (tail.empty()) tail = log_tail(dir / "slurm.out", 1024);
    return tail.empty() ? text : text + "\n" + tail;
  };
  if (!run) {
    record_failure(result, FailureKind::RunFailed, where + ": the run step did not report its end\n" + log_tail(dir / "slurm.out", 1024));
    return finish();
  }
  if (step_timed_out(*run, cascade_.run_timeout_s))
    return record_failure(result, FailureKind::Timeout, fmt::format("run+verify timed out (limit {:g} s, {})", cascade_.run_timeout_s, where)), finish();
  auto verdict = read_verdict(dir / "verify");
  if (verdict && !verdict->correct) return record_failure(result, FailureKind::VerifyFailed, verdict->error), finish();
  if (run->exit_code != 0) return record_failure(result, FailureKind::RunFailed, crash("run", *run)), finish();
  if (!verdict) return record_failure(result, FailureKind::RunFailed, "run exited 0 but wrote no valid results/correct.json"), finish();
  if (cascade_.bench.empty()) {
    copy_tree(dir / "verify", dir / "results");
    read_metrics_contract(dir / "results", FailureKind::RunFailed, result);
    return finish();
  }
  result.level_reached = 3;
  if (!bench) return record_failure(result, FailureKind::BenchFailed, where + ": the bench step did not report its end"), finish();
  if (step_timed_out(*bench, cascade_.bench_timeout_s))
    return record_failure(result, FailureKind::Timeout, fmt::format("bench timed out (limit {:g} s, {})", cascade_.bench_timeout_s, where)), finish();
  auto bench_verdict = read_verdict(dir / "results");
  if (bench_verdict && !bench_verdict->correct) return record_failure(result, FailureKind::VerifyFailed, bench_verdict->error), finish();
  if (bench->exit_code != 0) return record_failure(result, FailureKind::BenchFailed, crash("bench", *bench)), finish();
  if (!bench_verdict) {
    std::error_code ec;
    fs::copy_file(dir / "verify/correct.json", dir / "results/correct.json", fs::copy_options::overwrite_existing, ec);
  }
  read_metrics_contract(dir / "results", FailureKind::BenchFailed, result);
  return finish();
}

}  // namespace braid
