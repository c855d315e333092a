#include "braid/util/subprocess.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <dirent.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <random>
#include <set>

#include <fmt/format.h>

#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"

extern char** environ;

namespace braid {
namespace {

std::mutex& secret_names_mutex() {
  static std::mutex m;
  return m;
}
std::set<std::string>& secret_names() {
  static std::set<std::string> names;
  return names;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Keeps the first `cap` and the last `cap` bytes of a stream.
class CappedBuffer {
 public:
  explicit CappedBuffer(std::size_t cap) : cap_(cap) {}
  void append(const char* data, std::size_t n) {
    total_ += n;
    if (head_.size() < cap_) {
      std::size_t take = std::min(n, cap_ - head_.size());
      head_.append(data, take);
      data += take;
      n -= take;
    }
    if (n == 0) return;
    tail_.append(data, n);
    // Trim in batches so appends stay amortized O(n).
    if (tail_.size() > 2 * cap_ + 4096) tail_.erase(0, tail_.size() - cap_);
  }
  std::size_t total() const { return total_; }
  std::string text() const {
    std::size_t kept_tail = std::min(tail_.size(), cap_);
    std::size_t omitted = total_ - head_.size() - kept_tail;
    if (omitted == 0) return head_ + tail_.substr(tail_.size() - kept_tail);
    return head_ + fmt::format("\n[... {} bytes omitted ...]\n", omitted) + tail_.substr(tail_.size() - kept_tail);
  }

 private:
  std::size_t cap_;
  std::size_t total_ = 0;
  std::string head_;
  std::string tail_;
};

struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  void reset() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

std::string lookup_env(const std::vector<std::string>& env, std::string_view name) {
  for (const auto& entry : env) {
    if (entry.size() > name.size() && entry[name.size()] == '=' && entry.compare(0, name.size(), name) == 0)
      return entry.substr(name.size() + 1);
  }
  return {};
}

// Resolves argv[0] the way execvp would, but in the parent (execvp may allocate).
std::string resolve_executable(const std::string& name, const std::string& path_var, const std::filesystem::path& cwd) {
  if (name.find('/') != std::string::npos) return name;
  std::string_view rest = path_var.empty() ? std::string_view("/usr/local/bin:/usr/bin:/bin") : path_var;
  while (true) {
    auto colon = rest.find(':');
    std::string dir(rest.substr(0, colon));
    if (dir.empty()) dir = cwd.empty() ? "." : cwd.string();
    std::string candidate = dir + "/" + name;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(candidate.c_str(), X_OK) == 0)
      return candidate;
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  return {};
}

std::vector<std::string> child_environment(const SubprocessOptions& options) {
  std::set<std::string> drop(options.secret_env_names.begin(), options.secret_env_names.end());
  {
    std::lock_guard lock(secret_names_mutex());
    drop.insert(secret_names().begin(), secret_names().end());
  }
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string_view entry(*e);
    auto eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    std::string name(entry.substr(0, eq));
    if (drop.count(name) || is_secret_env_name(name) || options.env_add.count(name) || name == "BRAID_RESULT_FD") continue;
    if (options.candidate && !candidate_env_allowed(name)) continue;
    env.emplace_back(entry);
  }
  for (const auto& [name, value] : options.env_add) {
    if (drop.count(name) || is_secret_env_name(name) || name == "BRAID_RESULT_FD") continue;
    env.push_back(name + "=" + value);
  }
  if (options.result_channel) env.push_back("BRAID_RESULT_FD=3");
  return env;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

struct ChildFail {
  int report_fd;
};

[[noreturn]] void report_and_exit(int report_fd, int stage, int err) {
  int payload[2] = {stage, err};
  ssize_t ignored = ::write(report_fd, payload, sizeof payload);
  (void)ignored;
  ::_exit(127);
}

void sandbox_failed(int step, int err, void* ctx) { report_and_exit(static_cast<ChildFail*>(ctx)->report_fd, step, err); }

// Only async-signal-safe calls from here to execve: the parent may have other threads that
// held locks (malloc, stdio) at the moment of fork.
[[noreturn]] void child_after_fork(int stdin_fd, int out_fd, int err_fd, int result_fd, int report_fd, const char* cwd,
                                   const char* path, char* const* argv, char* const* envp, pid_t parent,
                                   const SandboxPlan& sandbox, std::size_t memory_limit_bytes) {
  auto fail = [&report_fd](int stage) { report_and_exit(report_fd, stage, errno); };
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The parent may have died between fork and prctl; then nobody would kill us.
  if (::getppid() != parent) ::_exit(127);

  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int s : {SIGPIPE, SIGINT, SIGTERM, SIGQUIT, SIGHUP, SIGCHLD, SIGUSR1, SIGUSR2}) ::sigaction(s, &dfl, nullptr);

  // Out of the way of the numbers they move to.
  report_fd = ::fcntl(report_fd, F_DUPFD_CLOEXEC, 100);
  if (result_fd >= 0) result_fd = ::fcntl(result_fd, F_DUPFD_CLOEXEC, 100);
  if (report_fd < 0) ::_exit(127);
  if (::dup2(stdin_fd, 0) < 0 || ::dup2(out_fd, 1) < 0 || ::dup2(err_fd, 2) < 0) fail(1);
  // The report pipe at fd 4, the result channel (when asked for) at fd 3, and everything else
  // braid had open (database, sockets) closed.
  if (::dup3(report_fd, 4, O_CLOEXEC) < 0) fail(1);
  report_fd = 4;
  if (result_fd >= 0) {
    if (::dup2(result_fd, 3) < 0) fail(1);  // dup2 clears close-on-exec
  } else {
    ::close(3);
  }
  ::syscall(SYS_close_range, 5U, ~0U, 0U);
  ChildFail ctx{report_fd};
  const int keep[] = {0, 1, 2, 3, 4};
  sandbox.enter_in_child(sandbox_failed, &ctx, keep, 5);
  // After the keeper forks (it stays small), before exec: the candidate's address space.
  if (memory_limit_bytes > 0) {
    const rlimit limit{memory_limit_bytes, memory_limit_bytes};
    if (::setrlimit(RLIMIT_AS, &limit) != 0) fail(1);
  }
  if (cwd && *cwd && ::chdir(cwd) != 0) fail(2);
  sandbox.restrict_in_child(sandbox_failed, &ctx);
  ::execve(path, argv, envp);
  fail(3);
  ::_exit(127);
}

// A memory file holding `text`, positioned at its start, for the child's stdin.
int stdin_from_memory(const std::string& text) {
  int fd = ::memfd_create("braid-stdin", MFD_CLOEXEC);
  if (fd < 0) throw SystemError(std::string("memfd_create: ") + std::strerror(errno));
  for (std::size_t done = 0; done < text.size();) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      throw SystemError(std::string("writing the child's stdin: ") + std::strerror(err));
    }
    done += static_cast<std::size_t>(n);
  }
  ::lseek(fd, 0, SEEK_SET);
  return fd;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void register_secret_env_name(const std::string& name) {
  std::lock_guard lock(secret_names_mutex());
  secret_names().insert(name);
}

bool is_secret_env_name(const std::string& name) {
  if (ends_with(name, "_API_KEY") || ends_with(name, "_TOKEN")) return true;
  std::lock_guard lock(secret_names_mutex());
  return secret_names().count(name) > 0;
}

std::string signal_name(int sig) {
  switch (sig) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    case SIGSYS: return "SIGSYS";
    default: return fmt::format("SIG{}", sig);
  }
}

std::string SubprocessResult::describe_end() const {
  if (!started) return "could not start: " + start_error;
  if (timed_out) return fmt::format("timed out after {:.1f} s", wall_s);
  if (stopped) return fmt::format("stopped by braid after {:.1f} s", wall_s);
  if (term_signal != 0) return fmt::format("killed by signal {} ({})", signal_name(term_signal), ::strsignal(term_signal));
  return fmt::format("exit code {}", exit_code);
}

SubprocessResult run_subprocess(const SubprocessOptions& options) {
  SubprocessResult result;
  if (options.argv.empty()) throw SystemError("run_subprocess: empty argv");
  const auto t0 = std::chrono::steady_clock::now();

  std::vector<std::string> env = child_environment(options);
  std::string token;
  if (options.candidate) {
    std::random_device rd;
    token = fmt::format("{:08x}{:08x}{:08x}{:08x}", rd(), rd(), rd(), rd());
    env.push_back("BRAID_EVAL_TOKEN=" + token);
  }
  std::string path_var = lookup_env(env, "PATH");
  std::string executable = resolve_executable(options.argv[0], path_var, options.cwd);
  if (executable.empty()) {
    result.start_error = "'" + options.argv[0] + "' not found in PATH";
    return result;
  }
  std::vector<std::string> argv_strings = options.argv;
  std::vector<char*> argv_ptrs = pointers(argv_strings);
  std::vector<char*> env_ptrs = pointers(env);
  std::string cwd = options.cwd.string();
  const SandboxPlan sandbox(options.sandbox, options.sandbox.enabled ? sandbox_support() : SandboxSupport{});
  result.sandbox_level = sandbox.level();

  int out_pipe[2], err_pipe[2], report_pipe[2], result_pipe[2] = {-1, -1};
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) throw SystemError(std::string("pipe: ") + std::strerror(errno));
  Fd out_r(out_pipe[0]), out_w(out_pipe[1]);
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) throw SystemError(std::string("pipe: ") + std::strerror(errno));
  Fd err_r(err_pipe[0]), err_w(err_pipe[1]);
  if (::pipe2(report_pipe, O_CLOEXEC) != 0) throw SystemError(std::string("pipe: ") + std::strerror(errno));
  Fd report_r(report_pipe[0]), report_w(report_pipe[1]);
  // One socket both ways: the greeting (the verdict nonce) goes in before the child exists,
  // so the harness reads it at once; the records come back on the same descriptor.
  if (options.result_channel && ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, result_pipe) != 0)
    throw SystemError(std::string("socketpair: ") + std::strerror(errno));
  Fd result_r(result_pipe[0]), result_w(result_pipe[1]);
  if (result_r.fd >= 0) {
    const std::string& greeting = options.channel_greeting;
    if (!greeting.empty() && ::send(result_r.fd, greeting.data(), greeting.size(), MSG_NOSIGNAL) !=
                                 static_cast<ssize_t>(greeting.size()))
      throw SystemError(std::string("verdict channel: ") + std::strerror(errno));
    ::shutdown(result_r.fd, SHUT_WR);
  }
  Fd dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (dev_null.fd < 0) throw SystemError(std::string("open /dev/null: ") + std::strerror(errno));
  if (!options.stdin_text.empty()) {
    dev_null.reset();
    dev_null.fd = stdin_from_memory(options.stdin_text);
  }

  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw SystemError(std::string("fork: ") + std::strerror(errno));
  if (pid == 0)
    child_after_fork(dev_null.fd, out_w.fd, err_w.fd, result_w.fd, report_w.fd, cwd.c_str(), executable.c_str(),
                     argv_ptrs.data(), env_ptrs.data(), parent, sandbox, options.memory_limit_bytes);

  // Both sides set the group so that on_start and kill(-pgid) never race the child.
  ::setpgid(pid, pid);
  out_w.reset();
  err_w.reset();
  report_w.reset();
  result_w.reset();
  dev_null.reset();
  result.pgid = pid;

  int report[2] = {0, 0};
  ssize_t got;
  do {
    got = ::read(report_r.fd, report, sizeof report);
  } while (got < 0 && errno == EINTR);
  if (got == static_cast<ssize_t>(sizeof report)) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (report[0] >= 10) {
      result.start_error = std::string("cannot set up the sandbox (") + SandboxPlan::step_name(report[0]) +
                           "): " + std::strerror(report[1]) + "; sandbox level " + sandbox.level() +
                           " (docs/sandbox.md; `sandbox: false` in workload.yaml runs candidates unconfined)";
    } else {
      const char* stage = report[0] == 2 ? "cannot enter " : report[0] == 3 ? "cannot execute " : "cannot set up ";
      result.start_error = stage + (report[0] == 2 ? cwd : executable) + ": " + std::strerror(report[1]);
    }
    result.wall_s = seconds_since(t0);
    return result;
  }
  result.started = true;
  if (options.on_start) {
    try {
      options.on_start(static_cast<long>(pid));
    } catch (...) {
      // Nobody would wait for the child otherwise.
      ::kill(-pid, SIGKILL);
      int status = 0;
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      throw;
    }
  }

  CappedBuffer out_buf(options.output_cap_bytes), err_buf(options.output_cap_bytes);
  std::string channel;
  constexpr std::size_t kChannelCap = 1 << 20;
  const bool has_deadline = options.timeout_s > 0;
  const auto deadline = t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                 std::chrono::duration<double>(std::max(options.timeout_s, 0.0)));
  std::chrono::steady_clock::time_point kill_at{};
  bool term_sent = false, kill_sent = false, exited = false;
  std::chrono::steady_clock::time_point drain_until{};
  char chunk[65536];

  while (true) {
    auto now = std::chrono::steady_clock::now();
    if (!exited) {
      siginfo_t info{};
      // WNOWAIT leaves the leader a zombie, so its pid (= the pgid) cannot be reused while we
      // signal the group below.
      if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid) {
        exited = true;
        ::kill(-pid, SIGKILL);  // leftovers of the group (background grandchildren)
        drain_until = now + std::chrono::seconds(1);
      } else if (!term_sent && ((has_deadline && now >= deadline) || (options.stop && options.stop->load()))) {
        if (has_deadline && now >= deadline) result.timed_out = true;
        else result.stopped = true;
        term_sent = true;
        ::kill(-pid, SIGTERM);
        kill_at = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(std::max(options.kill_grace_s, 0.0)));
      } else if (term_sent && !kill_sent && now >= kill_at) {
        kill_sent = true;
        ::kill(-pid, SIGKILL);
      }
    }
    if (out_r.fd < 0 && err_r.fd < 0 && result_r.fd < 0 && exited) break;
    // A process that escaped the group may keep a pipe open; stop reading a moment after exit.
    if (exited && now >= drain_until) break;

    pollfd fds[3];
    int nfds = 0;
    if (out_r.fd >= 0) fds[nfds++] = {out_r.fd, POLLIN, 0};
    if (err_r.fd >= 0) fds[nfds++] = {err_r.fd, POLLIN, 0};
    if (result_r.fd >= 0) fds[nfds++] = {result_r.fd, POLLIN, 0};
    int wait_ms = exited ? 20 : 10;
    if (nfds == 0) {
      ::usleep(static_cast<useconds_t>(wait_ms) * 1000);
      continue;
    }
    int ready = ::poll(fds, static_cast<nfds_t>(nfds), wait_ms);
    if (ready <= 0) continue;
    for (int i = 0; i < nfds; ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      if (fds[i].fd == result_r.fd) {
        ssize_t n = ::read(result_r.fd, chunk, sizeof chunk);
        if (n > 0) {
          channel.append(chunk, std::min(static_cast<std::size_t>(n), kChannelCap - std::min(kChannelCap, channel.size())));
        } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
          result_r.reset();
        }
        continue;
      }
      Fd& source = fds[i].fd == out_r.fd ? out_r : err_r;
      CappedBuffer& sink = fds[i].fd == out_r.fd ? out_buf : err_buf;
      ssize_t n = ::read(source.fd, chunk, sizeof chunk);
      if (n > 0) {
        sink.append(chunk, static_cast<std::size_t>(n));
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        source.reset();
      }
    }
  }

  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!token.empty()) kill_processes_with_token(token);  // what left the group (setsid) dies too
  result.wall_s = seconds_since(t0);
  if (WIFSIGNALED(status)) {
    result.term_signal = WTERMSIG(status);
  } else if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  }
  result.stdout_text = out_buf.text();
  result.stderr_text = err_buf.text();
  result.stdout_bytes = out_buf.total();
  result.stderr_bytes = err_buf.total();
  result.channel_text = std::move(channel);
  if (!options.stdout_path.empty()) write_file_atomic(options.stdout_path, result.stdout_text);
  if (!options.stderr_path.empty()) write_file_atomic(options.stderr_path, result.stderr_text);
  return result;
}

bool candidate_env_allowed(const std::string& name) {
  static const std::set<std::string> exact{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "TZ",
                                           "TMPDIR", "LD_LIBRARY_PATH", "LIBRARY_PATH", "PYTHONPATH", "VIRTUAL_ENV",
                                           "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS"};
  static const char* const prefixes[] = {"LC_", "CUDA_", "NCCL_", "NVIDIA_", "CUBLAS", "TORCH_", "OMPI_", "PMIX_",
                                         "PMI_", "SLURM_", "BRAID_"};
  if (exact.count(name)) return true;
  for (const char* p : prefixes)
    if (name.rfind(p, 0) == 0) return !is_secret_env_name(name);
  return false;
}

int kill_processes_with_token(const std::string& token) {
  const std::string needle = "BRAID_EVAL_TOKEN=" + token;
  int killed = 0;
  // Twice: a process may fork between the scan and the kill.
  for (int pass = 0; pass < 2; ++pass) {
    DIR* proc = ::opendir("/proc");
    if (proc == nullptr) return killed;
    while (dirent* e = ::readdir(proc)) {
      const char* n = e->d_name;
      if (*n < '1' || *n > '9') continue;
      const long pid = std::strtol(n, nullptr, 10);
      if (pid <= 1 || pid == ::getpid()) continue;
      auto environ_text = try_read_file("/proc/" + std::string(n) + "/environ");
      if (!environ_text) continue;
      // Entries are NUL-separated; match a whole entry.
      std::string_view text(*environ_text);
      for (std::size_t at = text.find(needle); at != std::string_view::npos; at = text.find(needle, at + 1)) {
        const bool starts = at == 0 || text[at - 1] == '\0';
        const std::size_t end = at + needle.size();
        if (starts && (end == text.size() || text[end] == '\0')) {
          if (::kill(static_cast<pid_t>(pid), SIGKILL) == 0) ++killed;
          break;
        }
      }
    }
    ::closedir(proc);
  }
  return killed;
}

std::string process_start_marker(long pid) {
  if (pid <= 0) return {};
  auto stat = try_read_file("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return {};
  // Field 2 (comm) may hold spaces and parentheses; fields resume after the last ')'.
  auto close = stat->rfind(')');
  if (close == std::string::npos) return {};
  std::string_view rest = std::string_view(*stat).substr(close + 1);
  // After ')' come fields 3.. ; start time is field 22, i.e. the 20th token here.
  std::size_t pos = 0;
  std::string start_time;
  for (int field = 3; field <= 22; ++field) {
    while (pos < rest.size() && rest[pos] == ' ') ++pos;
    std::size_t end = rest.find(' ', pos);
    if (end == std::string_view::npos) end = rest.size();
    if (field == 22) start_time = std::string(rest.substr(pos, end - pos));
    pos = end;
  }
  if (start_time.empty()) return {};
  std::string boot_id = try_read_file("/proc/sys/kernel/random/boot_id").value_or("");
  while (!boot_id.empty() && (boot_id.back() == '\n' || boot_id.back() == ' ')) boot_id.pop_back();
  return boot_id + ":" + start_time;
}

bool kill_process_group_if_alive(long pgid, const std::string& start_marker) {
  if (pgid <= 1 || start_marker.empty()) return false;
  std::string current = process_start_marker(pgid);
  if (!current.empty()) {
    // The leader's pid is alive: ours only if it is the same incarnation.
    if (current != start_marker) return false;
  } else {
    // The leader is gone. A pid stays reserved while a group of that id has members, so any
    // group `pgid` still existing is ours, but only within the same boot.
    std::string boot_prefix = process_start_marker(static_cast<long>(::getpid()));
    boot_prefix = boot_prefix.substr(0, boot_prefix.find(':') + 1);
    if (start_marker.compare(0, boot_prefix.size(), boot_prefix) != 0) return false;
  }
  return ::kill(-static_cast<pid_t>(pgid), SIGKILL) == 0;
}

}  // namespace braid
