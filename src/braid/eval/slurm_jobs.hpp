// Talking to Slurm (sbatch, squeue, scancel: its command-line clients, so braid needs no Slurm
// library and works with any version that has them) and remembering braid's jobs in the run's
// database (table slurm_jobs), so that a braid started again after kill -9 finds them.
#pragma once
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "braid/db/database.hpp"

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

// braid's jobs (SlurmJobEntry, db/record.hpp) in the run's database (table slurm_jobs).
class SlurmJobLedger {
 public:
  explicit SlurmJobLedger(ProgramDatabase& db);
  void put(const SlurmJobEntry& entry);
  std::optional<SlurmJobEntry> find(const std::string& candidate_id) const;
  std::vector<SlurmJobEntry> with_state(const std::string& state) const;

 private:
  ProgramDatabase& db_;
};

}  // namespace braid
