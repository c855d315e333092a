#include "braid/eval/work_folder.hpp"

#include <fmt/format.h>

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "braid/eval/diagnostics.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"

namespace braid {

const std::vector<std::string>& known_placeholders() {
  static const std::vector<std::string> names = {"program", "artifact",    "work_dir", "workload_dir",
                                                 "seed",    "results_dir", "driver"};
  return names;
}

WorkFolder prepare_work_folder(const EvalRequest& request, const std::filesystem::path& workload_dir,
                               const std::string& program_filename) {
  if (request.work_dir.empty()) throw SystemError("evaluation of " + request.candidate_id + " has no work folder");
  WorkFolder f;
  f.dir = std::filesystem::absolute(request.work_dir);
  f.program = f.dir / program_filename;
  f.artifact = f.dir / (std::filesystem::path(program_filename).stem().string() + ".out");
  f.results = f.dir / "results";
  f.logs = f.dir / "logs";
  std::filesystem::create_directories(f.results);
  std::filesystem::create_directories(f.logs);
  // A folder reused by a retried evaluation must not offer the previous attempt's verdict.
  std::filesystem::remove(f.results / "correct.json");
  std::filesystem::remove(f.results / "metrics.json");
  write_file_atomic(f.program, request.code);
  f.placeholders = {
      {"program", f.program.string()},        {"artifact", f.artifact.string()},
      {"work_dir", f.dir.string()},           {"workload_dir", std::filesystem::absolute(workload_dir).string()},
      {"seed", std::to_string(request.seed)}, {"results_dir", f.results.string()}};
  return f;
}

SandboxSettings SandboxSettings::from_json(const json& section) {
  SandboxSettings s;
  s.enabled = section.value("sandbox", s.enabled);
  s.max_processes = section.value("max_processes", s.max_processes);
  s.network = section.value("network", s.network);
  return s;
}

SandboxPolicy candidate_sandbox(const SandboxSettings& settings, const WorkFolder& folder, std::size_t memory_bytes) {
  return candidate_sandbox(settings, folder.dir, folder.placeholders.at("workload_dir"), memory_bytes,
                           SandboxProfile::Cpu);
}

SandboxPolicy candidate_sandbox(const SandboxSettings& settings, const std::filesystem::path& work_dir,
                                const std::filesystem::path& workload_dir, std::size_t memory_bytes,
                                SandboxProfile profile) {
  SandboxPolicy p;
  p.enabled = settings.enabled;
  p.profile = profile;
  p.scratch = work_dir;
  p.network = settings.network;
  p.namespaces = settings.namespaces;
  p.memory_bytes = memory_bytes;
  p.max_processes = std::max(0L, settings.max_processes);
  // The folder of the other candidates, and the run folder with evolution.db above it
  // (results/gen_3/..., results/remeasure/<label>/...).
  // A work folder inside the workload folder (tests, hand-made layouts) leaves the workload visible.
  const std::filesystem::path workload = std::filesystem::absolute(workload_dir).lexically_normal();
  if (work_dir.parent_path().lexically_normal() != workload) p.hidden.push_back(work_dir.parent_path());
  std::error_code ec;
  for (auto up = work_dir.parent_path(); up.has_relative_path(); up = up.parent_path())
    if (std::filesystem::exists(up / "evolution.db", ec)) {
      p.hidden.push_back(up);
      break;
    }
  const char* home_var = std::getenv("HOME");
  const std::filesystem::path home = home_var && *home_var ? std::filesystem::path(home_var).lexically_normal() : "";
  if (!home.empty()) p.hidden.push_back(home);
  p.read_only.emplace_back(workload_dir);
  // Toolchains installed under the home stay usable: the whole top folder of one (~/.pyenv,
  // ~/miniconda3, ~/.local), as their launchers reach beyond the folder on PATH.
  auto toolchain = [&](const std::filesystem::path& dir) {
    const auto rel = dir.lexically_normal().lexically_relative(home);
    if (home.empty() || rel.empty() || *rel.begin() == ".." || *rel.begin() == ".") return dir;
    return home / *rel.begin();
  };
  for (const char* var : {"PATH", "LD_LIBRARY_PATH", "CPATH", "LIBRARY_PATH"}) {
    const char* value = std::getenv(var);
    std::string rest = value ? value : "";
    std::size_t pos = 0;
    while (pos <= rest.size() && !rest.empty()) {
      std::size_t colon = rest.find(':', pos);
      std::string dir = rest.substr(pos, colon == std::string::npos ? std::string::npos : colon - pos);
      if (!dir.empty() && dir[0] == '/') p.read_only.push_back(toolchain(dir));
      if (colon == std::string::npos) break;
      pos = colon + 1;
    }
  }
  return p;
}

void record_isolation(EvalResult& result, const std::string& sandbox_level, const std::string& verdict_channel) {
  if (!result.private_metrics.is_object()) result.private_metrics = json::object();
  result.private_metrics["sandbox"] = sandbox_level;
  result.private_metrics["verdict_channel"] = verdict_channel;
}

SubprocessResult run_step(const StepSpec& step, const WorkFolder& folder, const EvalRequest& request,
                          const JobObserver& jobs) {
  SubprocessOptions options;
  options.argv = step.argv;
  options.cwd = step.cwd;
  options.env_add = step.env;
  options.env_add["BRAID_WORK_DIR"] = folder.dir.string();
  options.env_add["BRAID_RESULTS_DIR"] = folder.results.string();
  options.env_add["BRAID_WORKLOAD_DIR"] = folder.placeholders.at("workload_dir");
  options.env_add["BRAID_SEED"] = folder.placeholders.at("seed");
  options.env_add["HOME"] = folder.dir.string();
  options.env_add["TMPDIR"] = folder.dir.string();
  options.sandbox = step.sandbox;
  if (!step.token.empty()) {
    options.result_channel = true;
    options.channel_greeting = step.token + "\n";
  }
  options.peer_fd = step.peer_fd;
  options.stop = step.stop;
  options.timeout_s = step.timeout_s;
  options.candidate = true;  // build, run and bench all run the candidate's code or its build
  options.memory_limit_bytes = step.memory_limit_bytes;
  options.stdout_path = folder.logs / (step.name + ".stdout");
  options.stderr_path = folder.logs / (step.name + ".stderr");
  const std::string what = request.candidate_id.empty() ? step.name : request.candidate_id + " " + step.name;
  long started_pgid = 0;
  if (jobs) {
    options.on_start = [&](long pgid) {
      started_pgid = pgid;
      jobs(pgid, true, what);
    };
  }
  SubprocessResult result = run_subprocess(options);
  if (jobs && started_pgid != 0) jobs(started_pgid, false, what);
  return result;
}

DrivenRun run_driven_step(StepSpec driver, StepSpec worker, const WorkFolder& folder, const EvalRequest& request,
                          const JobObserver& jobs) {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0)
    throw SystemError(std::string("socketpair: ") + std::strerror(errno));
  driver.peer_fd = pair[0];
  worker.peer_fd = pair[1];
  std::atomic<bool> driver_ended{false};
  worker.stop = &driver_ended;
  DrivenRun out;
  std::exception_ptr worker_error;
  std::mutex observe;  // the two steps start and end their process groups on two threads
  const JobObserver observer = one_at_a_time(jobs, observe);
  std::thread worker_thread([&] {
    try {
      out.worker = run_step(worker, folder, request, observer);
    } catch (...) {
      worker_error = std::current_exception();
    }
  });
  try {
    out.driver = run_step(driver, folder, request, observer);
  } catch (...) {
    driver_ended = true;
    worker_thread.join();
    throw;
  }
  driver_ended = true;  // a worker that ignores the hang-up ends here
  worker_thread.join();
  if (worker_error) std::rethrow_exception(worker_error);
  return out;
}

std::string describe_crash(const std::string& what, const SubprocessResult& run) {
  std::string text = what + ": " + run.describe_end();
  std::string tail = tail_text(run.stderr_text, 1536);
  if (tail.find_first_not_of(" \n\t") == std::string::npos) tail = tail_text(run.stdout_text, 1024);
  if (tail.find_first_not_of(" \n\t") != std::string::npos) text += "\n" + tail;
  return text;
}

void record_failure(EvalResult& result, FailureKind kind, const std::string& error) {
  result.failure = kind;
  result.correct = false;
  result.combined_score = 0.0;
  if (!result.error_text.empty() && !error.empty()) result.error_text += "\n";
  result.error_text += error;
}

void write_failure_contract(const WorkFolder& folder, const EvalResult& result) {
  json verdict = {
      {"correct", false}, {"error", result.error_text}, {"failure", std::string(to_string(result.failure))}};
  write_file_atomic(folder.results / "correct.json", verdict.dump(2) + "\n");
}

}  // namespace braid
