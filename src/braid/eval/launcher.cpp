#include "braid/eval/launcher.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <regex>
#include <set>
#include <thread>

#include "braid/eval/diagnostics.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/hash.hpp"
#include "braid/util/subprocess.hpp"

namespace braid {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string join_gpus(const std::vector<int>& gpus) {
  std::string out;
  for (int g : gpus) out += (out.empty() ? "" : ",") + std::to_string(g);
  return out;
}

// Names the ncclUniqueId file (runtime.cuh): unique per launch, even across braids sharing a folder.
std::string new_run_id(const LaunchSpec& spec) {
  static std::atomic<unsigned> sequence{0};
  return fmt::format("braid{}_{}_{}", ::getpid(), sequence++,
                     hash_hex(spec.log_dir.string() + std::to_string(Clock::now().time_since_epoch().count())).substr(0, 8));
}

std::map<std::string, std::string> common_env(const LaunchSpec& spec, const std::string& run_id) {
  std::map<std::string, std::string> env = spec.env;
  env["BRAID_EVAL_DIR"] = (spec.eval_dir.empty() ? spec.log_dir : spec.eval_dir).string();
  env["BRAID_RUN_ID"] = run_id;
  if (!spec.gpus.empty()) env["CUDA_VISIBLE_DEVICES"] = join_gpus(spec.gpus);
  if (spec.sandbox.enabled) {
    // The user's home is hidden from sandboxed ranks; caches (CUDA's, OpenMPI's) go here.
    env["HOME"] = env["BRAID_EVAL_DIR"];
    env["TMPDIR"] = env["BRAID_EVAL_DIR"];
  }
  return env;
}

std::string cap_text(const std::string& text, std::size_t cap) {
  if (text.size() <= 2 * cap) return text;
  return text.substr(0, cap) + fmt::format("\n[... {} bytes omitted ...]\n", text.size() - 2 * cap) + text.substr(text.size() - cap);
}

std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string rest = path ? path : "/usr/local/bin:/usr/bin:/bin";
  std::size_t pos = 0;
  while (pos <= rest.size()) {
    std::size_t colon = rest.find(':', pos);
    std::string dir = rest.substr(pos, colon == std::string::npos ? std::string::npos : colon - pos);
    if (!dir.empty() && ::access((dir + "/" + name).c_str(), X_OK) == 0) return dir + "/" + name;
    if (colon == std::string::npos) break;
    pos = colon + 1;
  }
  return {};
}

LaunchResult launch_local(const LaunchSpec& spec, const JobObserver& jobs) {
  std::mutex observe;  // the ranks start and end on their own threads
  const JobObserver observer = one_at_a_time(jobs, observe);
  const auto t0 = Clock::now();
  const int n = spec.ranks;
  const std::string run_id = new_run_id(spec);
  LaunchResult result;
  result.ranks.resize(static_cast<std::size_t>(n));
  std::vector<SubprocessResult> runs(static_cast<std::size_t>(n));
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::atomic<bool> stop{false};
  std::mutex mutex;
  std::condition_variable changed;
  int done = 0;
  std::optional<Clock::time_point> first_failure;

  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      SubprocessOptions options;
      options.argv = spec.argv;
      options.cwd = spec.cwd;
      options.env_add = common_env(spec, run_id);
      options.env_add["BRAID_RANK"] = std::to_string(r);
      options.env_add["BRAID_WORLD_SIZE"] = std::to_string(n);
      options.env_add["BRAID_LOCAL_RANK"] = std::to_string(r);
      options.candidate = true;  // environment from the allowlist; setsid escapees killed (util/subprocess.hpp)
      options.sandbox = spec.sandbox;
      if (!spec.verdict_token.empty()) {
        options.result_channel = true;
        options.channel_greeting = spec.verdict_token + "\n";
      }
      options.timeout_s = spec.timeout_s;
      options.kill_grace_s = spec.kill_grace_s;
      options.output_cap_bytes = spec.output_cap_bytes;
      options.stdout_path = spec.log_dir / fmt::format("rank{}.stdout", r);
      options.stderr_path = spec.log_dir / fmt::format("rank{}.stderr", r);
      options.stop = &stop;
      const std::string what = fmt::format("{} rank {}", spec.name, r);
      long pgid = 0;
      if (observer)
        options.on_start = [&](long started) {
          pgid = started;
          observer(started, true, what);
        };
      SubprocessResult run;
      try {
        run = run_subprocess(options);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
      if (observer && pgid != 0) observer(pgid, false, what);
      std::lock_guard lock(mutex);
      runs[static_cast<std::size_t>(r)] = std::move(run);
      auto& outcome = result.ranks[static_cast<std::size_t>(r)];
      const auto& ran = runs[static_cast<std::size_t>(r)];
      outcome.rank = r;
      outcome.known = ran.started;
      outcome.exit_code = ran.exit_code;
      outcome.term_signal = ran.term_signal;
      outcome.timed_out = ran.timed_out;
      outcome.stopped = ran.stopped;
      outcome.end_s = seconds_since(t0);
      outcome.stdout_text = ran.stdout_text;
      outcome.stderr_text = ran.started ? ran.stderr_text : ran.start_error;
      outcome.channel_text = ran.channel_text;
      if ((outcome.failed() || !ran.started) && !first_failure) first_failure = Clock::now();
      ++done;
      changed.notify_all();
    });
  }
  {
    std::unique_lock lock(mutex);
    while (done < n) {
      changed.wait_for(lock, std::chrono::milliseconds(50));
      // A dead rank leaves its peers waiting on it (NCCL init, barriers): give them a moment
      // to notice the harness's failure announcement, then stop them.
      if (first_failure && Clock::now() - *first_failure >= std::chrono::duration<double>(spec.peer_grace_s)) stop = true;
    }
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);

  result.wall_s = seconds_since(t0);
  result.started = true;
  result.sandbox_level = runs.front().sandbox_level.empty() ? "off" : runs.front().sandbox_level;
  for (int r = 0; r < n; ++r) {
    const auto& ran = runs[static_cast<std::size_t>(r)];
    if (!ran.started) {
      result.started = false;
      result.start_error = fmt::format("rank {}: {}", r, ran.describe_end());
    }
    if (ran.timed_out) result.timed_out = true;
  }
  result.launcher_exit_code = result.succeeded() ? 0 : 1;
  return result;
}

// mpirun: "Process name: [[7623,1],1]\n  Exit code:    3" and "process rank 1 with PID 0 on
// node vm exited on signal 11"; srun: "task 1: Exited with exit code 3", "task 1: Segmentation fault".
void parse_launcher_messages(const std::string& text, LaunchResult& result) {
  auto at = [&](int rank) -> RankOutcome* {
    if (rank < 0 || rank >= static_cast<int>(result.ranks.size())) return nullptr;
    return &result.ranks[static_cast<std::size_t>(rank)];
  };
  static const std::regex exit_re(R"(Process name: \[\[\d+,\d+\],(\d+)\]\s+Exit code:\s+(\d+))");
  static const std::regex signal_re(R"(process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+))");
  static const std::regex srun_exit_re(R"(task (\d+): Exited with exit code (\d+))");
  static const std::regex srun_signal_re(R"(task (\d+): (Segmentation fault|Killed|Aborted|Bus error|Floating point exception))");
  for (std::sregex_iterator it(text.begin(), text.end(), exit_re), end; it != end; ++it)
    if (auto* o = at(std::stoi((*it)[1]))) o->known = true, o->exit_code = std::stoi((*it)[2]), o->stopped = false;
  for (std::sregex_iterator it(text.begin(), text.end(), srun_exit_re), end; it != end; ++it)
    if (auto* o = at(std::stoi((*it)[1]))) o->known = true, o->exit_code = std::stoi((*it)[2]), o->stopped = false;
  for (std::sregex_iterator it(text.begin(), text.end(), signal_re), end; it != end; ++it)
    if (auto* o = at(std::stoi((*it)[1]))) o->known = true, o->term_signal = std::stoi((*it)[2]), o->stopped = false;
  for (std::sregex_iterator it(text.begin(), text.end(), srun_signal_re), end; it != end; ++it) {
    if (auto* o = at(std::stoi((*it)[1]))) {
      const std::string what = (*it)[2];
      o->known = true;
      o->stopped = false;
      o->term_signal = what == "Segmentation fault" ? SIGSEGV : what == "Killed" ? SIGKILL : what == "Aborted" ? SIGABRT
                       : what == "Bus error" ? SIGBUS : SIGFPE;
    }
  }
}

std::filesystem::path mpirun_output_root(const LaunchSpec& spec) { return spec.log_dir / "mpirun"; }

// OpenMPI writes <root>/<job>/rank.<R>/stdout; srun writes the names we gave it.
std::optional<std::string> rank_stream(const LaunchSpec& spec, int rank, const char* stream) {
  if (spec.kind == LauncherKind::Srun) return try_read_file(spec.log_dir / fmt::format("rank{}.{}", rank, stream));
  std::error_code ec;
  for (const auto& job : std::filesystem::directory_iterator(mpirun_output_root(spec), ec)) {
    auto text = try_read_file(job.path() / fmt::format("rank.{}", rank) / stream);
    if (text) return text;
  }
  return std::nullopt;
}

// The ranks' output from their files and how each ended: all 0 when the launch succeeded; at a
// timeout those still alive timed out, the rest stopped;
// otherwise what the launcher's messages say, the rest stopped.
void read_rank_ends(const LaunchSpec& spec, bool succeeded, const std::set<int>& alive_at_deadline, LaunchResult& result) {
  for (auto& o : result.ranks) {
    o.stdout_text = cap_text(rank_stream(spec, o.rank, "stdout").value_or(""), spec.output_cap_bytes);
    o.stderr_text = cap_text(rank_stream(spec, o.rank, "stderr").value_or(""), spec.output_cap_bytes);
    if (spec.kind == LauncherKind::Mpirun) {
      write_file_atomic(spec.log_dir / fmt::format("rank{}.stdout", o.rank), o.stdout_text);
      write_file_atomic(spec.log_dir / fmt::format("rank{}.stderr", o.rank), o.stderr_text);
    }
    o.end_s = result.wall_s;
  }
  if (succeeded) {
    for (auto& o : result.ranks) o.known = true, o.exit_code = 0;
    return;
  }
  if (result.timed_out) {
    for (auto& o : result.ranks) {
      if (alive_at_deadline.count(o.rank)) o.known = true, o.timed_out = true;
      else o.stopped = true;
    }
    return;
  }
  // The launcher ended the others after the first failure; its messages name that rank.
  for (auto& o : result.ranks) o.stopped = true;
  parse_launcher_messages(result.launcher_output, result);
}

// A fresh folder under /tmp for the length of a launch (empty path when not wanted or refused).
struct ScratchTmp {
  std::filesystem::path path;
  explicit ScratchTmp(bool wanted) {
    if (!wanted) return;
    char name[] = "/tmp/braid-mpi-XXXXXX";
    if (::mkdtemp(name) != nullptr) path = name;
  }
  ~ScratchTmp() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove_all(path, ec);
  }
  ScratchTmp(const ScratchTmp&) = delete;
  ScratchTmp& operator=(const ScratchTmp&) = delete;
};

LaunchResult launch_with_launcher(const LaunchSpec& spec, const JobObserver& jobs) {
  std::mutex observe;  // the launcher's group and its ranks (seen by a watcher thread)
  const JobObserver observer = one_at_a_time(jobs, observe);
  const auto t0 = Clock::now();
  LaunchResult result;
  result.ranks.resize(static_cast<std::size_t>(spec.ranks));
  for (int r = 0; r < spec.ranks; ++r) result.ranks[static_cast<std::size_t>(r)].rank = r;
  const std::string run_id = new_run_id(spec);

  SubprocessOptions options;
  options.argv = launcher_argv(spec);
  options.cwd = spec.cwd;
  options.env_add = common_env(spec, run_id);
  options.candidate = true;
  // mpirun and its ranks share one sandbox; OpenMPI's session folder holds Unix sockets, whose
  // paths must stay short, so its TMPDIR is a folder of its own under /tmp, writable.
  const ScratchTmp mpi_tmp(spec.kind == LauncherKind::Mpirun && spec.sandbox.enabled);
  if (spec.kind == LauncherKind::Mpirun) {
    options.sandbox = spec.sandbox;
    // Landlock's grant of a process's own /proc entry (CUDA names its threads there) is resolved
    // when the layer is applied: applied to mpirun, it would not cover the ranks it forks.
    options.sandbox.no_landlock = "mpirun: the ranks' own /proc entries cannot be granted";
    if (!mpi_tmp.path.empty()) {
      options.sandbox.writable.push_back(mpi_tmp.path);
      options.env_add["TMPDIR"] = mpi_tmp.path.string();
    }
  }
  options.timeout_s = spec.timeout_s;
  // mpirun needs a moment after SIGTERM to take its ranks down.
  options.kill_grace_s = std::max(spec.kill_grace_s, 3.0);
  options.output_cap_bytes = spec.output_cap_bytes;
  options.stdout_path = spec.log_dir / fmt::format("{}.stdout", to_string(spec.kind));
  options.stderr_path = spec.log_dir / fmt::format("{}.stderr", to_string(spec.kind));

  std::atomic<long> root{0};
  std::atomic<bool> finished{false};
  const std::string what = fmt::format("{} {}", spec.name, to_string(spec.kind));
  options.on_start = [&](long pgid) {
    root = pgid;
    if (observer) observer(pgid, true, what);
  };

  // Watches the ranks appear (their groups are reported so a restarted braid can end them) and
  // notes which were still alive when the time limit struck.
  std::mutex seen_mutex;
  std::map<long, RankProcess> seen;
  std::set<int> alive_at_deadline;
  bool deadline_noted = false;
  std::thread watcher([&] {
    while (!finished) {
      const long root_pid = root;
      // srun's ranks run under slurmstepd, not below srun: nothing to watch here.
      if (root_pid != 0 && spec.kind == LauncherKind::Mpirun) {
        auto procs = find_rank_processes(root_pid);
        std::lock_guard lock(seen_mutex);
        for (const auto& p : procs) {
          if (p.rank < 0 || seen.count(p.pid)) continue;
          seen[p.pid] = p;
          if (observer && p.pgid != root_pid) observer(p.pgid, true, fmt::format("{} rank {}", spec.name, p.rank));
        }
        if (!deadline_noted && spec.timeout_s > 0 && seconds_since(t0) >= spec.timeout_s) {
          deadline_noted = true;
          for (const auto& p : procs)
            if (p.rank >= 0) alive_at_deadline.insert(p.rank);
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  SubprocessResult run;
  std::exception_ptr error;
  try {
    run = run_subprocess(options);
  } catch (...) {
    error = std::current_exception();
  }
  finished = true;
  watcher.join();
  // Whatever outlived mpirun (it was killed before it could end its ranks) is ended here.
  for (const auto& [pid, p] : seen) {
    if (p.pgid != run.pgid) kill_process_group_if_alive(p.pgid, p.start_marker);
    if (observer && p.pgid != run.pgid) observer(p.pgid, false, fmt::format("{} rank {}", spec.name, p.rank));
  }
  if (observer && run.pgid != 0) observer(run.pgid, false, what);
  if (error) std::rethrow_exception(error);

  result.wall_s = seconds_since(t0);
  result.started = run.started;
  result.start_error = run.started ? "" : run.describe_end();
  result.timed_out = run.timed_out;
  result.launcher_exit_code = run.exit_code;
  result.launcher_signal = run.term_signal;
  result.launcher_output = run.stdout_text.empty() ? run.stderr_text : run.stderr_text + "\n" + run.stdout_text;
  result.sandbox_level = spec.kind == LauncherKind::Srun && spec.sandbox.enabled
                             ? "off (srun: the ranks run under Slurm's confinement, not braid's sandbox)"
                             : (run.sandbox_level.empty() ? "off" : run.sandbox_level);
  if (!run.started) return result;

  std::lock_guard lock(seen_mutex);
  read_rank_ends(spec, run.succeeded(), alive_at_deadline, result);
  return result;
}

}  // namespace

std::string to_string(LauncherKind kind) {
  switch (kind) {
    case LauncherKind::Local: return "local";
    case LauncherKind::Mpirun: return "mpirun";
    case LauncherKind::Srun: return "srun";
  }
  return "local";
}

std::optional<LauncherKind> parse_launcher_kind(const std::string& name) {
  if (name == "local") return LauncherKind::Local;
  if (name == "mpirun") return LauncherKind::Mpirun;
  if (name == "srun") return LauncherKind::Srun;
  return std::nullopt;
}

std::string RankOutcome::describe() const {
  if (timed_out) return fmt::format("rank {}: still running at the time limit", rank);
  if (stopped) return fmt::format("rank {}: stopped after another rank failed", rank);
  if (!known) return fmt::format("rank {}: end unknown", rank);
  if (term_signal != 0)
    return fmt::format("rank {}: killed by signal {} ({})", rank, signal_name(term_signal), ::strsignal(term_signal));
  return fmt::format("rank {}: exit code {}", rank, exit_code);
}

bool LaunchResult::succeeded() const {
  if (!started || timed_out) return false;
  for (const auto& r : ranks)
    if (!r.known || r.exit_code != 0 || r.term_signal != 0 || r.stopped) return false;
  return true;
}

std::vector<int> LaunchResult::ranks_still_running() const {
  std::vector<int> out;
  for (const auto& r : ranks)
    if (r.timed_out) out.push_back(r.rank);
  return out;
}

std::optional<int> LaunchResult::first_failed_rank() const {
  // mpirun/srun messages carry no times (every rank ends at the launch's end): among ranks that
  // ended together, one that failed on its own (an exit code, a crash) comes before one the
  // launcher ended with SIGTERM or SIGKILL after that failure.
  auto ended_by_launcher = [](const RankOutcome& r) {
    return r.exit_code <= 0 && (r.term_signal == SIGTERM || r.term_signal == SIGKILL);
  };
  auto before = [&](const RankOutcome& a, const RankOutcome& b) {
    if (a.end_s != b.end_s) return a.end_s < b.end_s;
    return !ended_by_launcher(a) && ended_by_launcher(b);
  };
  std::optional<int> first;
  for (const auto& r : ranks) {
    if (!r.failed()) continue;
    if (!first || before(r, ranks[static_cast<std::size_t>(*first)])) first = r.rank;
  }
  return first;
}

std::string LaunchResult::describe_failure(const std::string& step) const {
  if (!started) return step + ": could not start: " + start_error;
  std::string text;
  const RankOutcome* focus = nullptr;
  if (timed_out) {
    auto running = ranks_still_running();
    std::string list;
    for (int r : running) list += (list.empty() ? "" : ", ") + std::to_string(r);
    text = fmt::format("{} timed out after {:.1f} s; {}; every rank's process group was killed", step, wall_s,
                       running.empty() ? std::string("no rank was identified as still running")
                                       : (running.size() == 1 ? "rank " : "ranks ") + list + " still running");
    if (!running.empty()) focus = &ranks[static_cast<std::size_t>(running.front())];
  } else if (auto first = first_failed_rank()) {
    focus = &ranks[static_cast<std::size_t>(*first)];
    text = step + ": " + focus->describe();
    for (const auto& r : ranks)
      if (r.rank != focus->rank && r.failed()) text += "; then " + r.describe();
  } else {
    text = fmt::format("{}: {} ended with {}", step, launcher_exit_code >= 0 ? "launcher" : "run",
                       launcher_signal != 0 ? "signal " + signal_name(launcher_signal) : "exit code " + std::to_string(launcher_exit_code));
  }
  if (focus) {
    std::string tail = tail_text(focus->stderr_text, 1536);
    if (tail.find_first_not_of(" \n\t") == std::string::npos) tail = tail_text(focus->stdout_text, 1024);
    if (tail.find_first_not_of(" \n\t") != std::string::npos) text += fmt::format("\nrank {} stderr:\n{}", focus->rank, tail);
  } else if (!launcher_output.empty()) {
    text += "\n" + tail_text(launcher_output, 1536);
  }
  return text;
}

std::vector<std::string> launcher_argv(const LaunchSpec& spec) {
  std::vector<std::string> argv;
  switch (spec.kind) {
    case LauncherKind::Local:
      return spec.argv;
    case LauncherKind::Mpirun: {
      argv = {"mpirun", "-np", std::to_string(spec.ranks), "--bind-to", "none", "--oversubscribe", "--output-filename",
              mpirun_output_root(spec).string()};
      // OpenMPI refuses root unless told; containers commonly run as root.
      if (::geteuid() == 0) argv.push_back("--allow-run-as-root");
      std::set<std::string> names;
      for (const auto& [name, value] : spec.env) names.insert(name);
      for (const char* name : {"BRAID_EVAL_DIR", "BRAID_RUN_ID", "CUDA_VISIBLE_DEVICES"}) names.insert(name);
      if (spec.gpus.empty()) names.erase("CUDA_VISIBLE_DEVICES");
      for (const auto& name : names) argv.insert(argv.end(), {"-x", name});
      argv.insert(argv.end(), spec.launcher_args.begin(), spec.launcher_args.end());
      // Ranks die with mpirun even when it is SIGKILLed (OpenMPI puts them in groups of their own).
      static const std::string setpriv = find_on_path("setpriv");
      if (!setpriv.empty()) argv.insert(argv.end(), {setpriv, "--pdeathsig", "KILL", "--"});
      break;
    }
    case LauncherKind::Srun:
      argv = {"srun", "--ntasks=" + std::to_string(spec.ranks), "--kill-on-bad-exit=1", "--export=ALL",
              "--output=" + (spec.log_dir / "rank%t.stdout").string(), "--error=" + (spec.log_dir / "rank%t.stderr").string()};
      if (!spec.gpus.empty() || spec.gpus_per_rank > 1) argv.push_back("--gpus-per-task=" + std::to_string(std::max(1, spec.gpus_per_rank)));
      argv.insert(argv.end(), spec.launcher_args.begin(), spec.launcher_args.end());
      break;
  }
  argv.insert(argv.end(), spec.argv.begin(), spec.argv.end());
  return argv;
}

LaunchResult launch_ranks(const LaunchSpec& spec, const JobObserver& jobs) {
  if (spec.ranks < 1) throw SystemError("launch of " + spec.name + ": ranks must be at least 1");
  if (spec.argv.empty()) throw SystemError("launch of " + spec.name + ": no program");
  if (spec.log_dir.empty()) throw SystemError("launch of " + spec.name + ": no log folder");
  std::filesystem::create_directories(spec.log_dir);
  if (spec.kind == LauncherKind::Local) return launch_local(spec, jobs);
  return launch_with_launcher(spec, jobs);
}

LaunchResult srun_step_result(const LaunchSpec& spec, const SrunStepEnd& end) {
  LaunchResult result;
  result.ranks.resize(static_cast<std::size_t>(spec.ranks));
  for (int r = 0; r < spec.ranks; ++r) result.ranks[static_cast<std::size_t>(r)].rank = r;
  result.started = end.started;
  result.start_error = end.started ? "" : "srun did not start the step";
  result.timed_out = end.timed_out;
  result.wall_s = end.wall_s;
  result.launcher_exit_code = end.exit_code;
  result.launcher_output = end.srun_messages;
  if (!end.started) return result;
  // The time limit runs inside each task (timeout(1) exits 124): srun's messages name the ranks
  // that hit it; the others were ended by --kill-on-bad-exit.
  std::set<int> alive_at_deadline;
  if (end.timed_out) {
    LaunchResult named = result;
    parse_launcher_messages(end.srun_messages, named);
    for (const auto& o : named.ranks)
      if (o.known && (o.exit_code == 124 || o.exit_code == 137)) alive_at_deadline.insert(o.rank);
    if (alive_at_deadline.empty())  // srun said nothing: every rank counts as still running
      for (int r = 0; r < spec.ranks; ++r) alive_at_deadline.insert(r);
  }
  read_rank_ends(spec, end.exit_code == 0 && !end.timed_out, alive_at_deadline, result);
  return result;
}

std::vector<RankProcess> find_rank_processes(long root_pid) {
  // Parent links of every process, then the descendants of root_pid.
  std::map<long, std::vector<long>> children;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    auto stat = try_read_file(entry.path() / "stat");
    if (!stat) continue;
    auto close = stat->rfind(')');
    if (close == std::string::npos) continue;
    long ppid = 0;
    char state = 0;
    if (std::sscanf(stat->c_str() + close + 1, " %c %ld", &state, &ppid) != 2) continue;
    children[ppid].push_back(std::stol(name));
  }
  std::vector<RankProcess> out;
  std::vector<long> stack = {root_pid};
  std::set<long> visited;
  while (!stack.empty()) {
    long pid = stack.back();
    stack.pop_back();
    if (!visited.insert(pid).second) continue;
    for (long child : children[pid]) stack.push_back(child);
    if (pid == root_pid) continue;
    RankProcess p;
    p.pid = pid;
    p.pgid = ::getpgid(static_cast<pid_t>(pid));
    if (p.pgid <= 0) continue;
    p.start_marker = process_start_marker(p.pgid);
    if (auto env = try_read_file("/proc/" + std::to_string(pid) + "/environ")) {
      std::size_t start = 0;
      int rank = -1;
      while (start < env->size()) {
        std::size_t end = env->find('\0', start);
        if (end == std::string::npos) end = env->size();
        std::string_view entry(env->data() + start, end - start);
        for (std::string_view var : {"OMPI_COMM_WORLD_RANK=", "SLURM_PROCID=", "BRAID_RANK="})
          if (entry.substr(0, var.size()) == var && rank < 0) rank = std::atoi(std::string(entry.substr(var.size())).c_str());
        start = end + 1;
      }
      p.rank = rank;
    }
    out.push_back(p);
  }
  return out;
}

}  // namespace braid
