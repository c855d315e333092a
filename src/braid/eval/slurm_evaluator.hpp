// The Slurm backend of workload.yaml's `evaluator: {kind: cascade | external | gpu, ...,
// slurm: {...}}`: what the kind builds is built here; what runs the candidate runs as one
// Slurm job per evaluation, its steps given by the kind (slurm_kinds.hpp), with the section's
// ranks, GPUs per task and nodes (kind gpu: the evaluator's ranks and gpus_per_rank).
//
// Job folder <shared_dir>/<candidate_id>/ (shared_dir must be seen by the nodes):
//   program.*, program.out     the candidate and what the local build made
//   job.sh                     the batch script braid wrote (steps, per-step timeouts)
//   runs.log                   one line per time the script started: "<job id> <unix time>"
//   started, <step>.exit, done markers the script writes as it goes
//   verify/                    the verify step's correct.json/metrics.json; results/ the last step's
//   logs/, slurm.out           step output and Slurm's own
// When the job ends, the results and logs are copied into the evaluation's work folder, so it
// looks like a local evaluation's.
//
// Job states (see classify_slurm_state): COMPLETED/FAILED are read from the script's files
// as the kind's local evaluator reads its steps; TIMEOUT -> timeout; OUT_OF_MEMORY ->
// run_failed; PREEMPTED, NODE_FAIL, BOOT_FAIL, CANCELLED (by someone else) or a job Slurm
// forgot before it finished are resubmitted (max_requeues times) and never scored.
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
#include "braid/eval/slurm_kinds.hpp"

namespace braid {

class SlurmEvaluator : public Evaluator {
 public:
  SlurmEvaluator(std::unique_ptr<SlurmJobKind> kind, SlurmConfig slurm);
  SlurmEvaluator(CascadeConfig cascade, SlurmConfig slurm);
  EvalResult evaluate(const EvalRequest& request, const JobObserver& jobs) override;
  std::string describe() const override;
  std::string status_note() const override;  // "slurm: 2 running, 2 queued (Resources)"
  void attach_run(ProgramDatabase& db, const std::filesystem::path& results_dir) override;
  void cancel_jobs() override;

  // sbatch's arguments and the batch script of one evaluation (for tests and logs).
  std::vector<std::string> sbatch_args(const std::string& candidate_id, const std::filesystem::path& job_dir) const;
  std::string job_script(const std::filesystem::path& job_dir, const std::string& seed) const;
  std::string time_limit() const;  // sbatch --time: the section's, else the steps' limits + 1 min
  const SlurmJobKind& kind() const { return *kind_; }

 private:
  struct Active {
    std::string job_id;
    std::string state = "PENDING";
    std::string reason;
  };
  struct Job;
  // How waiting for a job ended.
  struct WaitEnd {
    enum class How { ScriptDone, EndedEarly, GaveUp, Cancelled } how = How::ScriptDone;
    std::string slurm_state;  // EndedEarly: the state Slurm ended the job in
  };
  struct Poll;
  std::filesystem::path job_dir_for(const EvalRequest& request) const;
  WorkFolder job_folder(const std::filesystem::path& job_dir, const std::string& seed) const;
  std::vector<SlurmStep> job_steps(const std::filesystem::path& job_dir) const;
  bool adopt(Job& job, const std::filesystem::path& dir);
  bool build_and_submit(Job& job, const EvalRequest& request, const JobObserver& jobs, EvalResult& result);
  bool submit(Job& job, EvalResult& result);
  void mark(const Job& job, const std::string& state);
  EvalResult wait_and_collect(Job& job, const EvalRequest& request);
  WaitEnd wait_for_end(Job& job, EvalResult& result);
  std::optional<WaitEnd> poll(Job& job, Poll& p, EvalResult& result);
  bool requeue(Job& job, const std::string& why, EvalResult& result);
  void record_job_timings(const Job& job, double noticed_at, EvalResult& result) const;
  void classify_early_end(const Job& job, const std::string& state, EvalResult& result) const;
  EvalResult deliver(const Job& job, const EvalRequest& request, EvalResult result) const;
  void set_active(const std::string& candidate_id, const Active& a);
  void forget_active(const std::string& candidate_id);

  std::unique_ptr<SlurmJobKind> kind_;
  SlurmConfig slurm_;
  SlurmClient client_;
  std::unique_ptr<SlurmJobLedger> ledger_;
  std::filesystem::path results_dir_;
  std::atomic<bool> cancelled_{false};
  mutable std::mutex mutex_;
  std::map<std::string, Active> active_;  // by candidate id
};

}  // namespace braid
