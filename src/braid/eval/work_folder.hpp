// Pieces shared by the cascade and the external evaluator: the work folder of one evaluation,
// running one step of it as a child process, and recording failures as values.
#pragma once
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "braid/eval/evaluator.hpp"
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

// The names a command template may use.
const std::vector<std::string>& known_placeholders();

// Creates the folders and writes the candidate. Throws SystemError when the disk refuses.
WorkFolder prepare_work_folder(const EvalRequest& request, const std::filesystem::path& workload_dir,
                               const std::string& program_filename);

struct StepSpec {
  std::string name;                   // "build", "run", "bench", "external"
  std::vector<std::string> argv;
  std::filesystem::path cwd;
  double timeout_s = 0.0;
  std::map<std::string, std::string> env;
  std::size_t memory_limit_bytes = 0;  // RLIMIT_AS of the step's processes; 0: none
};

// Runs one step, logging its capped output in the work folder and reporting its process
// group to `jobs` while it runs.
SubprocessResult run_step(const StepSpec& step, const WorkFolder& folder, const EvalRequest& request,
                          const JobObserver& jobs);

// "killed by signal SIGSEGV (Segmentation fault)" or "exit code 3", then the stderr tail.
std::string describe_crash(const std::string& what, const SubprocessResult& run);

// Sets the failure (score 0, not correct) and appends the error.
void record_failure(EvalResult& result, FailureKind kind, const std::string& error);

// Writes results/correct.json for a failure braid detected itself, so that every evaluated
// folder holds the contract: {"correct": false, "error": ..., "failure": "<kind>"}.
void write_failure_contract(const WorkFolder& folder, const EvalResult& result);

}  // namespace braid
