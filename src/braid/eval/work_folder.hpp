// Pieces shared by the cascade and the external evaluator: the work folder of one evaluation,
// running one step of it as a child process, and recording failures as values.
#pragma once
#include <atomic>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "braid/eval/evaluator.hpp"
#include "braid/util/json.hpp"
#include "braid/util/subprocess.hpp"

namespace braid {

struct WorkFolder {
  std::filesystem::path dir;       // EvalRequest::work_dir, absolute
  std::filesystem::path program;   // the candidate's source
  std::filesystem::path artifact;  // what the build produces
  std::filesystem::path results;   // correct.json and metrics.json
  std::filesystem::path logs;      // <step>.stdout / <step>.stderr
  std::map<std::string, std::string> placeholders;
};

// The names a command template may use ({driver}: only a cascade with driver_build).
const std::vector<std::string>& known_placeholders();

// Creates the folders and writes the candidate. Throws SystemError when the disk refuses.
WorkFolder prepare_work_folder(const EvalRequest& request, const std::filesystem::path& workload_dir,
                               const std::string& program_filename);

// workload.yaml's sandbox keys of a CPU evaluator (docs/sandbox.md); memory_limit_mb is
// read beside them (CascadeConfig, ExternalConfig):
//   sandbox: true            # false: candidates run unconfined (trusted code only)
//   max_processes: 512       # processes and threads of one evaluation; 0: none
//   network: false           # true: keep the host's network
struct SandboxSettings {
  bool enabled = true;
  long max_processes = 512;
  bool network = false;
  bool namespaces = true;  // false: the fallback layers only (no workload key; tests of them)
  // From a section validated by load_workload; absent keys keep the defaults above.
  static SandboxSettings from_json(const json& section);
};

// The sandbox of one evaluation's processes: writes only in the work folder (and a private
// /tmp); the run folder (its other candidates, evolution.db) and the home hidden; the
// workload and the toolchain folders on PATH visible, read-only.
SandboxPolicy candidate_sandbox(const SandboxSettings& settings, const WorkFolder& folder, std::size_t memory_bytes);
// The same for any work folder and profile (the GPU ranks: SandboxProfile::Gpu, no memory limit).
SandboxPolicy candidate_sandbox(const SandboxSettings& settings, const std::filesystem::path& work_dir,
                                const std::filesystem::path& workload_dir, std::size_t memory_bytes,
                                SandboxProfile profile);

struct StepSpec {
  std::string name;  // "build", "run", "bench", "external"
  std::vector<std::string> argv;
  std::filesystem::path cwd;
  double timeout_s = 0.0;
  std::map<std::string, std::string> env;
  std::size_t memory_limit_bytes = 0;       // RLIMIT_AS of the step's processes; 0: none
  SandboxPolicy sandbox;                    // see candidate_sandbox
  std::string token;                        // the verdict nonce; with it the step gets BRAID_RESULT_FD
  int peer_fd = -1;                         // a socket given as BRAID_PEER_FD (run_driven_step), taken over
  const std::atomic<bool>* stop = nullptr;  // once true the step is ended (SubprocessOptions::stop)
};

// Runs one step, logging its capped output in the work folder and reporting its process
// group to `jobs` while it runs. The environment is the candidate allowlist plus the step's
// env, HOME and TMPDIR (the work folder) and the BRAID_* variables.
SubprocessResult run_step(const StepSpec& step, const WorkFolder& folder, const EvalRequest& request,
                          const JobObserver& jobs);

// A workload's driver and the candidate's worker side by side (docs/sandbox.md, "Driver and
// worker"): two processes, each in its own sandbox instance, joined by a socket pair each gets
// as BRAID_PEER_FD; only the driver's spec carries the verdict nonce. The worker is stopped
// once the driver has ended.
struct DrivenRun {
  SubprocessResult driver;
  SubprocessResult worker;
};
DrivenRun run_driven_step(StepSpec driver, StepSpec worker, const WorkFolder& folder, const EvalRequest& request,
                          const JobObserver& jobs);

// "killed by signal SIGSEGV (Segmentation fault)" or "exit code 3", then the stderr tail.
std::string describe_crash(const std::string& what, const SubprocessResult& run);

// Sets the failure (score 0, not correct) and appends the error.
void record_failure(EvalResult& result, FailureKind kind, const std::string& error);

// Stores the sandbox level in force and how the verdict came, with the evaluation's private
// metrics (kept in the database with every result).
void record_isolation(EvalResult& result, const std::string& sandbox_level, const std::string& verdict_channel);

// Writes results/correct.json for a failure braid detected itself, so that every evaluated
// folder holds the contract: {"correct": false, "error": ..., "failure": "<kind>"}.
void write_failure_contract(const WorkFolder& folder, const EvalResult& result);

}  // namespace braid
