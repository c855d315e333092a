#include "braid/util/subprocess.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <utility>

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
  Fd(Fd&& other) noexcept : fd(std::exchange(other.fd, -1)) {}
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
    if (drop.count(name) || is_secret_env_name(name) || options.env_add.count(name) || name == "BRAID_RESULT_FD" ||
        name == "BRAID_PEER_FD")
      continue;
    if (options.candidate && !candidate_env_allowed(name)) continue;
    env.emplace_back(entry);
  }
  for (const auto& [name, value] : options.env_add) {
    if (drop.count(name) || is_secret_env_name(name) || name == "BRAID_RESULT_FD" || name == "BRAID_PEER_FD") continue;
    env.push_back(name + "=" + value);
  }
  if (options.result_channel) env.push_back("BRAID_RESULT_FD=3");
  if (options.peer_fd >= 0) env.push_back("BRAID_PEER_FD=5");
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

void sandbox_failed(int step, int err, void* ctx) {
  report_and_exit(static_cast<ChildFail*>(ctx)->report_fd, step, err);
}

// Only async-signal-safe calls from here to execve: the parent may have other threads that
// held locks (malloc, stdio) at the moment of fork.
[[noreturn]] void child_after_fork(int stdin_fd, int out_fd, int err_fd, int result_fd, int peer_fd, int report_fd,
                                   const char* cwd, const char* path, char* const* argv, char* const* envp,
                                   pid_t parent, const SandboxPlan& sandbox, std::size_t memory_limit_bytes) {
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
  if (peer_fd >= 0) peer_fd = ::fcntl(peer_fd, F_DUPFD_CLOEXEC, 100);
  if (report_fd < 0) ::_exit(127);
  if (::dup2(stdin_fd, 0) < 0 || ::dup2(out_fd, 1) < 0 || ::dup2(err_fd, 2) < 0) fail(1);
  // The report pipe at fd 4, the result channel (when asked for) at fd 3, the peer socket (when
  // given) at fd 5, and everything else braid had open (database, sockets) closed.
  if (::dup3(report_fd, 4, O_CLOEXEC) < 0) fail(1);
  report_fd = 4;
  if (result_fd >= 0) {
    if (::dup2(result_fd, 3) < 0) fail(1);  // dup2 clears close-on-exec
  } else {
    ::close(3);
  }
  if (peer_fd >= 0) {
    if (::dup2(peer_fd, 5) < 0) fail(1);
  } else {
    ::close(5);
  }
  ::syscall(SYS_close_range, 6U, ~0U, 0U);
  ChildFail ctx{report_fd};
  const int keep[] = {0, 1, 2, 3, 4, 5};
  sandbox.enter_in_child(sandbox_failed, &ctx, keep, 6);
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

// What the child is given, built before fork (the forked child may not allocate).
struct Launch {
  std::vector<std::string> env;
  std::string token;  // BRAID_EVAL_TOKEN of a candidate, "" otherwise
  std::string executable;
  std::vector<std::string> argv;
  std::string cwd;
};

Launch prepare_launch(const SubprocessOptions& options) {
  Launch l;
  l.env = child_environment(options);
  if (options.candidate) {
    std::random_device rd;
    l.token = fmt::format("{:08x}{:08x}{:08x}{:08x}", rd(), rd(), rd(), rd());
    l.env.push_back("BRAID_EVAL_TOKEN=" + l.token);
  }
  l.executable = resolve_executable(options.argv[0], lookup_env(l.env, "PATH"), options.cwd);
  l.argv = options.argv;
  l.cwd = options.cwd.string();
  return l;
}

// Both ends of the child's stdout, stderr, start report and (when asked for) result channel,
// and its stdin.
struct ChildPipes {
  Fd out_r, out_w, err_r, err_w, report_r, report_w, result_r, result_w, stdin_fd;
};

void open_pipe(Fd& read_end, Fd& write_end) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) throw SystemError(std::string("pipe: ") + std::strerror(errno));
  read_end.fd = p[0];
  write_end.fd = p[1];
}

ChildPipes open_pipes(const SubprocessOptions& options) {
  ChildPipes p;
  open_pipe(p.out_r, p.out_w);
  open_pipe(p.err_r, p.err_w);
  open_pipe(p.report_r, p.report_w);
  // One socket both ways: the greeting (the verdict nonce) goes in before the child exists,
  // so the harness reads it at once; the records come back on the same descriptor.
  int result_pipe[2] = {-1, -1};
  if (options.result_channel && ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, result_pipe) != 0)
    throw SystemError(std::string("socketpair: ") + std::strerror(errno));
  p.result_r.fd = result_pipe[0];
  p.result_w.fd = result_pipe[1];
  if (p.result_r.fd >= 0) {
    const std::string& greeting = options.channel_greeting;
    if (!greeting.empty() &&
        ::send(p.result_r.fd, greeting.data(), greeting.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(greeting.size()))
      throw SystemError(std::string("verdict channel: ") + std::strerror(errno));
    ::shutdown(p.result_r.fd, SHUT_WR);
  }
  p.stdin_fd.fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (p.stdin_fd.fd < 0) throw SystemError(std::string("open /dev/null: ") + std::strerror(errno));
  if (!options.stdin_text.empty()) {
    p.stdin_fd.reset();
    p.stdin_fd.fd = stdin_from_memory(options.stdin_text);
  }
  return p;
}

// Forks the child (its own process group) and closes the parent's copies of the child's ends.
pid_t spawn(Launch& launch, ChildPipes& p, int peer_fd, const SandboxPlan& sandbox, std::size_t memory_limit_bytes) {
  std::vector<char*> argv_ptrs = pointers(launch.argv);
  std::vector<char*> env_ptrs = pointers(launch.env);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw SystemError(std::string("fork: ") + std::strerror(errno));
  if (pid == 0)
    child_after_fork(p.stdin_fd.fd, p.out_w.fd, p.err_w.fd, p.result_w.fd, peer_fd, p.report_w.fd, launch.cwd.c_str(),
                     launch.executable.c_str(), argv_ptrs.data(), env_ptrs.data(), parent, sandbox, memory_limit_bytes);
  // Both sides set the group so that on_start and kill(-pgid) never race the child.
  ::setpgid(pid, pid);
  p.out_w.reset();
  p.err_w.reset();
  p.report_w.reset();
  p.result_w.reset();
  p.stdin_fd.reset();
  return pid;
}

// The child's report of a failed setup or exec (it closes the report pipe on exec); the child
// is reaped then.
std::optional<std::string> start_error(const Fd& report_r, pid_t pid, const Launch& launch,
                                       const SandboxPlan& sandbox) {
  int report[2] = {0, 0};
  ssize_t got;
  do {
    got = ::read(report_r.fd, report, sizeof report);
  } while (got < 0 && errno == EINTR);
  if (got != static_cast<ssize_t>(sizeof report)) return std::nullopt;
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (report[0] >= 10)
    return std::string("cannot set up the sandbox (") + SandboxPlan::step_name(report[0]) +
           "): " + std::strerror(report[1]) + "; sandbox level " + sandbox.level() +
           " (docs/sandbox.md; `sandbox: false` in workload.yaml runs candidates unconfined)";
  const char* stage = report[0] == 2 ? "cannot enter " : report[0] == 3 ? "cannot execute " : "cannot set up ";
  return stage + (report[0] == 2 ? launch.cwd : launch.executable) + ": " + std::strerror(report[1]);
}

int reap(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

void announce_start(const SubprocessOptions& options, pid_t pid) {
  if (!options.on_start) return;
  try {
    options.on_start(static_cast<long>(pid));
  } catch (...) {
    // Nobody would wait for the child otherwise.
    ::kill(-pid, SIGKILL);
    reap(pid);
    throw;
  }
}

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(std::max(s, 0.0)));
}

// The child's end and the signals braid sends its group: SIGTERM at the deadline or on stop,
// SIGKILL after the grace period, and SIGKILL to the leftovers once the leader has exited.
struct GroupWatch {
  GroupWatch(pid_t pid, const SubprocessOptions& options, std::chrono::steady_clock::time_point t0)
      : pid(pid),
        has_deadline(options.timeout_s > 0),
        deadline(t0 + seconds(options.timeout_s)),
        kill_grace(seconds(options.kill_grace_s)),
        stop(options.stop) {}

  void step(std::chrono::steady_clock::time_point now, SubprocessResult& result) {
    if (exited) return;
    siginfo_t info{};
    // WNOWAIT leaves the leader a zombie, so its pid (= the pgid) cannot be reused while we
    // signal the group below.
    if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid) {
      exited = true;
      ::kill(-pid, SIGKILL);  // leftovers of the group (background grandchildren)
      drain_until = now + std::chrono::seconds(1);
    } else if (!term_sent && ((has_deadline && now >= deadline) || (stop && stop->load()))) {
      if (has_deadline && now >= deadline) result.timed_out = true;
      else result.stopped = true;
      term_sent = true;
      ::kill(-pid, SIGTERM);
      kill_at = now + kill_grace;
    } else if (term_sent && !kill_sent && now >= kill_at) {
      kill_sent = true;
      ::kill(-pid, SIGKILL);
    }
  }

  const pid_t pid;
  const bool has_deadline;
  const std::chrono::steady_clock::time_point deadline;
  const std::chrono::steady_clock::duration kill_grace;
  const std::atomic<bool>* const stop;
  bool term_sent = false, kill_sent = false, exited = false;
  std::chrono::steady_clock::time_point kill_at{}, drain_until{};
};

// Reads the child's stdout and stderr (capped) and result channel until each is closed.
class OutputPump {
 public:
  OutputPump(ChildPipes&& pipes, std::size_t cap)
      : out_(std::move(pipes.out_r)),
        err_(std::move(pipes.err_r)),
        channel_fd_(std::move(pipes.result_r)),
        out_buf_(cap),
        err_buf_(cap) {}

  bool open() const { return out_.fd >= 0 || err_.fd >= 0 || channel_fd_.fd >= 0; }

  // Waits up to `wait_ms` for output, then reads what is ready.
  void pump(int wait_ms) {
    pollfd fds[3];
    int nfds = 0;
    if (out_.fd >= 0) fds[nfds++] = {out_.fd, POLLIN, 0};
    if (err_.fd >= 0) fds[nfds++] = {err_.fd, POLLIN, 0};
    if (channel_fd_.fd >= 0) fds[nfds++] = {channel_fd_.fd, POLLIN, 0};
    if (nfds == 0) {
      ::usleep(static_cast<useconds_t>(wait_ms) * 1000);
      return;
    }
    if (::poll(fds, static_cast<nfds_t>(nfds), wait_ms) <= 0) return;
    for (int i = 0; i < nfds; ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      if (fds[i].fd == channel_fd_.fd) {
        read_channel();
        continue;
      }
      const bool is_out = fds[i].fd == out_.fd;
      read_stream(is_out ? out_ : err_, is_out ? out_buf_ : err_buf_);
    }
  }

  const CappedBuffer& out() const { return out_buf_; }
  const CappedBuffer& err() const { return err_buf_; }
  std::string take_channel() { return std::move(channel_); }

 private:
  static constexpr std::size_t kChannelCap = 1 << 20;

  void read_channel() {
    ssize_t n = ::read(channel_fd_.fd, chunk_, sizeof chunk_);
    if (n > 0) {
      channel_.append(chunk_,
                      std::min(static_cast<std::size_t>(n), kChannelCap - std::min(kChannelCap, channel_.size())));
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
      channel_fd_.reset();
    }
  }

  void read_stream(Fd& source, CappedBuffer& sink) {
    ssize_t n = ::read(source.fd, chunk_, sizeof chunk_);
    if (n > 0) {
      sink.append(chunk_, static_cast<std::size_t>(n));
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
      source.reset();
    }
  }

  Fd out_, err_, channel_fd_;
  CappedBuffer out_buf_, err_buf_;
  std::string channel_;
  char chunk_[65536];
};

// The child's end, output and channel into `result`; the capped outputs also to their files.
void collect(int status, OutputPump& pump, const SubprocessOptions& options, SubprocessResult& result) {
  if (WIFSIGNALED(status)) {
    result.term_signal = WTERMSIG(status);
  } else if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  }
  result.stdout_text = pump.out().text();
  result.stderr_text = pump.err().text();
  result.stdout_bytes = pump.out().total();
  result.stderr_bytes = pump.err().total();
  result.channel_text = pump.take_channel();
  if (!options.stdout_path.empty()) write_file_atomic(options.stdout_path, result.stdout_text);
  if (!options.stderr_path.empty()) write_file_atomic(options.stderr_path, result.stderr_text);
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

std::string SubprocessResult::describe_end() const {
  if (!started) return "could not start: " + start_error;
  if (timed_out) return fmt::format("timed out after {:.1f} s", wall_s);
  if (stopped) return fmt::format("stopped by braid after {:.1f} s", wall_s);
  if (term_signal != 0)
    return fmt::format("killed by signal {} ({})", signal_name(term_signal), ::strsignal(term_signal));
  return fmt::format("exit code {}", exit_code);
}

SubprocessResult run_subprocess(const SubprocessOptions& options) {
  SubprocessResult result;
  Fd peer(options.peer_fd);  // the caller's copy, closed once the child has its own
  if (options.argv.empty()) throw SystemError("run_subprocess: empty argv");
  const auto t0 = std::chrono::steady_clock::now();
  Launch launch = prepare_launch(options);
  if (launch.executable.empty()) {
    result.start_error = "'" + options.argv[0] + "' not found in PATH";
    return result;
  }
  const SandboxPlan sandbox(options.sandbox, options.sandbox.enabled ? sandbox_support() : SandboxSupport{});
  result.sandbox_level = sandbox.level();

  ChildPipes pipes = open_pipes(options);
  const pid_t pid = spawn(launch, pipes, peer.fd, sandbox, options.memory_limit_bytes);
  peer.reset();
  result.pgid = pid;
  if (auto error = start_error(pipes.report_r, pid, launch, sandbox)) {
    result.start_error = std::move(*error);
    result.wall_s = seconds_since(t0);
    return result;
  }
  result.started = true;
  announce_start(options, pid);

  OutputPump pump(std::move(pipes), options.output_cap_bytes);
  GroupWatch watch(pid, options, t0);
  while (true) {
    const auto now = std::chrono::steady_clock::now();
    watch.step(now, result);
    if (!pump.open() && watch.exited) break;
    // A process that escaped the group may keep a pipe open; stop reading a moment after exit.
    if (watch.exited && now >= watch.drain_until) break;
    pump.pump(watch.exited ? 20 : 10);
  }

  const int status = reap(pid);
  if (!launch.token.empty()) kill_processes_with_token(launch.token);  // what left the group (setsid) dies too
  result.wall_s = seconds_since(t0);
  collect(status, pump, options, result);
  return result;
}

bool candidate_env_allowed(const std::string& name) {
  static const std::set<std::string> exact{"PATH",
                                           "HOME",
                                           "USER",
                                           "LOGNAME",
                                           "SHELL",
                                           "LANG",
                                           "LANGUAGE",
                                           "TERM",
                                           "TZ",
                                           "TMPDIR",
                                           "LD_LIBRARY_PATH",
                                           "LIBRARY_PATH",
                                           "PYTHONPATH",
                                           "VIRTUAL_ENV",
                                           "OPENBLAS_CORETYPE",
                                           "OPENBLAS_L2_SIZE",
                                           "OMP_NUM_THREADS"};
  static const char* const prefixes[] = {"LC_",   "CUDA_", "NCCL_", "NVIDIA_", "CUBLAS", "TORCH_",
                                         "OMPI_", "PMIX_", "PMI_",  "SLURM_",  "BRAID_"};
  if (exact.count(name)) return true;
  for (const char* p : prefixes)
    if (name.rfind(p, 0) == 0) return !is_secret_env_name(name);
  return false;
}

}  // namespace braid
