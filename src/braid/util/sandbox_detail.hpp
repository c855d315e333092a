// Internals of the sandbox (sandbox.hpp) shared by its files: sandbox_probe.cpp (what the kernel
// allows), sandbox.cpp (the plan, built in the parent), sandbox_child.cpp (namespaces, mounts and
// the keeper, after fork) and sandbox_restrict.cpp (rlimits and Landlock, last before exec).
#pragma once
#include <sys/resource.h>
#include <sys/syscall.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "braid/util/sandbox.hpp"

namespace braid {
namespace sandbox_detail {

// Everything the child needs, built in the parent: the child only reads it (no allocation).
struct PlanData {
  bool enabled = false;
  bool namespaces = false;
  bool fresh_proc = false;
  bool isolate_network = true;
  bool cpu_profile = true;
  int landlock_abi = 0;
  std::string uid_map, gid_map;
  std::string scratch;
  std::vector<std::string> hidden;
  std::vector<std::string> bind_back;                  // read-only paths under hidden ones
  std::vector<std::string> mkdirs;                     // mount points to create inside the hidden tmpfs, in order
  std::vector<std::string> rehide;                     // hidden folders beneath a folder bound back
  std::vector<std::string> scratch_mkdirs;             // every folder from / down to the scratch folder
  std::vector<std::string> private_tmp;                // hidden folders that stay writable (/tmp, /dev/shm)
  std::string tmp_options;                             // their tmpfs options
  std::vector<std::string> writable;                   // Landlock: full access beneath
  std::vector<std::string> read_roots;                 // Landlock without namespaces: what may be read and
                                                       // executed (everything but the hidden folders); empty: "/"
  std::vector<std::string> dev_paths;                  // Landlock: read, write, ioctl on devices
  std::string cgroup_dir, cgroup_procs;                // pids
  std::string memory_cgroup_dir, memory_cgroup_procs;  // resident memory
  rlim_t memory_bytes = 0;
  rlim_t max_processes = 0;
  bool nproc_rlimit = false;
};

// Landlock's ABI, defined here because distributions ship older kernel headers.
struct LandlockRulesetAttr {
  std::uint64_t handled_access_fs;
  std::uint64_t handled_access_net;
  std::uint64_t scoped;
};
struct __attribute__((packed)) LandlockPathBeneathAttr {
  std::uint64_t allowed_access;
  std::int32_t parent_fd;
};
constexpr std::uint64_t kFsExecute = 1ull << 0, kFsWriteFile = 1ull << 1, kFsReadFile = 1ull << 2,
                        kFsReadDir = 1ull << 3, kFsRefer = 1ull << 13, kFsTruncate = 1ull << 14,
                        kFsIoctlDev = 1ull << 15;
constexpr std::uint64_t kNetBindTcp = 1ull << 0, kNetConnectTcp = 1ull << 1;
constexpr std::uint64_t kScopeAbstractUnix = 1ull << 0, kScopeSignal = 1ull << 1;
constexpr unsigned kLandlockVersion = 1u << 0;
constexpr int kRulePathBeneath = 1;

#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#define SYS_landlock_add_rule 445
#define SYS_landlock_restrict_self 446
#endif
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
struct MountAttr {
  std::uint64_t attr_set, attr_clr, propagation, userns_fd;
};
constexpr unsigned kMountAttrRdonly = 0x1;
constexpr unsigned kAtRecursive = 0x8000;

// Steps reported to the parent when one fails (SandboxPlan::step_name).
enum Step {
  kStepCgroup = 10,
  kStepUserNs,
  kStepIdMap,
  kStepNamespaces,
  kStepPrivate,
  kStepHide,
  kStepBindBack,
  kStepReadOnly,
  kStepScratch,
  kStepTmp,
  kStepFork,
  kStepProc,
  kStepLandlock,
  kStepRlimit,
  kStepNoNewPrivs,
};

// Reports a failed step of the child (with errno) through the caller's `fail`.
struct ChildCheck {
  void (*fail)(int step, int err, void* ctx);
  void* ctx;
  void operator()(bool ok, int step) const {
    if (!ok) fail(step, errno, ctx);
  }
};

// Landlock's ABI version on this kernel; 0: none.
int landlock_abi_now();

// Async-signal-safe (the child uses them after fork).
bool write_all(int fd, const char* data, std::size_t n);
bool write_proc_file(const char* path, const char* text);

// The pids and memory cgroup folders the probe found writable, where each plan creates its group
// ("" if none).
std::string& pids_cgroup_parent();
std::string& memory_cgroup_parent();
// A new group `name` under `parent` in the `controller` ("pids" or "memory") hierarchy, holding
// `limit`; "" (nothing left behind, errno kept) when it cannot be made.
std::string make_limited_cgroup(const std::string& parent, const std::string& controller, const std::string& name,
                                const std::string& limit);

}  // namespace sandbox_detail

// SandboxPlan's data; the files of the sandbox pass it on as a PlanData.
struct SandboxPlan::Data : sandbox_detail::PlanData {};

}  // namespace braid
