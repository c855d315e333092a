#include "braid/util/sandbox.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include <fmt/format.h>

#include "braid/util/fs.hpp"

namespace braid {
namespace {

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
  kStepCgroup = 10, kStepUserNs, kStepIdMap, kStepNamespaces, kStepPrivate, kStepHide, kStepBindBack,
  kStepReadOnly, kStepScratch, kStepTmp, kStepFork, kStepProc, kStepLandlock, kStepRlimit, kStepNoNewPrivs,
};

int landlock_abi_now() {
  long abi = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, kLandlockVersion);
  return abi > 0 ? static_cast<int>(abi) : 0;
}

// --- async-signal-safe helpers for the child ---

bool write_all(int fd, const char* data, std::size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

bool write_proc_file(const char* path, const char* text) {
  int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = write_all(fd, text, std::strlen(text));
  int saved = errno;
  ::close(fd);
  errno = saved;
  return ok;
}

// Parent pid from /proc/<pid>/stat, or -1.
long parent_of(const char* pid_name) {
  char path[64] = "/proc/";
  std::size_t len = 6;
  for (const char* p = pid_name; *p && len < 40; ++p) path[len++] = *p;
  const char* tail = "/stat";
  for (const char* p = tail; *p; ++p) path[len++] = *p;
  path[len] = 0;
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[512];
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  char* close = nullptr;
  for (char* p = buf; *p; ++p)
    if (*p == ')') close = p;
  if (!close || close[1] != ' ' || !close[2] || close[3] != ' ') return -1;
  long ppid = 0;
  for (char* p = close + 4; *p >= '0' && *p <= '9'; ++p) ppid = ppid * 10 + (*p - '0');
  return ppid;
}

// SIGKILLs every child of this process (a subreaper: orphaned descendants are re-parented
// here), reaps, and repeats until none is left.
void kill_all_children() {
  const long self = ::getpid();
  for (int round = 0; round < 100000; ++round) {
    int found = 0;
    int dir = ::open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir >= 0) {
      alignas(8) char buf[4096];
      while (true) {
        long n = ::syscall(SYS_getdents64, dir, buf, sizeof buf);
        if (n <= 0) break;
        for (long off = 0; off < n;) {
          auto* reclen = reinterpret_cast<unsigned short*>(buf + off + 16);
          const char* name = buf + off + 19;
          if (name[0] >= '1' && name[0] <= '9' && parent_of(name) == self) {
            long pid = 0;
            for (const char* p = name; *p >= '0' && *p <= '9'; ++p) pid = pid * 10 + (*p - '0');
            ::kill(static_cast<pid_t>(pid), SIGKILL);
            ++found;
          }
          off += *reclen;
        }
      }
      ::close(dir);
    }
    int status = 0;
    bool any = false;
    while (true) {
      pid_t r = ::waitpid(-1, &status, WNOHANG);
      if (r > 0) {
        any = true;
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && errno == ECHILD && found == 0) return;
      break;
    }
    if (!any) {
      struct timespec ts {0, 1000000};
      ::nanosleep(&ts, nullptr);
    }
  }
}

volatile sig_atomic_t g_keeper_stop = 0;
void on_keeper_signal(int) { g_keeper_stop = 1; }

// Ends this process the way `status` (from waitpid) says the candidate ended.
[[noreturn]] void relay_status(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    ::sigaction(sig, &dfl, nullptr);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    ::sigprocmask(SIG_UNBLOCK, &set, nullptr);
    ::prctl(PR_SET_DUMPABLE, 0);  // no core file of the keeper
    ::kill(::getpid(), sig);
    ::_exit(128 + sig);
  }
  ::_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 127);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Probe

namespace {

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
    int result[2] = {0, 0};  // {last step reached, errno}
    auto fail = [&](int step) {
      result[0] = step;
      result[1] = errno;
      write_all(report[1], reinterpret_cast<char*>(result), sizeof result);
      ::_exit(1);
    };
    if (::unshare(CLONE_NEWUSER) != 0) fail(kStepUserNs);
    write_proc_file("/proc/self/setgroups", "deny");
    if (!write_proc_file("/proc/self/uid_map", uid_map.c_str()) || !write_proc_file("/proc/self/gid_map", gid_map.c_str()))
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
    write_all(report[1], reinterpret_cast<char*>(result), sizeof result);
    ::_exit(0);
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

// The folder of this process in the cgroup v1 `pids` hierarchy (or v2 with pids enabled),
// where braid (as root) may create one group per candidate.
std::string find_pids_cgroup_parent() {
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
    if (std::string(type) == "cgroup" && o.find(",pids,") != std::string::npos) v1_mount = dir;
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
    if (controllers.find(",pids,") != std::string::npos) v1_path = line.substr(c2 + 1);
    if (line.compare(0, 3, "0::") == 0) v2_path = line.substr(3);
  }
  if (!v1_mount.empty()) return v1_mount + (v1_path == "/" ? "" : v1_path);
  if (!v2_mount.empty()) {
    std::string dir = v2_mount + (v2_path == "/" ? "" : v2_path);
    auto enabled = try_read_file(dir + "/cgroup.subtree_control").value_or("");
    if (enabled.find("pids") != std::string::npos) return dir;
  }
  return {};
}

std::string& pids_cgroup_parent() {
  static std::string parent;
  return parent;
}

void probe_pids_cgroup(SandboxSupport& s) {
  if (::geteuid() != 0) return;  // RLIMIT_NPROC in the user namespace binds non-root users
  std::string parent = find_pids_cgroup_parent();
  if (parent.empty()) {
    s.notes += "no pids cgroup; ";
    return;
  }
  const std::string dir = parent + fmt::format("/braid-probe-{}", ::getpid());
  if (::mkdir(dir.c_str(), 0755) != 0) {
    s.notes += fmt::format("pids cgroup not writable ({}); ", std::strerror(errno));
    return;
  }
  bool ok = write_proc_file((dir + "/pids.max").c_str(), "64");
  ::rmdir(dir.c_str());
  if (!ok) {
    s.notes += "pids cgroup has no pids.max; ";
    return;
  }
  s.pids_cgroup = true;
  pids_cgroup_parent() = parent;
}

}  // namespace

const SandboxSupport& sandbox_support() {
  static const SandboxSupport support = [] {
    SandboxSupport s;
    s.landlock_abi = landlock_abi_now();
    if (s.landlock_abi == 0) s.notes += "no Landlock (kernel without it, or not in the lsm= list); ";
    probe_namespaces(s);
    probe_pids_cgroup(s);
    while (!s.notes.empty() && (s.notes.back() == ' ' || s.notes.back() == ';')) s.notes.pop_back();
    return s;
  }();
  return support;
}

// ---------------------------------------------------------------------------------------------
// Plan

struct SandboxPlan::Data {
  bool enabled = false;
  bool namespaces = false;
  bool fresh_proc = false;
  bool isolate_network = true;
  bool cpu_profile = true;
  int landlock_abi = 0;
  std::string uid_map, gid_map;
  std::string scratch;
  std::vector<std::string> hidden;
  std::vector<std::string> bind_back;      // read-only paths under hidden ones
  std::vector<std::string> mkdirs;         // mount points to create inside the hidden tmpfs, in order
  std::vector<std::string> rehide;         // hidden folders beneath a folder bound back
  std::vector<std::string> scratch_mkdirs; // every folder from / down to the scratch folder
  std::vector<std::string> private_tmp;    // hidden folders that stay writable (/tmp, /dev/shm)
  std::string tmp_options;                 // their tmpfs options
  std::vector<std::string> writable;       // Landlock: full access beneath
  std::vector<std::string> read_roots;     // Landlock without namespaces: what may be read and
                                           // executed (everything but the hidden folders); empty: "/"
  std::vector<std::string> dev_paths;      // Landlock: read, write, ioctl on devices
  std::string cgroup_dir, cgroup_procs;
  rlim_t memory_bytes = 0;
  rlim_t max_processes = 0;
  bool nproc_rlimit = false;
};

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
  d.landlock_abi = support.landlock_abi;
  d.uid_map = fmt::format("0 {} 1", ::geteuid());
  d.gid_map = fmt::format("0 {} 1", ::getegid());
  const std::filesystem::path scratch = canonical_or_normal(policy.scratch);
  d.scratch = scratch.string();
  d.writable.push_back(d.scratch);
  if (d.cpu_profile) {
    // The usual character devices, not all of /dev: /dev/shm would be a shared folder outside
    // the work folder (namespaces give the candidate a private one).
    for (const char* p : {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"})
      d.dev_paths.push_back(p);
  } else {
    d.dev_paths.push_back("/dev");  // GPUs, NCCL's /dev/shm
  }
  std::error_code ec;
  if (!d.cpu_profile) {
    // NCCL's shared memory between the ranks of one evaluation; CUDA's MPS pipes. Not /tmp:
    // TMPDIR is the scratch folder, and a run folder may lie under /tmp.
    for (const char* p : {"/dev/shm", "/tmp/nvidia-mps"})
      if (std::filesystem::is_directory(p, ec)) d.writable.push_back(p);
  }
  if (!d.namespaces && d.landlock_abi > 0 && d.cpu_profile) {
    // Landlock only grants: the hidden folders stay unreadable by granting every sibling along
    // the way down to them instead of "/", then what is bound back.
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
  if (d.namespaces) {
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
  d.memory_bytes = policy.memory_bytes;
  // Files in the private /tmp are memory: bounded like the candidate's address space.
  d.tmp_options = policy.memory_bytes > 0 ? fmt::format("mode=1777,size={}", policy.memory_bytes) : "mode=1777,size=25%";
  if (policy.max_processes > 0) {
    d.max_processes = static_cast<rlim_t>(policy.max_processes);
    // RLIMIT_NPROC binds non-root users only (root: the pids cgroup below). In a user
    // namespace of its own the count starts afresh; without one it counts every process and
    // thread of the user, so the ones running now are added to the limit.
    d.nproc_rlimit = ::geteuid() != 0;
    if (d.nproc_rlimit && !d.namespaces) d.max_processes += static_cast<rlim_t>(tasks_of_this_user());
    if (::geteuid() == 0 && support.pids_cgroup) {
      static std::atomic<unsigned> sequence{0};
      d.cgroup_dir = pids_cgroup_parent() + fmt::format("/braid-{}-{}", ::getpid(), sequence++);
      if (::mkdir(d.cgroup_dir.c_str(), 0755) == 0 &&
          write_proc_file((d.cgroup_dir + "/pids.max").c_str(), std::to_string(policy.max_processes).c_str())) {
        d.cgroup_procs = d.cgroup_dir + "/cgroup.procs";
      } else {
        ::rmdir(d.cgroup_dir.c_str());
        d.cgroup_dir.clear();
      }
    }
  }

  // The level in force, with the reason for every layer left out.
  std::vector<std::string> layers, missing;
  if (d.namespaces) layers.push_back(d.isolate_network ? "namespaces" : "namespaces(host network)");
  else if (!d.cpu_profile) missing.push_back("gpu profile keeps the host's pid/net/ipc namespaces");
  else if (!policy.namespaces) missing.push_back("no namespaces (turned off)");
  else missing.push_back(support.notes.empty() ? "no namespaces" : support.notes);
  if (d.namespaces && !d.fresh_proc) missing.push_back("host /proc visible");
  if (d.landlock_abi > 0) layers.push_back(fmt::format("landlock{}", d.landlock_abi));
  else missing.push_back("no landlock");
  if (!d.namespaces && d.cpu_profile && d.landlock_abi == 0)
    missing.push_back("files outside the work folder readable and writable as braid's user");
  if (!d.namespaces) layers.push_back("keeper");
  layers.push_back("rlimits");
  if (!d.cgroup_procs.empty()) layers.push_back("pids-cgroup");
  if (d.nproc_rlimit) layers.push_back("nproc");
  if (policy.max_processes > 0 && !d.nproc_rlimit && d.cgroup_procs.empty())
    missing.push_back("max_processes not enforced (root, no writable pids cgroup)");
  if (d.landlock_abi > 0 && d.landlock_abi < 4 && d.isolate_network && !d.namespaces)
    missing.push_back("network not isolated (landlock < 4, no namespaces)");
  for (const auto& l : layers) level_ += (level_.empty() ? "" : "+") + l;
  if (!missing.empty()) {
    level_ += " (";
    for (std::size_t i = 0; i < missing.size(); ++i) level_ += (i ? "; " : "") + missing[i];
    level_ += ")";
  }
}

SandboxPlan::~SandboxPlan() {
  if (d_ && !d_->cgroup_dir.empty()) {
    // Its processes are gone once the evaluation has ended; an rmdir may race their exit.
    for (int i = 0; i < 200 && ::rmdir(d_->cgroup_dir.c_str()) != 0 && errno == EBUSY; ++i) ::usleep(5000);
  }
}

const char* SandboxPlan::step_name(int step) {
  switch (step) {
    case kStepCgroup: return "joining the pids cgroup";
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

void SandboxPlan::enter_in_child(void (*fail)(int, int, void*), void* ctx, const int* keep_fds, int n_keep_fds) const {
  const Data& d = *d_;
  if (!d.enabled) return;
  auto check = [&](bool ok, int step) {
    if (!ok) fail(step, errno, ctx);
  };
  if (!d.cgroup_procs.empty()) check(write_proc_file(d.cgroup_procs.c_str(), "0"), kStepCgroup);

  if (d.namespaces) {
    check(::unshare(CLONE_NEWUSER) == 0, kStepUserNs);
    write_proc_file("/proc/self/setgroups", "deny");
    check(write_proc_file("/proc/self/uid_map", d.uid_map.c_str()) && write_proc_file("/proc/self/gid_map", d.gid_map.c_str()),
          kStepIdMap);
    check(::unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | (d.isolate_network ? CLONE_NEWNET : 0)) == 0,
          kStepNamespaces);
    check(::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0, kStepPrivate);
    // Handles on what is bound back, taken before the folders above them are hidden.
    int back_fds[64];
    const int n_back = static_cast<int>(d.bind_back.size() < 64 ? d.bind_back.size() : 64);
    for (int i = 0; i < n_back; ++i) {
      back_fds[i] = ::open(d.bind_back[static_cast<std::size_t>(i)].c_str(), O_PATH | O_CLOEXEC);
      check(back_fds[i] >= 0, kStepBindBack);
    }
    const int scratch_fd = ::open(d.scratch.c_str(), O_PATH | O_CLOEXEC);
    check(scratch_fd >= 0, kStepScratch);
    auto is_private_tmp = [&](const std::string& h) {
      for (const auto& t : d.private_tmp)
        if (t == h) return true;
      return false;
    };
    for (const auto& h : d.hidden)
      check(::mount("tmpfs", h.c_str(), "tmpfs", MS_NOSUID | MS_NODEV,
                    is_private_tmp(h) ? d.tmp_options.c_str() : "mode=0755,size=1m") == 0,
            kStepHide);
    for (const auto& m : d.mkdirs) check(::mkdir(m.c_str(), 0755) == 0 || errno == EEXIST, kStepBindBack);
    char fd_path[64];
    auto proc_fd_path = [&](int fd) {
      const char* prefix = "/proc/self/fd/";
      std::size_t len = 0;
      for (const char* p = prefix; *p; ++p) fd_path[len++] = *p;
      char digits[16];
      int nd = 0;
      do {
        digits[nd++] = static_cast<char>('0' + fd % 10);
        fd /= 10;
      } while (fd > 0);
      while (nd > 0) fd_path[len++] = digits[--nd];
      fd_path[len] = 0;
      return fd_path;
    };
    for (int i = 0; i < n_back; ++i)
      check(::mount(proc_fd_path(back_fds[i]), d.bind_back[static_cast<std::size_t>(i)].c_str(), nullptr, MS_BIND | MS_REC,
                    nullptr) == 0,
            kStepBindBack);
    for (const auto& h : d.rehide)
      check(::mount("tmpfs", h.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m") == 0, kStepHide);
    for (const auto& m : d.scratch_mkdirs) check(::mkdir(m.c_str(), 0755) == 0 || errno == EEXIST, kStepScratch);
    MountAttr ro{kMountAttrRdonly, 0, 0, 0};
    check(::syscall(SYS_mount_setattr, AT_FDCWD, "/", kAtRecursive, &ro, sizeof ro) == 0, kStepReadOnly);
    // The candidate's own folder: a mount of its own, writable again.
    check(::mount(proc_fd_path(scratch_fd), d.scratch.c_str(), nullptr, MS_BIND | MS_REC, nullptr) == 0, kStepScratch);
    MountAttr rw{0, kMountAttrRdonly, 0, 0};
    check(::syscall(SYS_mount_setattr, AT_FDCWD, d.scratch.c_str(), kAtRecursive, &rw, sizeof rw) == 0, kStepScratch);
    for (const auto& t : d.private_tmp)
      check(::mount(nullptr, t.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV, nullptr) == 0, kStepTmp);
    for (int i = 0; i < n_back; ++i) ::close(back_fds[i]);
    ::close(scratch_fd);

    // The next child is PID 1 of the new namespace: our keeper. This process waits for it and
    // ends as the candidate did (the keeper reports the candidate's status through `status`).
    int status_pipe[2];
    check(::pipe2(status_pipe, O_CLOEXEC) == 0, kStepFork);
    // Above the descriptors the candidate keeps (which the waiting processes close).
    for (int& fd : status_pipe) {
      const int high = ::fcntl(fd, F_DUPFD_CLOEXEC, 100);
      check(high >= 0, kStepFork);
      ::close(fd);
      fd = high;
    }
    pid_t init = ::fork();
    check(init >= 0, kStepFork);
    if (init > 0) {
      for (int i = 0; i < n_keep_fds; ++i) ::close(keep_fds[i]);
      ::close(status_pipe[1]);
      int candidate_status = 0;
      ssize_t got;
      do {
        got = ::read(status_pipe[0], &candidate_status, sizeof candidate_status);
      } while (got < 0 && errno == EINTR);
      int init_status = 0;
      while (::waitpid(init, &init_status, 0) < 0 && errno == EINTR) {
      }
      relay_status(got == static_cast<ssize_t>(sizeof candidate_status) ? candidate_status : init_status);
    }
    ::close(status_pipe[0]);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (d.fresh_proc) check(::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) == 0, kStepProc);
    pid_t candidate = ::fork();
    check(candidate >= 0, kStepFork);
    if (candidate == 0) {
      ::close(status_pipe[1]);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      return;
    }
    for (int i = 0; i < n_keep_fds; ++i) ::close(keep_fds[i]);
    // PID 1: reap everything until the candidate ends; leaving then ends the whole namespace.
    int status = 0;
    while (true) {
      pid_t r = ::waitpid(-1, &status, 0);
      if (r == candidate) break;
      if (r < 0 && errno != EINTR) break;
    }
    write_all(status_pipe[1], reinterpret_cast<char*>(&status), sizeof status);
    ::_exit(0);
  }

  // Keeper without a PID namespace: a subreaper that ends every descendant.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  struct sigaction on_stop {};
  on_stop.sa_handler = on_keeper_signal;
  for (int s : {SIGTERM, SIGINT, SIGHUP}) ::sigaction(s, &on_stop, nullptr);
  pid_t candidate = ::fork();
  check(candidate >= 0, kStepFork);
  if (candidate == 0) {
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int s : {SIGTERM, SIGINT, SIGHUP}) ::sigaction(s, &dfl, nullptr);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    return;
  }
  for (int i = 0; i < n_keep_fds; ++i) ::close(keep_fds[i]);
  int status = 0, candidate_status = 0;
  bool candidate_done = false;
  while (!candidate_done) {
    pid_t r = ::waitpid(-1, &status, 0);
    if (r == candidate) {
      candidate_status = status;
      candidate_done = true;
    } else if (r < 0 && errno == EINTR && g_keeper_stop) {
      kill_all_children();
    } else if (r < 0 && errno == ECHILD) {
      break;
    }
  }
  kill_all_children();
  relay_status(candidate_status);
}

void SandboxPlan::restrict_in_child(void (*fail)(int, int, void*), void* ctx) const {
  const Data& d = *d_;
  if (!d.enabled) return;
  auto check = [&](bool ok, int step) {
    if (!ok) fail(step, errno, ctx);
  };
  struct rlimit none {0, 0};
  ::setrlimit(RLIMIT_CORE, &none);
  if (d.memory_bytes > 0) {
    struct rlimit as {d.memory_bytes, d.memory_bytes};
    check(::setrlimit(RLIMIT_AS, &as) == 0, kStepRlimit);
  }
  if (d.nproc_rlimit) {
    struct rlimit np {d.max_processes, d.max_processes};
    check(::setrlimit(RLIMIT_NPROC, &np) == 0, kStepRlimit);
  }
  check(::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0, kStepNoNewPrivs);
  if (d.landlock_abi <= 0) return;

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
  auto allow = [&](const char* path, std::uint64_t access) {
    int fd = ::open(path, O_PATH | O_CLOEXEC);
    if (fd < 0) return;  // a path this machine does not have
    struct stat st {};
    if (::fstat(fd, &st) == 0 && !S_ISDIR(st.st_mode))
      access &= kFsExecute | kFsWriteFile | kFsReadFile | kFsTruncate | kFsIoctlDev;
    LandlockPathBeneathAttr rule{access & fs, fd};
    long r = ::syscall(SYS_landlock_add_rule, ruleset, kRulePathBeneath, &rule, 0u);
    ::close(fd);
    check(r == 0, kStepLandlock);
  };
  if (d.read_roots.empty()) allow("/", kFsExecute | kFsReadFile | kFsReadDir);
  for (const auto& p : d.read_roots) allow(p.c_str(), kFsExecute | kFsReadFile | kFsReadDir);
  for (const auto& p : d.dev_paths) allow(p.c_str(), kFsExecute | kFsReadFile | kFsReadDir | kFsWriteFile | kFsTruncate | kFsIoctlDev);
  for (const auto& p : d.writable) allow(p.c_str(), fs);
  check(::syscall(SYS_landlock_restrict_self, ruleset, 0u) == 0, kStepLandlock);
  ::close(ruleset);
}

}  // namespace braid
