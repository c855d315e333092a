// workload.yaml's `evaluator.slurm` section: where and how the Slurm backend submits jobs.
//
//   evaluator:
//     kind: cascade                  # build runs here; run and bench run as one Slurm job
//     build: ...; run: ...; bench: ...
//     slurm:
//       partition: gpu               # sbatch --partition   (optional, all strings)
//       account: proj42              # sbatch --account
//       qos: normal                  # sbatch --qos
//       time: "00:10:00"             # sbatch --time; default: run + bench timeouts + 1 min
//       ranks: 2                     # tasks per evaluation (srun --ntasks), default 1
//       gpus_per_task: 1             # srun/sbatch --gpus-per-task, default 0 (no GPUs asked)
//       gpus_per_node: 8             # with it, nodes = ceil(ranks * gpus_per_task / gpus_per_node)
//       nodes: 2                     # sbatch --nodes (overrides gpus_per_node's count)
//       cpus_per_task: 1             # sbatch --cpus-per-task
//       mem: "16G"                   # sbatch --mem
//       shared_dir: /scratch/braid   # job folders, on a file system the nodes share;
//                                    # default <results>/slurm_jobs
//       sbatch_args: ["--constraint=h100"]   # passed to sbatch as written
//       max_requeues: 3              # preempted / node-failed / cancelled jobs resubmitted
//       poll_interval_s: 0.5         # how often braid looks for finished jobs
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "braid/util/json.hpp"

namespace YAML {
class Node;
}

namespace braid {

struct SlurmConfig {
  std::string partition, account, qos;
  std::string time;  // sbatch --time; empty: derived from the cascade's timeouts
  int ranks = 1;
  int gpus_per_task = 0;
  int gpus_per_node = 0;
  int nodes = 0;     // 0: one node, or derived from gpus_per_node
  int cpus_per_task = 1;
  std::string mem;
  std::filesystem::path shared_dir;  // empty: <results>/slurm_jobs
  std::vector<std::string> sbatch_args;
  int max_requeues = 3;
  double poll_interval_s = 0.5;

  // Nodes the job asks for: `nodes` when set, else enough nodes for every rank's GPUs.
  int node_count() const;
  static SlurmConfig from_json(const json& section);
};

// Validates the `slurm` mapping of an evaluator section (yaml_file names the file in errors,
// with the line) and returns it as JSON; throws UserError.
json read_slurm_section(const YAML::Node& node, const std::string& yaml_file);

// Whether `text` is a Slurm time limit: "M", "M:S", "H:M:S", "D-H", "D-H:M", "D-H:M:S".
bool is_slurm_time(const std::string& text);

}  // namespace braid
