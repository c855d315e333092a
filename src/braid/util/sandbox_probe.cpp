// What this kernel and container allow (sandbox_support), probed once per braid process.
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <filesystem>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

#include "braid/util/fs.hpp"
#include "braid/util/sandbox.hpp"
#include "braid/util/sandbox_detail.hpp"

namespace braid {
namespace sandbox_detail {

int landlock_abi_now() {
  long abi = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, kLandlockVersion);
  return abi > 0 ? static_cast<int>(abi) : 0;
}

std::string& pids_cgroup_parent() {
  static std::string parent;
  return parent;
}
std::string& memory_cgroup_parent() {
  static std::string parent;
  return parent;
}
std::string make_limited_cgroup(const std::string& parent, const std::string& controller, const std::string& name,
                                const std::string& limit) {
  const std::string group = parent + "/" + name;
  if (::mkdir(group.c_str(), 0755) != 0) return {};
  // pids.max in v1 and v2; memory.max in v2, memory.limit_in_bytes in v1.
  std::string file = group + "/pids.max";
  if (controller == "memory")
    file = group + (std::filesystem::exists(group + "/memory.max") ? "/memory.max" : "/memory.limit_in_bytes");
  if (write_proc_file(file.c_str(), limit.c_str())) return group;
  const int saved = errno;
  ::rmdir(group.c_str());
  errno = saved;
  return {};
}

}  // namespace sandbox_detail

using namespace sandbox_detail;

namespace {

// In the probe's child: namespaces, mounts and a /proc as a candidate's sandbox would have them.
// Reports {last step reached, errno} to `report_fd`: 100 all of it, 99 all but the /proc.
[[noreturn]] void probe_in_child(int report_fd, const std::string& uid_map, const std::string& gid_map) {
  int result[2] = {0, 0};  // {last step reached, errno}
  auto fail = [&](int step) {
    result[0] = step;
    result[1] = errno;
    write_all(report_fd, reinterpret_cast<char*>(result), sizeof result);
    ::_exit(1);
  };
  if (::unshare(CLONE_NEWUSER) != 0) fail(kStepUserNs);
  write_proc_file("/proc/self/setgroups", "deny");
  if (!write_proc_file("/proc/self/uid_map", uid_map.c_str()) ||
      !write_proc_file("/proc/self/gid_map", gid_map.c_str()))
    fail(kStepIdMap);
  if (::unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC) != 0) fail(kStepNamespaces);
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) fail(kStepPrivate);
  if (::mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m") != 0) fail(kStepHide);
  MountAttr ro{kMountAttrRdonly, 0, 0, 0};
  if (::syscall(SYS_mount_setattr, AT_FDCWD, "/", kAtRecursive, &ro, sizeof ro) != 0) fail(kStepReadOnly);
  pid_t init = ::fork();
  if (init < 0) fail(kStepFork);
  if (init == 0) {
    if (::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) ::_exit(3);
    ::_exit(0);
  }
  int status = 0;
  while (::waitpid(init, &status, 0) < 0 && errno == EINTR) {
  }
  result[0] = WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 100 : 99;
  write_all(report_fd, reinterpret_cast<char*>(result), sizeof result);
  ::_exit(0);
}

// Whether namespaces with tmpfs, bind and read-only remounts work, and a /proc can be mounted;
// tried in a throw-away child so that braid itself is never changed.
void probe_namespaces(SandboxSupport& s) {
  const std::string uid_map = fmt::format("0 {} 1", ::geteuid());
  const std::string gid_map = fmt::format("0 {} 1", ::getegid());
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) {
    s.notes += "no namespaces (pipe failed); ";
    return;
  }
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(report[0]);
    ::close(report[1]);
    s.notes += "no namespaces (fork failed); ";
    return;
  }
  if (pid == 0) {
    ::close(report[0]);
    probe_in_child(report[1], uid_map, gid_map);
  }
  ::close(report[1]);
  int result[2] = {0, 0};
  ssize_t got = ::read(report[0], result, sizeof result);
  ::close(report[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (got != static_cast<ssize_t>(sizeof result)) {
    s.notes += "no namespaces (probe died); ";
  } else if (result[0] >= 99) {
    s.namespaces = true;
    s.fresh_proc = result[0] == 100;
    if (!s.fresh_proc) s.notes += "no /proc of its own (the host's /proc is visible, read-only); ";
  } else {
    s.notes += fmt::format("no namespaces ({}: {}); ", SandboxPlan::step_name(result[0]), std::strerror(result[1]));
  }
}

// The folder of this process in the cgroup v1 hierarchy of `controller` (or v2 with it enabled),
// where braid (as root) may create one group per candidate.
std::string find_cgroup_parent(const std::string& controller) {
  auto mounts = try_read_file("/proc/self/mounts");
  auto groups = try_read_file("/proc/self/cgroup");
  if (!mounts || !groups) return {};
  std::string v1_mount, v2_mount;
  std::size_t start = 0;
  while (start < mounts->size()) {
    std::size_t end = mounts->find('\n', start);
    if (end == std::string::npos) end = mounts->size();
    std::string line = mounts->substr(start, end - start);
    start = end + 1;
    char dev[256], dir[1024], type[64], opts[1024];
    if (std::sscanf(line.c_str(), "%255s %1023s %63s %1023s", dev, dir, type, opts) != 4) continue;
    std::string o = std::string(",") + opts + ",";
    if (std::string(type) == "cgroup" && o.find("," + controller + ",") != std::string::npos) v1_mount = dir;
    if (std::string(type) == "cgroup2" && v2_mount.empty()) v2_mount = dir;
  }
  start = 0;
  std::string v1_path, v2_path;
  while (start < groups->size()) {
    std::size_t end = groups->find('\n', start);
    if (end == std::string::npos) end = groups->size();
    std::string line = groups->substr(start, end - start);
    start = end + 1;
    auto c1 = line.find(':'), c2 = line.find(':', c1 + 1);
    if (c1 == std::string::npos || c2 == std::string::npos) continue;
    std::string controllers = "," + line.substr(c1 + 1, c2 - c1 - 1) + ",";
    if (controllers.find("," + controller + ",") != std::string::npos) v1_path = line.substr(c2 + 1);
    if (line.compare(0, 3, "0::") == 0) v2_path = line.substr(3);
  }
  if (!v1_mount.empty()) return v1_mount + (v1_path == "/" ? "" : v1_path);
  if (!v2_mount.empty()) {
    std::string dir = v2_mount + (v2_path == "/" ? "" : v2_path);
    auto enabled = try_read_file(dir + "/cgroup.subtree_control").value_or("");
    if (enabled.find(controller) != std::string::npos) return dir;
  }
  return {};
}

// A pids or memory cgroup braid (as root) may make groups in: one made and removed again. For
// pids, RLIMIT_NPROC in the user namespace binds non-root users instead.
void probe_cgroup(const std::string& controller, const char* probe_limit, bool& supported, std::string& parent_out,
                  SandboxSupport& s) {
  if (::geteuid() != 0) return;
  const std::string parent = find_cgroup_parent(controller);
  if (parent.empty()) {
    s.notes += "no " + controller + " cgroup; ";
    return;
  }
  const std::string dir =
      make_limited_cgroup(parent, controller, fmt::format("braid-probe-{}-{}", controller, ::getpid()), probe_limit);
  if (dir.empty()) {
    s.notes += fmt::format("{} cgroup not writable or takes no limit ({}); ", controller, std::strerror(errno));
    return;
  }
  ::rmdir(dir.c_str());
  supported = true;
  parent_out = parent;
}

}  // namespace

const SandboxSupport& sandbox_support() {
  static const SandboxSupport support = [] {
    SandboxSupport s;
    s.landlock_abi = landlock_abi_now();
    if (s.landlock_abi == 0) s.notes += "no Landlock (kernel without it, or not in the lsm= list); ";
    probe_namespaces(s);
    probe_cgroup("pids", "64", s.pids_cgroup, pids_cgroup_parent(), s);
    probe_cgroup("memory", "1073741824", s.memory_cgroup, memory_cgroup_parent(), s);
    while (!s.notes.empty() && (s.notes.back() == ' ' || s.notes.back() == ';')) s.notes.pop_back();
    return s;
  }();
  return support;
}

}  // namespace braid
