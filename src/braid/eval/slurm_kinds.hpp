// What each evaluator kind hands the Slurm backend (slurm_evaluator.hpp): what is built here
// before the job is submitted, the steps of its batch script, and how the files the finished
// script left are read into a result. The kinds judge a job's files with the same functions as
// their local evaluators, so a candidate gets the same verdict here and there:
//
//   cascade   build here; steps `run` (srun, the section's ranks), then `bench` when run+verify
//             passed; read like the cascade's steps.
//   external  nothing built here; one step `external`: `<command> --program_path P
//             --results_dir D`, run once in the workload folder on the allocation's first node
//             (it may start ranks itself with srun, which inherits the allocation); read with
//             read_external_verdict (external.hpp).
//   gpu       nvcc build here (the compile cache); steps `verify` (unless verify_in_bench) and
//             `bench`, each the harness on every rank (srun --ntasks=ranks
//             --gpus-per-task=gpus_per_rank), per-rank logs in logs/<step>/rank<R>.*; read with
//             srun_step_result (launcher.hpp) and judge_level (gpu_cascade.hpp).
#pragma once
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "braid/eval/cascade.hpp"
#include "braid/eval/evaluator.hpp"
#include "braid/eval/external.hpp"
#include "braid/eval/gpu_cascade.hpp"
#include "braid/eval/work_folder.hpp"

namespace braid {

// One step of a job script.
struct SlurmStep {
  enum class Launch {
    Ranks,     // srun with the job's ranks; one log per step (lines prefixed with the rank)
    RankLogs,  // srun with the job's ranks; logs/<name>/rank<R>.stdout|.stderr, srun's own messages in
               // logs/<name>/srun.stderr
    Once,      // once, in the batch script (the allocation's first node), in `cwd`
  };
  std::string name;    // logs/<name>.*, <name>.exit ("<exit code> <start> <end>")
  std::string timing;  // the key of EvalResult::timings for its wall time
  Launch launch = Launch::Ranks;
  double timeout_s = 0.0;
  std::vector<std::string> argv;
  std::filesystem::path cwd{};  // Once only
  bool set_aside = false;       // afterwards its results/correct.json and metrics.json move to verify/
  bool gated = false;           // runs only when the step before exited 0 and verify/correct.json says correct
};

// "<exit code> <start> <end>" as the script writes it into <step>.exit.
struct StepEnd {
  int exit_code = -1;
  double start = 0.0, end = 0.0;
  double wall_s() const { return end - start; }
};
std::optional<StepEnd> read_step_end(const std::filesystem::path& file);
// Whether `limit_s` was used up: timeout(1) exits 124 (137 when its KILL follow-up was needed).
bool step_timed_out(const StepEnd& s, double limit_s);
// The last `bytes` of a file; "" when missing or blank.
std::string log_tail(const std::filesystem::path& file, std::size_t bytes);

class SlurmJobKind {
 public:
  virtual ~SlurmJobKind() = default;
  virtual std::string describe() const = 0;  // what is built here and what runs as jobs
  virtual const std::filesystem::path& workload_dir() const = 0;
  virtual const std::string& program_filename() const = 0;
  virtual const std::map<std::string, std::string>& env() const = 0;  // exported in every job
  virtual std::vector<std::string> srun_args() const { return {}; }   // more srun arguments of each step
  // The level a job's evaluation starts at (after what was built here).
  virtual int job_level() const { return 2; }
  // Before submission, in the job folder: false with the failure recorded in `result`.
  virtual bool build(const WorkFolder& folder, const EvalRequest& request, const JobObserver& jobs,
                     EvalResult& result) = 0;
  // The job's steps for a folder (its placeholders name the job folder) and seed.
  virtual std::vector<SlurmStep> steps(const WorkFolder& folder, std::uint64_t seed) const = 0;
  // The finished script's files in `job_dir` into `result`; `where` names the job in messages.
  virtual void read_steps(const std::filesystem::path& job_dir, const std::string& where, EvalResult& result) const = 0;
};

std::unique_ptr<SlurmJobKind> cascade_job_kind(CascadeConfig config);
std::unique_ptr<SlurmJobKind> external_job_kind(ExternalConfig config);
// Finds nvcc here (UserError naming workload.yaml without it); needs no GPU here: `arch: auto`
// is sm_90 on a machine without one (set arch to the cluster's).
std::unique_ptr<SlurmJobKind> gpu_job_kind(GpuCascadeConfig config);

}  // namespace braid
