#include "braid/eval/slurm_evaluator.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "braid/db/database.hpp"
#include "braid/eval/work_folder.hpp"
#include "braid/util/clock.hpp"
#include "braid/util/command_line.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/hash.hpp"
#include "braid/util/log.hpp"

namespace braid {
namespace fs = std::filesystem;

namespace {

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

// What polling one job remembers between looks.
struct SlurmEvaluator::Poll {
  double last_query = 0.0;
  int end_marker_checks = 0;
};

SlurmEvaluator::SlurmEvaluator(std::unique_ptr<SlurmJobKind> kind, SlurmConfig slurm)
    : kind_(std::move(kind)), slurm_(std::move(slurm)) {
  if (!SlurmClient::available())
    throw UserError((kind_->workload_dir() / "workload.yaml").string(),
                    "evaluator.slurm needs sbatch, squeue and scancel on PATH (Slurm's client commands), and none or "
                    "not all were found");
}

SlurmEvaluator::SlurmEvaluator(CascadeConfig cascade, SlurmConfig slurm)
    : SlurmEvaluator(cascade_job_kind(std::move(cascade)), std::move(slurm)) {}

std::string SlurmEvaluator::describe() const {
  std::string where = slurm_.partition.empty() ? "default partition" : "partition " + slurm_.partition;
  return fmt::format("slurm ({}, {} rank(s), {} GPU(s) per rank): {}", where, slurm_.ranks, slurm_.gpus_per_task,
                     kind_->describe());
}

void SlurmEvaluator::attach_run(ProgramDatabase& db, const fs::path& results_dir) {
  ledger_ = std::make_unique<SlurmJobLedger>(db);
  results_dir_ = fs::absolute(results_dir);
}

fs::path SlurmEvaluator::job_dir_for(const EvalRequest& request) const {
  fs::path shared = slurm_.shared_dir;
  if (shared.empty())
    shared = results_dir_.empty() ? fs::absolute(request.work_dir) / "slurm" : results_dir_ / "slurm_jobs";
  else if (shared.is_relative()) shared = kind_->workload_dir() / shared;
  return (shared / request.candidate_id).lexically_normal();
}

// The paths and placeholders of a job folder (the folder itself is prepared before).
WorkFolder SlurmEvaluator::job_folder(const fs::path& job_dir, const std::string& seed) const {
  WorkFolder f;
  f.dir = job_dir;
  f.program = job_dir / kind_->program_filename();
  f.artifact = job_dir / (fs::path(kind_->program_filename()).stem().string() + ".out");
  f.results = job_dir / "results";
  f.logs = job_dir / "logs";
  f.placeholders = {{"program", f.program.string()},
                    {"artifact", f.artifact.string()},
                    {"work_dir", job_dir.string()},
                    {"workload_dir", fs::absolute(kind_->workload_dir()).string()},
                    {"seed", seed},
                    {"results_dir", f.results.string()}};
  return f;
}

// The steps' names, timings and limits (their commands do not matter to the caller).
std::vector<SlurmStep> SlurmEvaluator::job_steps(const fs::path& job_dir) const {
  return kind_->steps(job_folder(job_dir, "0"), 0);
}

std::string SlurmEvaluator::time_limit() const {
  if (!slurm_.time.empty()) return slurm_.time;
  // Every step's limit and a minute for the steps to start and the script to finish (minutes).
  double seconds = 60.0;
  for (const auto& step : job_steps("/")) seconds += step.timeout_s;
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
  const WorkFolder f = job_folder(job_dir, seed);
  const std::vector<SlurmStep> steps = kind_->steps(f, std::stoull(seed));
  std::string srun = "srun --ntasks=" + std::to_string(slurm_.ranks) + " --kill-on-bad-exit=1";
  if (int nodes = slurm_.node_count(); nodes > 0) srun += " --nodes=" + std::to_string(nodes);
  if (slurm_.gpus_per_task > 0) srun += " --gpus-per-task=" + std::to_string(slurm_.gpus_per_task);
  for (const auto& arg : kind_->srun_args()) srun += " " + shell_quote(arg);
  auto uses = [&](SlurmStep::Launch launch) {
    return std::any_of(steps.begin(), steps.end(), [&](const SlurmStep& s) { return s.launch == launch; });
  };

  std::string s;
  s += "#!/bin/bash\n";
  s += "# Written by braid: one candidate's evaluation as Slurm job steps.\n";
  s += "cd " + shell_quote(job_dir.string()) + " || exit 1\n";
  s += "echo \"$SLURM_JOB_ID $(date +%s.%N)\" >> runs.log\n";
  s += "echo \"$SLURM_JOB_ID $(date +%s.%N)\" > started.tmp && mv started.tmp started\n";
  s += "mkdir -p logs results\n";
  s += "export BRAID_WORK_DIR=" + shell_quote(job_dir.string()) + "\n";
  s += "export BRAID_RESULTS_DIR=" + shell_quote(f.results.string()) + "\n";
  s += "export BRAID_METRICS_PATH=" + shell_quote((f.results / "metrics.json").string()) + "\n";
  s += "export BRAID_WORKLOAD_DIR=" + shell_quote(f.placeholders.at("workload_dir")) + "\n";
  s += "export BRAID_SEED=" + shell_quote(seed) + "\n";
  // The harness's rank bootstrap (device/include/braid/runtime.cuh) reads SLURM_PROCID,
  // SLURM_NTASKS and SLURM_LOCALID, and exchanges the ncclUniqueId through this folder.
  s += "export BRAID_EVAL_DIR=" + shell_quote(job_dir.string()) + "\n";
  for (const auto& [name, value] : kind_->env()) s += "export " + name + "=" + shell_quote(value) + "\n";
  s += "ended() {  # name, exit code, start\n";
  s += "  echo \"$2 $3 $(date +%s.%N)\" > \"$1.exit.tmp\" && mv \"$1.exit.tmp\" \"$1.exit\"\n";
  s += "  return $2\n";
  s += "}\n";
  if (uses(SlurmStep::Launch::Ranks)) {
    s += "step() {  # name, time limit, command...: on every rank, one log (lines prefixed with the rank)\n";
    s += "  local name=$1 limit=$2 t0; shift 2; t0=$(date +%s.%N)\n";
    s += "  BRAID_RUN_ID=\"slurm-$SLURM_JOB_ID-$name\" " + srun + (slurm_.ranks > 1 ? " --label" : "") +
         " --output=\"logs/$name.stdout\" --error=\"logs/$name.stderr\" timeout -k 2 \"$limit\" \"$@\"\n";
    s += "  ended \"$name\" $? \"$t0\"\n";
    s += "}\n";
  }
  if (uses(SlurmStep::Launch::RankLogs)) {
    s += "rank_step() {  # name, time limit, command...: on every rank, logs/<name>/rank<R>.*, srun's own in "
         "logs/<name>/srun.stderr\n";
    s += "  local name=$1 limit=$2 t0; shift 2; t0=$(date +%s.%N)\n";
    s += "  mkdir -p \"logs/$name\"\n";
    s += "  BRAID_RUN_ID=\"slurm-$SLURM_JOB_ID-$name\" " + srun +
         " --output=\"logs/$name/rank%t.stdout\" --error=\"logs/$name/rank%t.stderr\" timeout -k 2 \"$limit\" \"$@\" "
         "2> \"logs/$name/srun.stderr\"\n";
    s += "  ended \"$name\" $? \"$t0\"\n";
    s += "}\n";
  }
  if (uses(SlurmStep::Launch::Once)) {
    s += "once() {  # name, time limit, folder, command...: once, here on the allocation's first node\n";
    s += "  local name=$1 limit=$2 dir=$3 t0; shift 3; t0=$(date +%s.%N)\n";
    s += "  (cd \"$dir\" && BRAID_RUN_ID=\"slurm-$SLURM_JOB_ID-$name\" exec timeout -k 2 \"$limit\" \"$@\") "
         "> \"logs/$name.stdout\" 2> \"logs/$name.stderr\"\n";
    s += "  ended \"$name\" $? \"$t0\"\n";
    s += "}\n";
  }
  s += "rc=0\n";
  for (const SlurmStep& step : steps) {
    std::string line = step.launch == SlurmStep::Launch::Ranks      ? "step"
                       : step.launch == SlurmStep::Launch::RankLogs ? "rank_step"
                                                                    : "once";
    line += fmt::format(" {} {:g}", step.name, step.timeout_s);
    if (step.launch == SlurmStep::Launch::Once) line += " " + shell_quote(step.cwd.string());
    line += " " + quoted_words(step.argv) + "\n";
    if (step.gated) {
      // A run that failed or reported a wrong result is not benchmarked (braid reads verify/).
      s += "if [ $rc -eq 0 ] && [ -f verify/correct.json ] && ! grep -Eq '\"correct\"[[:space:]]*:[[:space:]]*false' "
           "verify/correct.json; then\n";
      s += "  " + line + "fi\n";
    } else {
      s += line + "rc=$?\n";
    }
    if (step.set_aside)
      s += "mkdir -p verify && for f in correct.json metrics.json; do [ -f \"results/$f\" ] && mv \"results/$f\" "
           "verify/; done\n";
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
  if (!ids.empty() && !client_.cancel(ids))
    log::warn("scancel of braid's Slurm jobs failed; cancel them by hand: scancel {}", fmt::join(ids, " "));
}

void SlurmEvaluator::mark(const Job& job, const std::string& state) {
  if (ledger_)
    ledger_->put({job.candidate_id, job.job_id, job.code_hash, job.folder.dir.string(), state, job.attempts,
                  job.submitted_at, now_s()});
}

bool SlurmEvaluator::submit(Job& job, EvalResult& result) {
  const fs::path dir = job.folder.dir;
  for (const char* stale : {"started", "done"}) fs::remove(dir / stale);
  for (const auto& step : job_steps(dir)) fs::remove(dir / (step.name + ".exit"));
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
    SlurmJobEntry e{job.candidate_id, job.job_id,   job.code_hash,    dir.string(),
                    "submitted",      job.attempts, job.submitted_at, job.submitted_at};
    ledger_->put(e);
  }
  log::info("slurm: {} submitted as job {}{}", job.candidate_id, job.job_id,
            job.attempts > 1 ? fmt::format(" (attempt {})", job.attempts) : "");
  return true;
}

// An earlier braid's job for the same candidate (same code and seed) is waited on instead of a new one.
bool SlurmEvaluator::adopt(Job& job, const fs::path& dir) {
  std::optional<SlurmJobEntry> earlier;
  if (ledger_) earlier = ledger_->find(job.candidate_id);
  if (!earlier || earlier->code_hash != job.code_hash || earlier->state == "cancelled" || !fs::exists(dir / "job.sh")) {
    if (earlier && earlier->state == "submitted") client_.cancel({earlier->job_id});  // another program under this id
    return false;
  }
  job.job_id = earlier->job_id;
  job.attempts = earlier->attempts;
  job.submitted_at = earlier->submitted_at;
  job.folder = job_folder(dir, "0");
  set_active(job.candidate_id, {job.job_id, "PENDING", ""});
  log::info("slurm: {} found again as job {} (submitted by an earlier braid)", job.candidate_id, job.job_id);
  return true;
}

// A fresh job folder, the kind's build here, the batch script and its submission; false with
// the failure recorded (and the evaluation's work folder holding it) when any of them fails.
bool SlurmEvaluator::build_and_submit(Job& job, const EvalRequest& request, const JobObserver& jobs,
                                      EvalResult& result) {
  const fs::path dir = job_dir_for(request);
  std::error_code ec;
  fs::remove_all(dir, ec);
  EvalRequest local = request;
  local.work_dir = dir;
  job.folder = prepare_work_folder(local, kind_->workload_dir(), kind_->program_filename());
  auto fail = [&](bool keep_logs) {
    WorkFolder out = prepare_work_folder(request, kind_->workload_dir(), kind_->program_filename());
    if (keep_logs) copy_tree(dir / "logs", out.logs);
    write_failure_contract(out, result);
    return false;
  };
  // Only what needs the cluster goes to it.
  if (!kind_->build(job.folder, local, jobs, result)) return fail(true);
  write_file_atomic(dir / "job.sh", job_script(dir, std::to_string(request.seed)));
  fs::permissions(dir / "job.sh", fs::perms::owner_exec, fs::perm_options::add);
  if (cancelled_) {
    record_failure(result, FailureKind::RunFailed, "slurm: not submitted, braid is stopping");
    return fail(false);
  }
  return submit(job, result) || fail(false);
}

EvalResult SlurmEvaluator::evaluate(const EvalRequest& request, const JobObserver& jobs) {
  EvalResult result;
  Job job;
  job.candidate_id = request.candidate_id.empty() ? hash_hex(request.code, request.seed) : request.candidate_id;
  job.code_hash = hash_hex(request.code, request.seed);
  if (!adopt(job, job_dir_for(request)) && !build_and_submit(job, request, jobs, result)) return result;
  EvalResult ran = wait_and_collect(job, request);
  ran.timings.update(result.timings);
  if (ran.private_metrics.is_object())  // what the build here found (build_cached)
    for (const auto& [key, value] : result.private_metrics.items()) ran.private_metrics.emplace(key, value);
  forget_active(job.candidate_id);
  return ran;
}

// Submits the job again when it was not the candidate's fault; false when it was given up
// (max_requeues) or sbatch refused, with the failure recorded.
bool SlurmEvaluator::requeue(Job& job, const std::string& why, EvalResult& result) {
  if (job.attempts > slurm_.max_requeues) {
    record_failure(result, FailureKind::RunFailed,
                   fmt::format("slurm job {} {}; not scored, and given up after {} submission(s) (max_requeues {})",
                               job.job_id, why, job.attempts, slurm_.max_requeues));
    return false;
  }
  log::warn("slurm job {} of {} {}: not scored, submitting it again", job.job_id, job.candidate_id, why);
  return submit(job, result);
}

// One look at the job: its script's end marker, and (at most every 2 s) Slurm's view of it.
std::optional<SlurmEvaluator::WaitEnd> SlurmEvaluator::poll(Job& job, Poll& p, EvalResult& result) {
  using How = WaitEnd::How;
  const fs::path dir = job.folder.dir;
  if (fs::exists(dir / "done")) return WaitEnd{How::ScriptDone, ""};
  const double t = now_s();
  if (t - p.last_query < std::max(2.0, slurm_.poll_interval_s)) return std::nullopt;
  p.last_query = t;
  auto st = client_.query(job.job_id);
  if (!st) return std::nullopt;  // Slurm could not be asked: look again later
  if (st->known) set_active(job.candidate_id, {job.job_id, st->state, st->reason});
  const SlurmOutcome outcome = st->known ? classify_slurm_state(st->state) : SlurmOutcome::Requeue;
  if (outcome == SlurmOutcome::Waiting) {
    p.end_marker_checks = 0;
    return std::nullopt;
  }
  if (fs::exists(dir / "done")) return WaitEnd{How::ScriptDone, ""};
  // The script's last file may reach a shared file system after Slurm saw the end.
  if (outcome == SlurmOutcome::Ended && ++p.end_marker_checks < 3) return std::nullopt;
  if (outcome == SlurmOutcome::Requeue) {
    const std::string why = st->known ? "ended " + st->state : "is no longer known to Slurm and did not finish";
    if (!requeue(job, why, result)) return WaitEnd{How::GaveUp, ""};
    p = Poll{};
    return std::nullopt;
  }
  return WaitEnd{How::EndedEarly, st->state};
}

SlurmEvaluator::WaitEnd SlurmEvaluator::wait_for_end(Job& job, EvalResult& result) {
  Poll p;
  while (true) {
    if (cancelled_) return {WaitEnd::How::Cancelled, ""};
    if (auto end = poll(job, p, result)) return *end;
    std::this_thread::sleep_for(std::chrono::duration<double>(slurm_.poll_interval_s));
  }
}

// How long Slurm kept the job waiting and braid took to notice its end, and each step's time
// as the script measured it.
void SlurmEvaluator::record_job_timings(const Job& job, double noticed_at, EvalResult& result) const {
  const fs::path dir = job.folder.dir;
  if (auto started = read_time(dir / "started", true))
    result.timings["slurm_queue"] = std::max(0.0, *started - job.submitted_at);
  if (auto done = read_time(dir / "done", false)) result.timings["slurm_collect"] = std::max(0.0, noticed_at - *done);
  result.timings["slurm_job"] = std::stod(job.job_id.substr(0, job.job_id.find('_')));
  result.timings["slurm_attempts"] = job.attempts;
  for (const auto& step : job_steps(dir))
    if (auto end = read_step_end(dir / (step.name + ".exit"))) result.timings[step.timing] = end->wall_s();
}

// Slurm ended the job before its script finished (TIMEOUT, OUT_OF_MEMORY, FAILED without the
// end marker): named with the step it was in.
void SlurmEvaluator::classify_early_end(const Job& job, const std::string& state, EvalResult& result) const {
  const fs::path dir = job.folder.dir;
  const std::string where = fmt::format("slurm job {}", job.job_id);
  std::string in_step = "the end";
  for (const auto& step : job_steps(dir)) {
    const bool reached = !step.gated || fs::exists(dir / "verify/correct.json");
    if (reached && !fs::exists(dir / (step.name + ".exit"))) {
      in_step = step.name;
      break;
    }
  }
  if (state == "TIMEOUT") {
    record_failure(result, FailureKind::Timeout,
                   fmt::format("{} hit its time limit ({}) during {}", where, "--time=" + time_limit(), in_step));
  } else if (state == "OUT_OF_MEMORY") {
    record_failure(result, FailureKind::RunFailed,
                   fmt::format("{} ran out of memory (OUT_OF_MEMORY) during {}", where, in_step));
  } else {
    std::string text = fmt::format("{} ended {} before its script finished", where, state);
    if (auto tail = log_tail(dir / "slurm.out", 1024); !tail.empty()) text += "\n" + tail;
    record_failure(result, FailureKind::RunFailed, text);
  }
}

// The job's results and logs into the evaluation's own work folder, as a local evaluation leaves them.
EvalResult SlurmEvaluator::deliver(const Job& job, const EvalRequest& request, EvalResult result) const {
  const fs::path dir = job.folder.dir;
  WorkFolder out = prepare_work_folder(request, kind_->workload_dir(), kind_->program_filename());
  copy_tree(dir / "logs", out.logs);
  std::error_code ec;
  fs::copy_file(dir / "slurm.out", out.logs / "slurm.out", fs::copy_options::overwrite_existing, ec);
  if (result.failure == FailureKind::Ok) copy_tree(dir / "results", out.results);
  else write_failure_contract(out, result);
  return result;
}

EvalResult SlurmEvaluator::wait_and_collect(Job& job, const EvalRequest& request) {
  EvalResult result;
  result.level_reached = kind_->job_level();
  const WaitEnd end = wait_for_end(job, result);
  if (end.how == WaitEnd::How::Cancelled) {
    client_.cancel({job.job_id});
    mark(job, "cancelled");
    record_failure(result, FailureKind::RunFailed, "slurm: job " + job.job_id + " cancelled, braid is stopping");
    return result;
  }
  mark(job, "collected");
  record_job_timings(job, now_s(), result);
  if (end.how == WaitEnd::How::EndedEarly) classify_early_end(job, end.slurm_state, result);
  else if (end.how == WaitEnd::How::ScriptDone)
    kind_->read_steps(job.folder.dir, fmt::format("slurm job {}", job.job_id), result);
  return deliver(job, request, std::move(result));  // GaveUp: the failure requeue() recorded
}

}  // namespace braid
