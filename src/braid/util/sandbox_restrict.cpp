// The candidate's process, last before exec (SandboxPlan::restrict_in_child): resource limits,
// no_new_privs and Landlock. Runs between fork and exec: async-signal-safe calls only.
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "braid/util/sandbox.hpp"
#include "braid/util/sandbox_detail.hpp"

namespace braid {

using namespace sandbox_detail;

namespace {

// No core files; the address space and (non-root users) the process count of the plan.
void set_rlimits(const PlanData& d, const ChildCheck& check) {
  struct rlimit none {
    0, 0
  };
  ::setrlimit(RLIMIT_CORE, &none);
  if (d.memory_bytes > 0) {
    struct rlimit as {
      d.memory_bytes, d.memory_bytes
    };
    check(::setrlimit(RLIMIT_AS, &as) == 0, kStepRlimit);
  }
  if (d.nproc_rlimit) {
    struct rlimit np {
      d.max_processes, d.max_processes
    };
    check(::setrlimit(RLIMIT_NPROC, &np) == 0, kStepRlimit);
  }
}

// A rule granting `access` (within the ruleset's `fs` rights) beneath `path`; a path this
// machine does not have is skipped.
void allow_beneath(int ruleset, std::uint64_t fs, const char* path, std::uint64_t access, const ChildCheck& check) {
  int fd = ::open(path, O_PATH | O_CLOEXEC);
  if (fd < 0) return;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && !S_ISDIR(st.st_mode))
    access &= kFsExecute | kFsWriteFile | kFsReadFile | kFsTruncate | kFsIoctlDev;
  LandlockPathBeneathAttr rule{access & fs, fd};
  long r = ::syscall(SYS_landlock_add_rule, ruleset, kRulePathBeneath, &rule, 0u);
  ::close(fd);
  check(r == 0, kStepLandlock);
}

// Reads beneath the read roots ("/" without any), devices, full access beneath the writable
// folders; (ABI 4+) no TCP; (ABI 6+, CPU profile) signals and abstract sockets only within.
void apply_landlock(const PlanData& d, const ChildCheck& check) {
  const int abi = d.landlock_abi;
  std::uint64_t fs = (1ull << 13) - 1;
  if (abi >= 2) fs |= kFsRefer;
  if (abi >= 3) fs |= kFsTruncate;
  if (abi >= 5) fs |= kFsIoctlDev;
  LandlockRulesetAttr attr{fs, 0, 0};
  if (abi >= 4 && d.isolate_network && d.cpu_profile) attr.handled_access_net = kNetBindTcp | kNetConnectTcp;
  // Signals and abstract sockets only within the sandbox; the GPU profile's ranks (each in a
  // sandbox of its own) exchange NCCL handles over abstract sockets.
  if (abi >= 6 && d.cpu_profile) attr.scoped = kScopeAbstractUnix | kScopeSignal;
  const std::size_t size = abi >= 6 ? sizeof(LandlockRulesetAttr) : abi >= 4 ? 16 : 8;
  int ruleset = static_cast<int>(::syscall(SYS_landlock_create_ruleset, &attr, size, 0u));
  check(ruleset >= 0, kStepLandlock);
  const std::uint64_t read = kFsExecute | kFsReadFile | kFsReadDir;
  if (d.read_roots.empty()) allow_beneath(ruleset, fs, "/", read, check);
  for (const auto& p : d.read_roots) allow_beneath(ruleset, fs, p.c_str(), read, check);
  for (const auto& p : d.dev_paths)
    allow_beneath(ruleset, fs, p.c_str(), read | kFsWriteFile | kFsTruncate | kFsIoctlDev, check);
  for (const auto& p : d.writable) allow_beneath(ruleset, fs, p.c_str(), fs, check);
  // CUDA names its threads (pthread_setname_np writes /proc/self/task/<tid>/comm) and fails to
  // initialise when it cannot: the GPU profile may write its own /proc entry, resolved here, in
  // the process that execs the candidate (same pid after exec), never another process's.
  if (!d.cpu_profile) allow_beneath(ruleset, fs, "/proc/self", read | kFsWriteFile | kFsTruncate, check);
  check(::syscall(SYS_landlock_restrict_self, ruleset, 0u) == 0, kStepLandlock);
  ::close(ruleset);
}

}  // namespace

void SandboxPlan::restrict_in_child(void (*fail)(int, int, void*), void* ctx) const {
  const Data& d = *d_;
  if (!d.enabled) return;
  const ChildCheck check{fail, ctx};
  set_rlimits(d, check);
  check(::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0, kStepNoNewPrivs);
  if (d.landlock_abi > 0) apply_landlock(d, check);
}

}  // namespace braid
