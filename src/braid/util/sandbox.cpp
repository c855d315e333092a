// The plan of a candidate's sandbox (SandboxPlan), built in the parent before fork: the paths,
// mounts and limits the child applies, and the level in force. The probe is sandbox_probe.cpp,
// the child's side sandbox_child.cpp and sandbox_restrict.cpp.
#include "braid/util/sandbox.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "braid/util/sandbox_detail.hpp"

namespace braid {

using namespace sandbox_detail;

namespace {

// Processes and threads of this real uid now (what RLIMIT_NPROC counts outside a user namespace).
long tasks_of_this_user() {
  long n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name[0] < '1' || name[0] > '9') continue;
    struct stat st {};
    if (::stat(e.path().c_str(), &st) != 0 || st.st_uid != ::getuid()) continue;
    std::error_code task_ec;
    for (auto t = std::filesystem::directory_iterator(e.path() / "task", task_ec);
         !task_ec && t != std::filesystem::directory_iterator(); t.increment(task_ec))
      ++n;
  }
  return n;
}
bool is_beneath(const std::filesystem::path& path, const std::filesystem::path& dir) {
  // Strictly beneath: `dir` itself is not.
  auto rel = path.lexically_relative(dir);
  return !rel.empty() && rel != "." && *rel.begin() != "..";
}
std::filesystem::path canonical_or_normal(const std::filesystem::path& p) {
  std::error_code ec;
  auto c = std::filesystem::weakly_canonical(p, ec);
  return ec ? p.lexically_normal() : c;
}

// Landlock's grants that every sandbox has: the scratch folder, the devices of the profile.
void plan_devices(PlanData& d, const SandboxPolicy& policy) {
  d.writable.push_back(d.scratch);
  if (d.cpu_profile) {
    // The usual character devices, not all of /dev: /dev/shm would be a shared folder outside
    // the work folder (namespaces give the candidate a private one).
    for (const char* p : {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"})
      d.dev_paths.push_back(p);
    return;
  }
  d.dev_paths.push_back("/dev");  // GPUs, NCCL's /dev/shm
  // NCCL's shared memory between the ranks of one evaluation; CUDA's MPS pipes. Not /tmp:
  // TMPDIR is the scratch folder, and a run folder may lie under /tmp.
  std::error_code ec;
  for (const char* p : {"/dev/shm", "/tmp/nvidia-mps"})
    if (std::filesystem::is_directory(p, ec)) d.writable.push_back(p);
  for (const auto& p : policy.writable)
    if (std::filesystem::is_directory(p, ec)) d.writable.push_back(canonical_or_normal(p).string());
}

// Landlock without namespaces only grants: the hidden folders stay unreadable by granting every
// sibling along the way down to them instead of "/", then what is bound back.
void plan_read_roots(PlanData& d, const SandboxPolicy& policy) {
  std::error_code ec;
  std::vector<std::filesystem::path> hidden;
  for (const auto& h : policy.hidden) {
    auto c = canonical_or_normal(h);
    if (c != "/" && std::filesystem::is_directory(c, ec)) hidden.push_back(c);
  }
  auto is_hidden = [&](const std::filesystem::path& p) {
    return std::find(hidden.begin(), hidden.end(), p) != hidden.end();
  };
  auto holds_hidden = [&](const std::filesystem::path& p) {
    for (const auto& h : hidden)
      if (is_beneath(h, p)) return true;
    return false;
  };
  std::vector<std::filesystem::path> stack{"/"};
  while (!hidden.empty() && !stack.empty()) {
    const auto dir = stack.back();
    stack.pop_back();
    if (is_hidden(dir)) continue;
    if (!holds_hidden(dir)) {
      d.read_roots.push_back(dir.string());
      continue;
    }
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) stack.push_back(e.path());
  }
  for (const auto& r : policy.read_only) {
    auto c = canonical_or_normal(r);
    for (const auto& h : hidden)
      if ((c == h || is_beneath(c, h)) && std::filesystem::exists(c, ec)) {
        d.read_roots.push_back(c.string());
        break;
      }
  }
}

// The mounts of the namespace layer: tmpfs over the hidden folders (the outermost ones), the
// read-only folders bound back beneath them, nested hidden ones hidden again, and the mount
// points of the scratch folder's own writable mount.
void plan_mounts(PlanData& d, const SandboxPolicy& policy, const std::filesystem::path& scratch) {
  std::error_code ec;
  std::vector<std::filesystem::path> hidden, top;
  // A private /tmp and /dev/shm: tmpfs like the hidden folders, but writable.
  for (const char* p : {"/tmp", "/dev/shm"})
    if (std::filesystem::is_directory(p, ec)) {
      d.writable.push_back(p);
      d.private_tmp.push_back(p);
      hidden.push_back(p);
    }
  for (const auto& h : policy.hidden) {
    auto c = canonical_or_normal(h);
    if (c == "/" || !std::filesystem::is_directory(c, ec)) continue;
    hidden.push_back(c);
  }
  // Only the outermost hidden folders get a tmpfs first; nested ones are hidden again below
  // if a folder bound back would show them.
  for (const auto& h : hidden) {
    bool nested = false;
    for (const auto& o : hidden) nested = nested || is_beneath(h, o);
    if (!nested) top.push_back(h);
  }
  for (const auto& h : top) d.hidden.push_back(h.string());
  std::vector<std::filesystem::path> back;
  for (const auto& r : policy.read_only) {
    auto c = canonical_or_normal(r);
    if (!std::filesystem::exists(c, ec)) continue;
    for (const auto& h : top)
      if (is_beneath(c, h)) {
        back.push_back(c);
        break;
      }
  }
  for (const auto& b : back) {
    d.bind_back.push_back(b.string());
    for (const auto& h : top) {
      if (!is_beneath(b, h)) continue;
      std::filesystem::path at = h;
      for (const auto& part : b.lexically_relative(h)) {
        at /= part;
        d.mkdirs.push_back(at.string());
      }
    }
  }
  for (const auto& h : hidden)
    for (const auto& b : back)
      if (is_beneath(h, b) || h == b) {
        d.rehide.push_back(h.string());
        break;
      }
  // Mount point of the scratch folder's own writable mount, wherever tmpfs now covers it.
  std::filesystem::path at = "/";
  for (const auto& part : scratch.relative_path()) {
    at /= part;
    d.scratch_mkdirs.push_back(at.string());
  }
}

// Memory (RLIMIT_AS, the private /tmp's size, a memory cgroup) and processes (RLIMIT_NPROC or a
// pids cgroup).
void plan_limits(PlanData& d, const SandboxPolicy& policy, const SandboxSupport& support) {
  d.memory_bytes = policy.memory_bytes;
  static std::atomic<unsigned> sequence{0};
  auto group_name = [] { return fmt::format("braid-{}-{}", ::getpid(), sequence++); };
  if (policy.resident_bytes > 0 && ::geteuid() == 0 && support.memory_cgroup) {
    d.memory_cgroup_dir =
        make_limited_cgroup(memory_cgroup_parent(), "memory", group_name(), std::to_string(policy.resident_bytes));
    if (!d.memory_cgroup_dir.empty()) d.memory_cgroup_procs = d.memory_cgroup_dir + "/cgroup.procs";
  }
  // Files in the private /tmp are memory: bounded like the candidate's address space.
  d.tmp_options =
      policy.memory_bytes > 0 ? fmt::format("mode=1777,size={}", policy.memory_bytes) : "mode=1777,size=25%";
  if (policy.max_processes <= 0) return;
  d.max_processes = static_cast<rlim_t>(policy.max_processes);
  // RLIMIT_NPROC binds non-root users only (root: the pids cgroup below). In a user
  // namespace of its own the count starts afresh; without one it counts every process and
  // thread of the user, so the ones running now are added to the limit.
  d.nproc_rlimit = ::geteuid() != 0;
  if (d.nproc_rlimit && !d.namespaces) d.max_processes += static_cast<rlim_t>(tasks_of_this_user());
  if (::geteuid() != 0 || !support.pids_cgroup) return;
  d.cgroup_dir = make_limited_cgroup(pids_cgroup_parent(), "pids", group_name(), std::to_string(policy.max_processes));
  if (!d.cgroup_dir.empty()) d.cgroup_procs = d.cgroup_dir + "/cgroup.procs";
}

// The level in force, with the reason for every layer left out.
std::string describe_level(const PlanData& d, const SandboxPolicy& policy, const SandboxSupport& support) {
  std::vector<std::string> layers, missing;
  if (d.namespaces) layers.push_back(d.isolate_network ? "namespaces" : "namespaces(host network)");
  else if (!d.cpu_profile) missing.push_back("gpu profile keeps the host's pid/net/ipc namespaces");
  else if (!policy.namespaces) missing.push_back("no namespaces (turned off)");
  else missing.push_back(support.notes.empty() ? "no namespaces" : support.notes);
  if (d.namespaces && !d.fresh_proc) missing.push_back("host /proc visible");
  if (d.landlock_abi > 0) layers.push_back(fmt::format("landlock{}", d.landlock_abi));
  else missing.push_back(policy.no_landlock.empty() ? "no landlock" : "no landlock (" + policy.no_landlock + ")");
  if (!d.namespaces && d.landlock_abi == 0)
    missing.push_back("files outside the work folder readable and writable as braid's user");
  if (!d.namespaces) layers.push_back("keeper");
  layers.push_back("rlimits");
  if (!d.cgroup_procs.empty()) layers.push_back("pids-cgroup");
  if (!d.memory_cgroup_procs.empty()) layers.push_back("memory-cgroup");
  else if (policy.resident_bytes > 0)
    missing.push_back(::geteuid() == 0 ? "resident memory not limited (no writable memory cgroup)"
                                       : "resident memory not limited (not root)");
  if (d.nproc_rlimit) layers.push_back("nproc");
  if (policy.max_processes > 0 && !d.nproc_rlimit && d.cgroup_procs.empty())
    missing.push_back("max_processes not enforced (root, no writable pids cgroup)");
  if (d.landlock_abi > 0 && d.landlock_abi < 4 && d.isolate_network && !d.namespaces)
    missing.push_back("network not isolated (landlock < 4, no namespaces)");
  std::string level;
  for (const auto& l : layers) level += (level.empty() ? "" : "+") + l;
  if (!missing.empty()) {
    level += " (";
    for (std::size_t i = 0; i < missing.size(); ++i) level += (i ? "; " : "") + missing[i];
    level += ")";
  }
  return level;
}

}  // namespace

SandboxPlan::SandboxPlan(const SandboxPolicy& policy, const SandboxSupport& support) : d_(std::make_unique<Data>()) {
  Data& d = *d_;
  d.enabled = policy.enabled;
  if (!policy.enabled) {
    level_ = "off";
    return;
  }
  d.cpu_profile = policy.profile == SandboxProfile::Cpu;
  d.namespaces = support.namespaces && d.cpu_profile && policy.namespaces;
  d.fresh_proc = support.fresh_proc;
  d.isolate_network = !policy.network;
  d.landlock_abi = policy.no_landlock.empty() ? support.landlock_abi : 0;
  d.uid_map = fmt::format("0 {} 1", ::geteuid());
  d.gid_map = fmt::format("0 {} 1", ::getegid());
  const std::filesystem::path scratch = canonical_or_normal(policy.scratch);
  d.scratch = scratch.string();
  plan_devices(d, policy);
  if (!d.namespaces && d.landlock_abi > 0) plan_read_roots(d, policy);
  if (d.namespaces) plan_mounts(d, policy, scratch);
  plan_limits(d, policy, support);
  level_ = describe_level(d, policy, support);
}

SandboxPlan::~SandboxPlan() {
  if (!d_) return;
  // Its processes are gone once the evaluation has ended; an rmdir may race their exit.
  for (const std::string* dir : {&d_->cgroup_dir, &d_->memory_cgroup_dir})
    if (!dir->empty())
      for (int i = 0; i < 200 && ::rmdir(dir->c_str()) != 0 && errno == EBUSY; ++i) ::usleep(5000);
}

const char* SandboxPlan::step_name(int step) {
  switch (step) {
    case kStepCgroup: return "joining the pids or memory cgroup";
    case kStepUserNs: return "user namespace";
    case kStepIdMap: return "uid/gid map";
    case kStepNamespaces: return "mount/pid/net/ipc namespaces";
    case kStepPrivate: return "private mounts";
    case kStepHide: return "hiding folders";
    case kStepBindBack: return "binding folders back";
    case kStepReadOnly: return "read-only remount";
    case kStepScratch: return "writable scratch folder";
    case kStepTmp: return "private /tmp";
    case kStepFork: return "keeper fork";
    case kStepProc: return "mounting /proc";
    case kStepLandlock: return "landlock";
    case kStepRlimit: return "resource limits";
    case kStepNoNewPrivs: return "no_new_privs";
    default: return "setup";
  }
}

}  // namespace braid
