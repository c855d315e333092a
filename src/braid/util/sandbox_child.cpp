// The child's side of the sandbox after fork (SandboxPlan::enter_in_child): the pids cgroup, the
// namespaces and mounts, and the keeper that ends every descendant with the candidate. Everything
// here runs between fork and exec: async-signal-safe calls only, no allocation.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "braid/util/sandbox.hpp"
#include "braid/util/sandbox_detail.hpp"

namespace braid {
namespace sandbox_detail {

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

}  // namespace sandbox_detail

using namespace sandbox_detail;

namespace {

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
      struct timespec ts {
        0, 1000000
      };
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

// The user namespace (root inside, braid's user outside), then mount, PID, IPC and (unless the
// host's network is kept) network namespaces, with every mount made private.
void enter_namespaces(const PlanData& d, const ChildCheck& check) {
  check(::unshare(CLONE_NEWUSER) == 0, kStepUserNs);
  write_proc_file("/proc/self/setgroups", "deny");
  check(write_proc_file("/proc/self/uid_map", d.uid_map.c_str()) &&
            write_proc_file("/proc/self/gid_map", d.gid_map.c_str()),
        kStepIdMap);
  check(::unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | (d.isolate_network ? CLONE_NEWNET : 0)) == 0,
        kStepNamespaces);
  check(::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0, kStepPrivate);
}

bool contains(const std::vector<std::string>& list, const std::string& s) {
  for (const auto& l : list)
    if (l == s) return true;
  return false;
}

// "/proc/self/fd/<fd>", written into `buf`.
const char* proc_fd_path(int fd, char (&buf)[64]) {
  const char* prefix = "/proc/self/fd/";
  std::size_t len = 0;
  for (const char* p = prefix; *p; ++p) buf[len++] = *p;
  char digits[16];
  int nd = 0;
  do {
    digits[nd++] = static_cast<char>('0' + fd % 10);
    fd /= 10;
  } while (fd > 0);
  while (nd > 0) buf[len++] = digits[--nd];
  buf[len] = 0;
  return buf;
}

constexpr int kMaxBindBack = 64;

// The candidate's view of the files: tmpfs over the hidden folders (writable for the private
// /tmp and /dev/shm), the read-only folders bound back beneath them, everything else read-only,
// and the scratch folder a writable mount of its own.
void mount_view(const PlanData& d, const ChildCheck& check) {
  // Handles on what is bound back, taken before the folders above them are hidden.
  int back_fds[kMaxBindBack];
  const int n_back = static_cast<int>(d.bind_back.size() < kMaxBindBack ? d.bind_back.size() : kMaxBindBack);
  for (int i = 0; i < n_back; ++i) {
    back_fds[i] = ::open(d.bind_back[static_cast<std::size_t>(i)].c_str(), O_PATH | O_CLOEXEC);
    check(back_fds[i] >= 0, kStepBindBack);
  }
  const int scratch_fd = ::open(d.scratch.c_str(), O_PATH | O_CLOEXEC);
  check(scratch_fd >= 0, kStepScratch);
  for (const auto& h : d.hidden)
    check(::mount("tmpfs", h.c_str(), "tmpfs", MS_NOSUID | MS_NODEV,
                  contains(d.private_tmp, h) ? d.tmp_options.c_str() : "mode=0755,size=1m") == 0,
          kStepHide);
  for (const auto& m : d.mkdirs) check(::mkdir(m.c_str(), 0755) == 0 || errno == EEXIST, kStepBindBack);
  char fd_path[64];
  for (int i = 0; i < n_back; ++i)
    check(::mount(proc_fd_path(back_fds[i], fd_path), d.bind_back[static_cast<std::size_t>(i)].c_str(), nullptr,
                  MS_BIND | MS_REC, nullptr) == 0,
          kStepBindBack);
  for (const auto& h : d.rehide)
    check(::mount("tmpfs", h.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m") == 0, kStepHide);
  for (const auto& m : d.scratch_mkdirs) check(::mkdir(m.c_str(), 0755) == 0 || errno == EEXIST, kStepScratch);
  MountAttr ro{kMountAttrRdonly, 0, 0, 0};
  check(::syscall(SYS_mount_setattr, AT_FDCWD, "/", kAtRecursive, &ro, sizeof ro) == 0, kStepReadOnly);
  // The candidate's own folder: a mount of its own, writable again.
  check(::mount(proc_fd_path(scratch_fd, fd_path), d.scratch.c_str(), nullptr, MS_BIND | MS_REC, nullptr) == 0,
        kStepScratch);
  MountAttr rw{0, kMountAttrRdonly, 0, 0};
  check(::syscall(SYS_mount_setattr, AT_FDCWD, d.scratch.c_str(), kAtRecursive, &rw, sizeof rw) == 0, kStepScratch);
  for (const auto& t : d.private_tmp)
    check(::mount(nullptr, t.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV, nullptr) == 0, kStepTmp);
  for (int i = 0; i < n_back; ++i) ::close(back_fds[i]);
  ::close(scratch_fd);
}

void close_all(const int* fds, int n) {
  for (int i = 0; i < n; ++i) ::close(fds[i]);
}

// This process, once it has forked the namespace's init: waits for it and ends as the candidate
// did (init reports the candidate's status through `status_fd`).
[[noreturn]] void relay_init(pid_t init, int status_fd) {
  int candidate_status = 0;
  ssize_t got;
  do {
    got = ::read(status_fd, &candidate_status, sizeof candidate_status);
  } while (got < 0 && errno == EINTR);
  int init_status = 0;
  while (::waitpid(init, &init_status, 0) < 0 && errno == EINTR) {
  }
  relay_status(got == static_cast<ssize_t>(sizeof candidate_status) ? candidate_status : init_status);
}

// PID 1: reaps everything until the candidate ends, reports its status, and leaves, which ends
// the whole namespace.
[[noreturn]] void run_init(pid_t candidate, int status_fd) {
  int status = 0;
  while (true) {
    pid_t r = ::waitpid(-1, &status, 0);
    if (r == candidate) break;
    if (r < 0 && errno != EINTR) break;
  }
  write_all(status_fd, reinterpret_cast<char*>(&status), sizeof status);
  ::_exit(0);
}

// In the new PID namespace: the next child is its PID 1, our keeper, and the candidate's process
// its child. Returns only in the candidate's process.
void fork_init_and_candidate(const PlanData& d, const ChildCheck& check, const int* keep_fds, int n_keep_fds) {
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
    close_all(keep_fds, n_keep_fds);
    ::close(status_pipe[1]);
    relay_init(init, status_pipe[0]);
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
  close_all(keep_fds, n_keep_fds);
  run_init(candidate, status_pipe[1]);
}

// Without a PID namespace: this process becomes a subreaper keeper that ends every descendant
// when the candidate ends or braid stops it. Returns only in the candidate's process.
void fork_under_keeper(const ChildCheck& check, const int* keep_fds, int n_keep_fds) {
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
  close_all(keep_fds, n_keep_fds);
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

}  // namespace

void SandboxPlan::enter_in_child(void (*fail)(int, int, void*), void* ctx, const int* keep_fds, int n_keep_fds) const {
  const Data& d = *d_;
  if (!d.enabled) return;
  const ChildCheck check{fail, ctx};
  if (!d.cgroup_procs.empty()) check(write_proc_file(d.cgroup_procs.c_str(), "0"), kStepCgroup);
  if (!d.memory_cgroup_procs.empty()) check(write_proc_file(d.memory_cgroup_procs.c_str(), "0"), kStepCgroup);
  if (!d.namespaces) return fork_under_keeper(check, keep_fds, n_keep_fds);
  enter_namespaces(d, check);
  mount_view(d, check);
  fork_init_and_candidate(d, check, keep_fds, n_keep_fds);
}

}  // namespace braid
