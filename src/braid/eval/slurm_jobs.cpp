#include "braid/eval/slurm_jobs.hpp"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "braid/eval/diagnostics.hpp"
#include "braid/util/subprocess.hpp"

namespace braid {

SlurmOutcome classify_slurm_state(const std::string& state) {
  if (state == "COMPLETED" || state == "FAILED") return SlurmOutcome::Ended;
  if (state == "TIMEOUT") return SlurmOutcome::TimedOut;
  if (state == "OUT_OF_MEMORY") return SlurmOutcome::OutOfMemory;
  if (state == "PREEMPTED" || state == "NODE_FAIL" || state == "BOOT_FAIL" || state == "CANCELLED" || state == "DEADLINE" ||
      state == "REVOKED" || state == "SPECIAL_EXIT")
    return SlurmOutcome::Requeue;
  return SlurmOutcome::Waiting;  // PENDING, RUNNING, COMPLETING, CONFIGURING, SUSPENDED, REQUEUED, ...
}

namespace {
bool on_path(const std::string& tool) {
  const char* path = std::getenv("PATH");
  if (!path) return false;
  std::string dirs = path;
  std::size_t start = 0;
  while (start <= dirs.size()) {
    std::size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::filesystem::path candidate = std::filesystem::path(dirs.substr(start, end - start)) / tool;
    if (::access(candidate.c_str(), X_OK) == 0) return true;
    start = end + 1;
  }
  return false;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  std::size_t first = s.find_first_not_of(" \n");
  return first == std::string::npos ? std::string() : s.substr(first);
}
}  // namespace

bool SlurmClient::available() { return on_path("sbatch") && on_path("squeue") && on_path("scancel"); }

SlurmCall SlurmClient::call(const std::vector<std::string>& argv) const {
  SubprocessOptions o;
  o.argv = argv;
  o.timeout_s = timeout_s_;
  o.output_cap_bytes = 64 * 1024;
  SubprocessResult r = run_subprocess(o);
  SlurmCall c;
  c.output = r.stdout_text;
  c.ok = r.succeeded();
  if (!c.ok) c.error = argv.front() + " " + r.describe_end() + (r.stderr_text.empty() ? "" : ": " + tail_text(trim(r.stderr_text), 600));
  else c.error = trim(r.stderr_text);
  return c;
}

std::optional<std::string> SlurmClient::submit(const std::vector<std::string>& args, const std::string& script,
                                               std::string* error) const {
  std::vector<std::string> argv = {"sbatch", "--parsable"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back(script);
  SlurmCall c = call(argv);
  // --parsable prints "<id>" or "<id>;<cluster>".
  std::string id = trim(c.output.substr(0, c.output.find(';')));
  if (!c.ok || id.empty() || id.find_first_not_of("0123456789_") != std::string::npos) {
    if (error) *error = c.ok ? "sbatch printed no job id: " + trim(c.output) : c.error;
    return std::nullopt;
  }
  return id;
}

std::optional<SlurmJobState> SlurmClient::query(const std::string& job_id) const {
  SlurmCall c = call({"squeue", "--noheader", "--states=all", "--jobs=" + job_id, "--format=%i|%T|%r"});
  SlurmJobState s;
  if (!c.ok) {
    // squeue exits 1 with "Invalid job id specified" once slurmctld has forgotten the job.
    if (c.error.find("Invalid job id") != std::string::npos) return s;
    return std::nullopt;
  }
  std::size_t start = 0;
  const std::string& out = c.output;
  while (start < out.size()) {
    std::size_t end = out.find('\n', start);
    if (end == std::string::npos) end = out.size();
    std::string line = trim(out.substr(start, end - start));
    start = end + 1;
    std::size_t a = line.find('|'), b = line.find('|', a + 1);
    if (a == std::string::npos || b == std::string::npos || line.substr(0, a) != job_id) continue;
    s.known = true;
    s.state = line.substr(a + 1, b - a - 1);
    if (auto plus = s.state.find('+'); plus != std::string::npos) s.state.resize(plus);  // "CANCELLED+"
    s.reason = line.substr(b + 1);
  }
  return s;
}

bool SlurmClient::cancel(const std::vector<std::string>& job_ids) const {
  if (job_ids.empty()) return true;
  std::vector<std::string> argv = {"scancel"};
  argv.insert(argv.end(), job_ids.begin(), job_ids.end());
  return call(argv).ok;
}

SlurmJobLedger::SlurmJobLedger(ProgramDatabase& db) : db_(db) { db_.ensure_slurm_jobs_table(); }

void SlurmJobLedger::put(const SlurmJobEntry& e) { db_.put_slurm_job(e); }

std::optional<SlurmJobEntry> SlurmJobLedger::find(const std::string& candidate_id) const {
  return db_.slurm_job(candidate_id);
}

std::vector<SlurmJobEntry> SlurmJobLedger::with_state(const std::string& state) const {
  return db_.slurm_jobs_with_state(state);
}

}  // namespace braid
