// Talking to Slurm (sbatch, squeue, scancel: its command-line clients, so braid needs no Slurm
// library and works with any version that has them) and remembering braid's jobs in the run's
// database (table slurm_jobs), so that a braid started again after kill -9 finds them.
#pragma once
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

struct sqlite3;

namespace braid {

// What a Slurm job state means for the evaluation it runs.
enum class SlurmOutcome {
  Waiting,      // PENDING, CONFIGURING, RUNNING, COMPLETING, SUSPENDED, REQUEUED, RESIZING, ...
  Ended,        // COMPLETED, FAILED: the job script's own files tell how the steps went
  Requeue,      // PREEMPTED, NODE_FAIL, BOOT_FAIL, CANCELLED, DEADLINE, gone: not the candidate's fault
  TimedOut,     // TIMEOUT: the job hit its time limit
  OutOfMemory,  // OUT_OF_MEMORY
};
SlurmOutcome classify_slurm_state(const std::string& state);

struct SlurmJobState {
  bool known = false;       // false: Slurm no longer (or never) knew the job id
  std::string state;        // "PENDING", "RUNNING", "CANCELLED", ... (squeue %T; "+" suffix dropped)
  std::string reason;       // squeue %r: "Resources", "ReqNodeNotAvail, ...", "None"
};

// One call of a Slurm client; every call has a time limit so a dead slurmctld never hangs braid.
struct SlurmCall {
  bool ok = false;
  std::string output;  // stdout
  std::string error;   // stderr tail or why it could not run
};

class SlurmClient {
 public:
  explicit SlurmClient(double call_timeout_s = 30.0) : timeout_s_(call_timeout_s) {}
  // sbatch --parsable ARGS SCRIPT; the job id, or nullopt with `error` set.
  std::optional<std::string> submit(const std::vector<std::string>& args, const std::string& script, std::string* error) const;
  // nullopt when Slurm could not be asked (slurmctld down, timeout): not the same as a gone job.
  std::optional<SlurmJobState> query(const std::string& job_id) const;
  bool cancel(const std::vector<std::string>& job_ids) const;
  static bool available();  // sbatch, squeue and scancel on PATH

 private:
  SlurmCall call(const std::vector<std::string>& argv) const;
  double timeout_s_;
};

// A job braid submitted for one evaluation.
struct SlurmJobEntry {
  std::string candidate_id;  // the evaluation (EvalRequest::candidate_id)
  std::string job_id;
  std::string code_hash;     // of the candidate's code and seed: adopt only the same evaluation
  std::string job_dir;
  std::string state = "submitted";  // submitted | collected | cancelled
  int attempts = 1;          // submissions for this candidate (requeues add one)
  double submitted_at = 0.0; // unix seconds of the latest submission
  double updated_at = 0.0;
};

// slurm_jobs in the run's database: written through the database's own connection (its
// mutex keeps our statements apart from the search's transactions).
class SlurmJobLedger {
 public:
  explicit SlurmJobLedger(sqlite3* db);
  void put(const SlurmJobEntry& entry);
  std::optional<SlurmJobEntry> find(const std::string& candidate_id) const;
  std::vector<SlurmJobEntry> with_state(const std::string& state) const;

 private:
  sqlite3* db_;
};

}  // namespace braid
