// The sandbox of a candidate's processes (docs/sandbox.md), applied by run_subprocess between
// fork and exec, with Linux primitives only (no helper binary needed on a GPU node).
//
// Layers, each used where this kernel or container allows it (probed once, see
// sandbox_support()); what is in force is named by SandboxPlan::level and stored with every
// evaluation, never degraded silently:
//   namespaces  user + mount (+ pid, net, ipc for the CPU profile): the run folder and the
//               home are replaced by empty read-only folders, the candidate's own folder is
//               bound back read-write, everything else is read-only; a private /tmp and
//               /dev/shm; no network; a PID namespace whose init ends every descendant when
//               the candidate's main process ends (a `setsid` double fork included).
//   landlock    writes only beneath the scratch folder (and /dev, /tmp, /dev/shm as the
//               profile allows); no TCP; (CPU profile) no signals or abstract sockets outside.
//   keeper      without a PID namespace, a subreaper process between braid and the candidate
//               kills every descendant when the candidate ends or braid stops it.
//   rlimits     address space (memory_bytes), processes (max_processes: RLIMIT_NPROC for
//               non-root users, "nproc"; a pids cgroup where braid runs as root, which
//               RLIMIT_NPROC does not bind, "pids-cgroup"), no core files; resident memory
//               (resident_bytes) through a memory cgroup where braid runs as root, "memory-cgroup".
// The GPU profile (the ranks of a GPU evaluation, docs/sandbox.md) keeps the host's PID, network
// and IPC namespaces and /dev/shm (NCCL's bootstrap over TCP, its shared memory and its
// abstract-socket handle exchange between the ranks of one evaluation): Landlock confines reads
// and writes as without namespaces, the keeper ends every descendant, and memory is bounded by
// resident_bytes, not memory_bytes (CUDA reserves far more address space than it uses).
#pragma once
#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace braid {

enum class SandboxProfile { Cpu, Gpu };

struct SandboxPolicy {
  bool enabled = false;
  SandboxProfile profile = SandboxProfile::Cpu;
  std::filesystem::path scratch;                 // read-write: the evaluation's own folder
  std::vector<std::filesystem::path> read_only;  // kept visible (bound back) under hidden ones
  std::vector<std::filesystem::path> hidden;     // replaced by empty folders (run folder, home)
  std::vector<std::filesystem::path> writable;   // GPU profile: more writable folders (a
                                                 // launcher's short TMPDIR)
  bool network = false;                          // CPU profile: keep the host's network
  std::size_t memory_bytes = 0;                  // RLIMIT_AS per process; 0: none
  std::size_t resident_bytes = 0;                // memory cgroup over all its processes (root,
                                                 // where one is writable; for CUDA, whose
                                                 // address space RLIMIT_AS cannot bound); 0: none
  long max_processes = 0;                        // processes and threads; 0: none
  std::string no_landlock;                       // non-empty: no Landlock layer, for this reason
                                                 // (a launcher whose children need more)
  bool namespaces = true;                        // false: never the namespace layer (tests of
                                                 // the fallback, hosts where it breaks tools)
};

// What this kernel and container allow, probed once per braid process by a throw-away child.
struct SandboxSupport {
  bool namespaces = false;     // user + mount + pid + net + ipc namespaces, tmpfs and bind mounts
  bool fresh_proc = false;     // a /proc of the PID namespace could be mounted
  int landlock_abi = 0;        // 0: no Landlock
  bool pids_cgroup = false;    // a pids cgroup braid may create (root only)
  bool memory_cgroup = false;  // a memory cgroup braid may create (root only)
  std::string notes;           // why a layer is missing
};
const SandboxSupport& sandbox_support();

// Everything the child needs, built in the parent (the child may not allocate).
class SandboxPlan {
 public:
  SandboxPlan(const SandboxPolicy& policy, const SandboxSupport& support);
  ~SandboxPlan();
  SandboxPlan(const SandboxPlan&) = delete;
  SandboxPlan& operator=(const SandboxPlan&) = delete;

  // e.g. "namespaces+landlock7+rlimits" or "landlock7+keeper+rlimits (no namespaces: ...)".
  const std::string& level() const { return level_; }

  // In the child, after fork: applies the layers up to the point where the candidate's process
  // is forked (namespaces, mounts, keeper). Returns only in the process that must exec the
  // candidate; `fail(step, errno)` reports and exits. Only async-signal-safe calls.
  void enter_in_child(void (*fail)(int step, int err, void* ctx), void* ctx, const int* keep_fds, int n_keep_fds) const;
  // In the candidate's process, last before exec: Landlock and rlimits.
  void restrict_in_child(void (*fail)(int step, int err, void* ctx), void* ctx) const;
  // Name of a step number passed to `fail`.
  static const char* step_name(int step);

 private:
  struct Data;
  std::unique_ptr<Data> d_;
  std::string level_;
};

}  // namespace braid
