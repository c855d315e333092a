// The Slurm backend of workload.yaml's `evaluator: {kind: cascade, ..., slurm: {...}}`: the
// build runs here (as in the cascade); run+verify and bench run as one Slurm job per
// evaluation, each a job step (srun) with the section's ranks, GPUs per task and nodes.
//
// Job folder <shared_dir>/<candidate_id>/ (shared_dir must be seen by the nodes):
//   program.cpp, program.out   the candidate and what the local build made
//   job.sh                     the batch script braid wrote (steps, per-step timeouts)
//   runs.log                   one line per time the script started: "<job id> <unix time>"
//   started, run.exit, bench.exit, done   markers the script writes as it goes
//   verify/                    the run step's correct.json/metrics.json; results/ the bench's
//   logs/, slurm.out           step output (srun --label with several ranks) and Slurm's own
// When the job ends, the results and logs are copied into the evaluation's work folder, so it
// looks like a cascade evaluation's.
//
// Job states (see classify_slurm_state): COMPLETED/FAILED are read from the script's files
// like the cascade's steps; TIMEOUT -> timeout; OUT_OF_MEMORY -> run_failed; PREEMPTED,
// NODE_FAIL, BOOT_FAIL, CANCELLED (by someone else) or a job Slurm forgot before it finished
// are resubmitted (max_requeues times) and never scored.
//
// Every submission is recorded in the run's database (slurm_jobs) before braid waits on it:
// a braid started again with the same candidate (same id, code and seed) adopts the job
// (still queued or running: waits; finished: reads its files) instead of submitting a second
// one. cancel_jobs() (Ctrl-C) scancels every job in flight.
#pragma once
#include <atomic>
#include <map>
#include <memory>
#include <mutex>

#include "braid/eval/cascade.hpp"
#include "braid/eval/slurm_config.hpp"
#include "braid/eval/slurm_jobs.hpp"

namespace braid {

class SlurmEvaluator : public Evaluator {
 public:
  SlurmEvaluator(CascadeConfig cascade, SlurmConfig slurm);
  EvalResult evaluate(const EvalRequest& request, const JobObserver& jobs) override;
  std::string describe() const override;
  std::string status_note() const override;  // "slurm: 2 running, 2 queued (Resources)"
  void attach_run(ProgramDatabase& db, const std::filesystem::path& results_dir) override;
  void cancel_jobs() override;

  // sbatch's arguments and the batch script of one evaluation (for tests and logs).
  std::vector<std::string> sbatch_args(const std::string& candidate_id, const std::filesystem::path& job_dir) const;
  std::string job_script(const std::filesystem::path& job_dir, const std::string& seed) const;
  std::string time_limit() const;  // sbatch --time: the section's, else both steps' limits + 1 min

 private:
  struct Active {
    std::string job_id;
    std::string state = "PENDING";
    std::string reason;
  };
  struct Job;
  std::filesystem::path job_dir_for(const EvalRequest& request) const;
  bool submit(Job& job, EvalResult& result);
  EvalResult wait_and_collect(Job& job, const EvalRequest& request);
  void set_active(const std::string& candidate_id, const Active& a);
  void forget_active(const std::string& candidate_id);

  CascadeConfig cascade_;
  SlurmConfig slurm_;
  SlurmClient client_;
  std::unique_ptr<SlurmJobLedger> ledger_;
  std::filesystem::path results_dir_;
  std::atomic<bool> cancelled_{false};
  mutable std::mutex mutex_;
  std::map<std::string, Active> active_;  // by candidate id
};

}  // namespace braid
