// The GPU evaluation cascade of workload.yaml's `evaluator: {kind: gpu, ...}`:
//
//   evaluator:
//     kind: gpu
//     ranks: 2                       # processes, one per GPU (x gpus_per_rank)
//     launcher: local                # local | mpirun | srun
//     arch: auto                     # auto (the GPU present, sm_90 without one) | sm_90 | sm_90a
//     nvcc_flags: [-O3, -std=c++20]  # default: -O3 -std=c++20 --expt-relaxed-constexpr -lineinfo
//     includes: [include]            # extra -I folders, relative to the workload
//     libs: [-lcublas]               # link arguments
//     args: "--size 4096 --rtol 1e-3"  # harness flags for both levels ({placeholders} allowed)
//     bench_args: "--iters 50"       # added for the bench level only
//     build_timeout_s: 300
//     run_timeout_s: 60
//     bench_timeout_s: 180
//     bench_exclusive: true          # the bench level runs alone on the node
//     verify_in_bench: false         # true: no separate L2 run; the bench run's own verification
//                                    # (the harness checks every rank in bench mode) decides
//     gpus_per_rank: 1
//     gpus: [0, 1]                   # default: every GPU found
//     health_probe: true             # probe GPUs after a killed or crashed run
//     launcher_args: []              # extra mpirun / srun arguments
//     cache_dir: ~/.cache/braid/nvcc # compile cache (default $BRAID_CACHE_DIR or ~/.cache/braid/nvcc)
//     env: {NCCL_DEBUG: WARN}
//   profile: {enabled: true, top_k: 3, timeout_s: 300, kernel_regex: "cand::", ...}   # top level
//
// L1 NvccBuilder (cached, parallel) -> build_failed | timeout.
// L2 ranks run `<artifact> --mode verify --seed S --results_dir D <args>` on leased GPUs:
//    timeout (which ranks were still running) | run_failed (signal or exit code, CUDA/NCCL text,
//    which rank) | verify_failed (the harness's report).
// L3 ranks run `--mode bench ... <bench_args>` under an exclusive lease: timeout | bench_failed |
//    verify_failed; metrics from D/metrics.json only. With verify_in_bench the L2 run is left
//    out (it repeats process start, communicator set-up and the reference for every candidate)
//    and a crash of the bench run counts as run_failed.
// L4 (optional, `profile:`) runs the bench command under Nsight Compute for correct candidates
//    among the best so far (ncu_profile.hpp: ProfileGate); the per-kernel figures go to
//    public_metrics["profile"]. A missing ncu, a timeout or a failed profile is a note there,
//    never a failure of the candidate.
// After a timeout or crash the leased GPUs are probed (gpu_health.hpp) before they are released;
// GPUs that fail are quarantined for the rest of the run.
#pragma once
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "braid/eval/evaluator.hpp"
#include "braid/eval/gpu_health.hpp"
#include "braid/eval/gpu_pool.hpp"
#include "braid/eval/launcher.hpp"
#include "braid/eval/ncu_profile.hpp"
#include "braid/eval/nvcc_builder.hpp"
#include "braid/eval/work_folder.hpp"
#include "braid/util/json.hpp"

namespace braid {

struct GpuCascadeConfig {
  std::filesystem::path workload_dir;
  std::string program_filename = "program.cu";
  int ranks = 2;
  LauncherKind launcher = LauncherKind::Local;
  std::string arch = "auto";
  std::vector<std::string> nvcc_flags = default_nvcc_flags();
  std::vector<std::filesystem::path> includes;  // absolute
  std::vector<std::string> libs;
  std::string args;
  std::string bench_args;
  double build_timeout_s = 300.0;
  double run_timeout_s = 60.0;
  double bench_timeout_s = 180.0;
  bool bench_exclusive = true;
  bool verify_in_bench = false;
  int gpus_per_rank = 1;
  std::vector<int> gpus;  // empty: detected
  bool health_probe = true;
  double probe_timeout_s = 30.0;
  double peer_grace_s = 5.0;
  std::vector<std::string> launcher_args;
  std::filesystem::path cache_dir;  // empty: default_compile_cache_dir()
  std::map<std::string, std::string> env;
  NcuConfig profile;  // workload.yaml `profile:` (stored under the evaluator section)
  // The ranks' sandbox (`sandbox`, `max_processes`; docs/sandbox.md, "GPU ranks").
  SandboxSettings sandbox = {true, 4096, true, true};
  std::size_t rank_memory_bytes = 0;  // resident host memory per rank (memory_limit_mb), 0: none
  bool verdict_channel =
      false;  // the harness's record through braid's channel, not its files (`verdict`, auto by default)

  // From a section validated by load_workload.
  static GpuCascadeConfig from_json(const json& section, const std::filesystem::path& workload_dir,
                                    const std::string& program_filename);
};

// $BRAID_CACHE_DIR/nvcc, else $XDG_CACHE_HOME/braid/nvcc, else ~/.cache/braid/nvcc.
std::filesystem::path default_compile_cache_dir();

// Whether `program` runs braid's frozen harness: it reaches braid/harness.cuh through its
// #includes (looked up in `include_dirs` and braid's device headers) and calls harness_main (in
// its text or a workload header), which takes the verdict channel.
bool runs_braid_harness(const std::filesystem::path& program, std::vector<std::filesystem::path> include_dirs);

// How one level's launch went, from its ranks' ends and output and the verdict they wrote:
// shared by the local launch below and a Slurm job step (slurm_kinds.hpp), so both judge alike.
struct LevelJudgement {
  FailureKind failure = FailureKind::Ok;
  std::string error;
  bool crashed = false;  // a rank crashed, hung or was killed: the GPUs may be in a bad state
};
LevelJudgement judge_level(const LaunchResult& run, const std::optional<Verdict>& verdict, const std::string& step,
                           FailureKind crash_kind);

// A level's command: `<artifact> --mode M --seed S --results_dir <results> <args> <extra>`.
std::vector<std::string> harness_argv(const GpuCascadeConfig& config, const WorkFolder& folder, std::uint64_t seed,
                                      const std::string& mode, const std::string& extra);
// L1's nvcc input: the folder's program into its artifact, for `arch`.
BuildInput harness_build_input(const GpuCascadeConfig& config, const std::string& arch, const WorkFolder& folder);

class GpuCascadeEvaluator : public Evaluator {
 public:
  // Finds the toolchain and the GPUs. Throws UserError (naming workload.yaml) when nvcc is
  // missing or the machine has fewer GPUs than the workload needs.
  explicit GpuCascadeEvaluator(GpuCascadeConfig config);
  // With a given builder and pool (GPUs chosen by the caller; tests, several evaluators per node).
  GpuCascadeEvaluator(GpuCascadeConfig config, std::shared_ptr<NvccBuilder> builder, std::shared_ptr<GpuPool> pool);

  EvalResult evaluate(const EvalRequest& request, const JobObserver& jobs) override;
  std::string describe() const override;
  std::string status_note() const override;
  // Builds the health probe ahead of need (it is cached); a no-op when probing is off.
  void warm_up();

  const GpuCascadeConfig& config() const { return config_; }
  GpuPool& pool() { return *pool_; }
  NvccBuilder& builder() { return *builder_; }
  const std::string& arch() const { return arch_; }

 private:
  struct LevelOutcome;
  void set_up_profiler();
  // The launch of one level's ranks on `gpus`, its files in `results`, its logs in logs/<level>.
  LaunchSpec level_spec(const std::string& level, const EvalRequest& request, const std::vector<std::string>& argv,
                        double timeout_s, const std::vector<int>& gpus, const std::filesystem::path& results,
                        const std::filesystem::path& work_dir) const;
  // L4: ncu around `argv` (the bench command); the figures or a note into result.public_metrics.
  void profile_level(const EvalRequest& request, const std::vector<std::string>& argv,
                     const std::filesystem::path& work_dir, const JobObserver& jobs, EvalResult& result);
  LevelOutcome run_level(const std::string& level, const EvalRequest& request, const std::vector<std::string>& argv,
                         double timeout_s, bool exclusive, const std::filesystem::path& results,
                         const std::filesystem::path& work_dir, const JobObserver& jobs);

  GpuCascadeConfig config_;
  std::string arch_;
  std::shared_ptr<NvccBuilder> builder_;
  std::shared_ptr<GpuPool> pool_;
  std::unique_ptr<GpuHealthProbe> probe_;
  std::unique_ptr<ProfileGate> profile_gate_;  // null when profiling is off
  std::optional<std::filesystem::path> ncu_;   // null: ncu_missing_ says why
  std::string ncu_missing_;
};

}  // namespace braid
