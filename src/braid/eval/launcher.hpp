// Launcher: one process per rank, three ways, all through the harness's one bootstrap
// (device/include/braid/runtime.cuh), so the same binary runs under each:
//   local   braid starts the ranks itself: BRAID_RANK / BRAID_WORLD_SIZE / BRAID_LOCAL_RANK,
//           each rank in a process group of its own with PR_SET_PDEATHSIG (util/subprocess);
//   mpirun  OMPI_COMM_WORLD_*; per-rank output through --output-filename;
//   srun    SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID; per-rank output through --output/--error.
// Every rank gets BRAID_EVAL_DIR (rank 0 publishes the ncclUniqueId there), BRAID_RUN_ID (names
// the id file, unique per launch), CUDA_VISIBLE_DEVICES (the GPUs leased for the launch) and the
// spec's environment. Ranks under mpirun are wrapped in `setpriv --pdeathsig KILL` where setpriv
// exists, so they die with mpirun, and their process groups are reported to the JobObserver as
// they appear (OpenMPI gives each rank a group of its own).
//
// Timeouts end the process group of every rank. When a rank fails (non-zero exit or a signal),
// the others get `peer_grace_s` to notice (the harness announces failures to its peers) and are
// then stopped. Per-rank stdout/stderr are kept (capped) in log_dir/rank<R>.stdout|.stderr.
// Metrics never come from these streams: the harness writes files braid named.
#pragma once
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "braid/eval/evaluator.hpp"
#include "braid/util/sandbox.hpp"

namespace braid {

enum class LauncherKind { Local, Mpirun, Srun };
std::string to_string(LauncherKind kind);
std::optional<LauncherKind> parse_launcher_kind(const std::string& name);

struct LaunchSpec {
  LauncherKind kind = LauncherKind::Local;
  int ranks = 1;
  std::vector<std::string> argv;                // the program and its arguments, same on every rank
  std::filesystem::path cwd;
  std::map<std::string, std::string> env;       // for every rank
  std::vector<int> gpus;                        // CUDA_VISIBLE_DEVICES of every rank; empty: unchanged
  int gpus_per_rank = 1;                        // srun: --gpus-per-task
  std::filesystem::path log_dir;                // rank<R>.stdout / rank<R>.stderr (required)
  std::filesystem::path eval_dir;               // BRAID_EVAL_DIR; empty: log_dir
  double timeout_s = 60.0;
  double peer_grace_s = 5.0;
  double kill_grace_s = 2.0;                    // SIGTERM -> SIGKILL
  std::vector<std::string> launcher_args;       // extra mpirun / srun arguments
  std::string name = "run";                     // label for the JobObserver and messages
  std::size_t output_cap_bytes = 64 * 1024;     // per rank and stream: head and tail kept
  // The ranks' sandbox (util/sandbox.hpp, the GPU profile; docs/sandbox.md): each local rank in
  // an instance of its own, mpirun with its ranks in one (TMPDIR a short folder of its own, for
  // OpenMPI's socket paths); HOME and TMPDIR are the eval folder. srun's ranks run under Slurm's
  // confinement, not braid's (LaunchResult::sandbox_level says so).
  SandboxPolicy sandbox;
  // Local ranks only: each rank gets braid's verdict channel (util/subprocess.hpp, descriptor 3,
  // BRAID_RESULT_FD) with this nonce written into it; what a rank writes back is its
  // RankOutcome::channel_text. Empty: no channel.
  std::string verdict_token;
};

struct RankOutcome {
  int rank = 0;
  bool known = false;          // mpirun/srun: whether this rank's end is known
  int exit_code = -1;
  int term_signal = 0;
  bool timed_out = false;      // still running when the time limit struck
  bool stopped = false;        // stopped by braid after another rank failed
  double end_s = 0.0;          // seconds after launch when it ended
  std::string stdout_text;     // capped
  std::string stderr_text;     // capped
  std::string channel_text;    // what the rank wrote into the verdict channel (LaunchSpec::verdict_token)
  bool failed() const { return known && !timed_out && !stopped && (term_signal != 0 || exit_code != 0); }
  // "rank 1: exit code 3", "rank 0: killed by signal SIGSEGV (Segmentation fault)", ...
  std::string describe() const;
};

struct LaunchResult {
  bool started = false;
  std::string start_error;
  bool timed_out = false;
  double wall_s = 0.0;
  std::vector<RankOutcome> ranks;
  int launcher_exit_code = -1;          // mpirun/srun's own end (local: 0 when every rank did)
  int launcher_signal = 0;
  std::string launcher_output;          // mpirun/srun's own messages (capped)
  std::string sandbox_level = "off";    // SandboxPlan::level() of the ranks

  bool succeeded() const;
  std::vector<int> ranks_still_running() const;  // at the time limit
  // The rank that failed first (earliest end with non-zero exit or signal), if any.
  std::optional<int> first_failed_rank() const;
  // One paragraph: how it ended, which rank, and that rank's stderr tail.
  std::string describe_failure(const std::string& step) const;
};

// mpirun/srun's argv for `spec` (local: the program's argv). For logs and tests.
std::vector<std::string> launcher_argv(const LaunchSpec& spec);

// Runs the ranks to completion, failure or timeout. Throws SystemError only when braid's own
// environment fails (no log folder, fork impossible).
LaunchResult launch_ranks(const LaunchSpec& spec, const JobObserver& jobs = {});

// How an srun launch that ran elsewhere (a step of a Slurm job braid submitted, slurm_kinds.hpp)
// ended, as its job script recorded it; the ranks' output is in spec.log_dir/rank<R>.stdout|.stderr.
struct SrunStepEnd {
  bool started = true;
  int exit_code = -1;         // srun's
  bool timed_out = false;     // the step's time limit struck (timeout(1) around each task)
  double wall_s = 0.0;
  std::string srun_messages;  // srun's own stderr ("task 1: Exited with exit code 3", ...)
};
// The LaunchResult of such a step, read as launch_ranks reads its own srun launches.
LaunchResult srun_step_result(const LaunchSpec& spec, const SrunStepEnd& end);

// Processes descended from `root_pid` (by /proc parentage) with their rank read from their
// environment (OMPI_COMM_WORLD_RANK, SLURM_PROCID or BRAID_RANK); rank -1 when none is set.
struct RankProcess {
  long pid = 0;
  long pgid = 0;
  int rank = -1;
  std::string start_marker;
};
std::vector<RankProcess> find_rank_processes(long root_pid);

}  // namespace braid
