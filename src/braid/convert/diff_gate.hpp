// The differential gate: verification of a conversion that needs no annotations. The original
// and the converted program are built as the annotated gate builds them (gate.hpp; with
// `-cudart shared`, so the snapshot shim can interpose the CUDA runtime), run under the same
// launcher with the same arguments and environment, and compared rank by rank:
//   - exit codes (each rank of the converted program ends as the original's did, and the
//     original runs cleanly);
//   - the contents of every device buffer at its release (or at exit), recorded by the snapshot
//     shim (device/snapshot/snapshot_shim.cpp, LD_PRELOAD), matched by allocation order among
//     the program's own allocations, with the tolerances of snapshot_compare.hpp;
//   - stdout, with numbers masked: differences are reported, never a failure (timings differ).
// A run past the time limit is a failure naming the ranks still running.
// Launchers: a program that includes mpi.h runs under `mpirun -np N` (found on PATH; a failure
// value when missing), every other one on braid's local ranks (run_local_ranks, gate.hpp), which
// also set the torchrun-style RANK / WORLD_SIZE / LOCAL_RANK and an NCCL_ID_FILE per side.
#pragma once
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "braid/convert/analyzer.hpp"
#include "braid/convert/gate.hpp"
#include "braid/convert/snapshot_compare.hpp"
#include "braid/convert/transform.hpp"
#include "braid/eval/launcher.hpp"

namespace braid::convert {

// What a user's program without a launcher of its own commonly reads, for run_local_ranks ("{rank}"
// values): torchrun's RANK, LOCAL_RANK, WORLD_SIZE, and NCCL_ID_FILE in `dir`.
std::map<std::string, std::string> user_rank_env(int ranks, const std::filesystem::path& dir);

bool includes_mpi(const std::string& source);

struct LauncherChoice {
  LauncherKind kind = LauncherKind::Local;
  std::filesystem::path mpirun;  // when kind is Mpirun and it was found
  std::string failure;           // why the program cannot be launched here
};
// mpirun for programs that include mpi.h (looked up in `path_env`, a PATH value), else local.
LauncherChoice choose_launcher(const std::string& source, const std::string& path_env);

// How one side of the gate ran: one entry per rank.
struct RankEnd {
  int rank = 0;
  bool known = false;      // the rank's end is known (mpirun may not say)
  bool timed_out = false;  // still running at the time limit
  bool ok = false;         // exit code 0, no signal
  std::string end;         // "exit code 3", "killed by signal SIGSEGV ...", "timed out"
  std::string stdout_text, stderr_text;
};
struct SideRun {
  std::string launch_error;  // the launcher did not start
  bool timed_out = false;
  double wall_s = 0.0;
  std::vector<RankEnd> ranks;
};

struct DiffRunSpec {
  LauncherChoice launcher;
  int ranks = 2;                   // processes
  int world = 0;                   // ranks in a reduction (tolerances); 0: `ranks`
  std::vector<std::string> args;   // the program's command line, the same on both sides
  std::filesystem::path work_dir;  // <work>/original, <work>/converted: logs and snapshots
  std::filesystem::path shim;      // the snapshot shim (.so) to preload
  double timeout_s = 120.0;
  bool per_device = false;                 // several ranks in one process: the shim numbers allocations per GPU
  std::map<std::string, std::string> env;  // more environment for every rank (the original's second run)
  std::string nccl_version;                // the library the ranks load ("2.28.9+cuda13.0"; "" unknown)
};

// Runs one side (name: "original" or "converted") with the shim preloaded; snapshots land in
// <work>/<name>/snapshots.
SideRun run_side(const std::filesystem::path& exe, const std::string& name, const DiffRunSpec& spec);

// "converted hangs: timed out after 120.0 s; ranks 1, 3 still running" ("" when it did not time out).
// Failures of the original side start with "original " (the rewrite loop's original_failed).
// Under mpirun, where rank ends are not all known, a rank whose snapshot has no `end` line counts
// as still running.
std::string hang_failure(const std::string& name, const SideRun& run, const std::vector<RankSnapshot>& snapshots,
                         double timeout_s);

// Runs both built programs and compares them (the whole gate after the builds; tested with
// fake programs that write snapshots as the shim does).
GateResult diff_programs(const std::filesystem::path& original_exe, const std::filesystem::path& converted_exe,
                         const DiffRunSpec& spec, const std::vector<ConvertedReduction>& reductions);

// Compiles the embedded shim source with nvcc (as host code) into <work_dir>/libbraid_snapshot.so.
// Empty path with `why` on failure.
std::filesystem::path build_snapshot_shim(const std::filesystem::path& work_dir, std::string* why);

// The whole differential gate: shim, both builds (options.flags + -cudart shared), runs,
// comparison. options.program_args is the program's command line. `reductions`: those the
// converted side may compute in another order (their buffers get the reduction tolerances).
GateResult run_diff_gate(const Analysis& analysis, const std::string& original_source,
                         const std::string& converted_source, const std::vector<ConvertedReduction>& reductions,
                         const GateOptions& options);

// A passed differential gate in one line: "4 buffers match on 2 ranks; wall time original 1.200 s,
// converted 0.800 s", then what the original did not reproduce from run to run, if anything.
std::string diff_gate_summary(const GateResult& g);

// The per-buffer table of a differential gate's details, for --explain.
std::string diff_gate_to_text(const GateResult& g);

}  // namespace braid::convert
