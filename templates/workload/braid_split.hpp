// braid_split.hpp: the frozen pieces of a CPU workload split into a driver and a worker
// (braid's docs/sandbox.md, "Driver and worker"). Keep this file as it is; include it from the
// workload's driver and from its program.
//
// braid starts two processes, each in a sandbox of its own, joined by a socket at descriptor
// BRAID_PEER_FD:
//   the driver  (workload.yaml `driver_build`, built once from the workload folder; trusted)
//               draws fresh inputs for every call, times every call with its own clock, checks
//               every output against its own reference, and alone holds braid's verdict
//               channel (BRAID_RESULT_FD), so only it can write the verdict;
//   the worker  (the candidate's program, workload.yaml `worker`) waits for a call, runs the
//               kernel on the shared memory, answers. It holds no channel and reports no time.
// Protocol: SOCK_SEQPACKET messages of one Message each. The driver's first message carries
// the shared region (a sealed memfd, SCM_RIGHTS); then every Call is answered by a Reply with
// the same sequence number (a Ping without running the kernel). The driver hanging up ends
// the worker.
//
// Run by hand: `driver --mode verify|bench --seed S --results_dir D --worker ./program.out`
// starts the worker itself and writes D/correct.json and D/metrics.json.
#pragma once
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace braid_split {

enum Op : std::uint32_t { kHello = 1, kCall = 2, kPing = 3, kReply = 4 };

struct Message {
  std::uint32_t op = 0;
  std::uint32_t seq = 0;
  std::uint64_t size = 0;     // kHello: bytes of the shared region
  std::uint64_t arg[6] = {};  // kCall: the workload's arguments (offsets, sizes)
};

inline int peer_fd() {
  const char* f = std::getenv("BRAID_PEER_FD");
  return f ? std::atoi(f) : -1;
}

inline bool send_message(int fd, const Message& m, int pass_fd = -1) {
  iovec iov{const_cast<Message*>(&m), sizeof m};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (pass_fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
  }
  return ::sendmsg(fd, &msg, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof m);
}

// One message: 1 when whole, 0 when the peer hung up, -1 on anything else (a short or long
// message, an error). `passed` receives a descriptor that came with it.
inline int receive_message(int fd, Message& m, int* passed = nullptr) {
  iovec iov{&m, sizeof m};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n == 0) return 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      int got = -1;
      std::memcpy(&got, CMSG_DATA(c), sizeof got);
      if (passed) *passed = got;
      else ::close(got);
    }
  return n == static_cast<ssize_t>(sizeof m) && !(msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) ? 1 : -1;
}

// ---- worker ----

// The worker's loop: maps the region the driver sends, then for every Call runs
// kernel(region, arg) and replies. Returns main's exit code (0 once the driver hangs up).
template <typename Kernel>
int serve(Kernel&& kernel) {
  const int fd = peer_fd();
  if (fd < 0) {
    std::fprintf(stderr, "worker: no BRAID_PEER_FD; the workload's driver starts this program\n");
    return 2;
  }
  Message m;
  int region_fd = -1;
  if (receive_message(fd, m, &region_fd) != 1 || m.op != kHello || region_fd < 0) return 3;
  void* region = ::mmap(nullptr, m.size, PROT_READ | PROT_WRITE, MAP_SHARED, region_fd, 0);
  ::close(region_fd);
  if (region == MAP_FAILED) return 3;
  while (true) {
    const int got = receive_message(fd, m);
    if (got == 0) return 0;
    if (got < 0) return 3;
    if (m.op == kCall) kernel(static_cast<char*>(region), static_cast<const std::uint64_t*>(m.arg));
    else if (m.op != kPing) return 3;
    Message reply;
    reply.op = kReply;
    reply.seq = m.seq;
    if (!send_message(fd, reply)) return 3;
  }
}

// ---- driver ----

inline std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (c == '\n') out += "\\n";
    else if (static_cast<unsigned char>(c) < 0x20) out += ' ';
    else out += c;
  }
  return out;
}

// One call's outcome: its round trip in milliseconds (the driver's clock), or why there was
// none; `worker_gone`: the worker ended or hung up (braid files it as run_failed/bench_failed).
struct Call {
  bool ok = false;
  double ms = 0.0;
  std::string error;
  bool worker_gone = false;
};

class Driver {
 public:
  // Takes braid's verdict channel (the nonce comes first), makes this process undumpable (no
  // ptrace, no /proc/<pid>/mem), and hands the worker a shared region of `bytes`. Run by hand
  // (no BRAID_PEER_FD), `worker_path` is started here. error() says what failed.
  Driver(std::size_t bytes, const std::string& worker_path) {
    open_channel();
    ::prctl(PR_SET_DUMPABLE, 0);
    fd_ = peer_fd();
    if (fd_ < 0 && !start_worker(worker_path)) return;
    const int region = ::memfd_create("braid-shared", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (region < 0 || ::ftruncate(region, static_cast<off_t>(bytes)) != 0) {
      fail("cannot create the shared region");
      return;
    }
    // The worker may neither shrink the region (a SIGBUS here) nor grow it.
    ::fcntl(region, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
    void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, region, 0);
    if (base == MAP_FAILED) {
      fail("cannot map the shared region");
      return;
    }
    shared_ = static_cast<char*>(base);
    Message hello;
    hello.op = kHello;
    hello.size = bytes;
    const bool sent = send_message(fd_, hello, region);
    ::close(region);
    if (!sent) {
      gone_ = true;
      fail("the worker ended before the first call");
    }
  }

  const std::string& error() const { return error_; }
  char* shared() const { return shared_; }

  // Runs the kernel once in the worker and times the round trip.
  Call call(std::initializer_list<std::uint64_t> args) { return exchange(kCall, args); }
  // The same without the kernel: the cost of an empty round trip (reported, not subtracted:
  // the worker answers it, so a worker could inflate it).
  Call ping() { return exchange(kPing, {}); }

  // The verdict: one record through braid's channel, or the two files when run by hand.
  // `metrics`: "" or the fields "combined_score": ..., "public": {...}, ... without braces.
  bool report(const std::string& mode, unsigned long long seed, const std::string& results_dir, const std::string& error,
              const std::string& metrics, double timed_ms, const std::string& failure = "") const {
    const std::string verdict = std::string("\"correct\": ") + (error.empty() ? "true" : "false") + ", \"error\": \"" +
                                json_escape(error) + "\"" +
                                (failure.empty() ? "" : ", \"failure\": \"" + json_escape(failure) + "\"");
    std::string fields = metrics;
    std::replace(fields.begin(), fields.end(), '\n', ' ');  // a record is one line
    if (channel_fd_ >= 0) {
      char head[256];
      std::snprintf(head, sizeof head, "{\"braid_verdict\": 1, \"mode\": \"%s\", \"seed\": %llu, \"rank\": 0, \"timed_ms\": %.6f, ",
                    mode.c_str(), seed, timed_ms);
      const std::string line = head + std::string("\"token\": \"") + json_escape(token_) + "\", " + verdict +
                               (fields.empty() ? "" : ", " + fields) + "}\n";
      return ::write(channel_fd_, line.data(), line.size()) == static_cast<ssize_t>(line.size());
    }
    return write_text(results_dir + "/correct.json", "{" + verdict + "}\n") &&
           (fields.empty() || write_text(results_dir + "/metrics.json", "{" + fields + "}\n"));
  }

  ~Driver() {
    if (fd_ >= 0) ::close(fd_);  // the worker's loop ends
    if (child_ > 0) ::waitpid(child_, nullptr, 0);
  }
  Driver(const Driver&) = delete;
  Driver& operator=(const Driver&) = delete;

 private:
  void fail(const std::string& why) { error_ = why; }

  void open_channel() {
    const char* f = std::getenv("BRAID_RESULT_FD");
    if (!f) return;
    channel_fd_ = std::atoi(f);
    ::fcntl(channel_fd_, F_SETFD, FD_CLOEXEC);
    char ch = 0;
    while (token_.size() < 128 && ::read(channel_fd_, &ch, 1) == 1 && ch != '\n') token_ += ch;
  }

  bool start_worker(const std::string& path) {
    int pair[2];
    if (path.empty() || ::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
      fail("no worker: run under braid, or pass --worker PATH");
      return false;
    }
    std::fflush(nullptr);
    child_ = ::fork();
    if (child_ == 0) {
      ::dup2(pair[1], 5);
      ::setenv("BRAID_PEER_FD", "5", 1);
      ::unsetenv("BRAID_RESULT_FD");
      ::execl(path.c_str(), path.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(pair[1]);
    fd_ = pair[0];
    return child_ > 0;
  }

  Call exchange(std::uint32_t op, std::initializer_list<std::uint64_t> args) {
    Call c;
    if (!error_.empty()) {
      c.error = error_;
      c.worker_gone = gone_;
      return c;
    }
    Message m;
    m.op = op;
    m.seq = ++seq_;
    std::copy(args.begin(), args.begin() + std::min<std::size_t>(args.size(), 6), m.arg);
    const auto t0 = std::chrono::steady_clock::now();
    const bool sent = send_message(fd_, m);
    Message reply;
    const int got = sent ? receive_message(fd_, reply) : 0;
    c.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (got == 0) {
      c.worker_gone = gone_ = true;
      c.error = "the worker ended before answering call " + std::to_string(seq_);
    } else if (got < 0 || reply.op != kReply || reply.seq != seq_) {
      c.error = "the worker broke the protocol at call " + std::to_string(seq_) + " (a stray or early answer)";
    } else {
      c.ok = true;
    }
    if (!c.ok) error_ = c.error;  // no call after a broken one
    return c;
  }

  static bool write_text(const std::string& path, const std::string& text) {
    FILE* f = std::fopen(path.c_str(), "w");
    if (!f) return false;
    const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    return std::fclose(f) == 0 && ok;
  }

  int fd_ = -1;
  int channel_fd_ = -1;
  std::string token_;
  char* shared_ = nullptr;
  std::string error_;
  bool gone_ = false;
  std::uint32_t seq_ = 0;
  pid_t child_ = -1;
};

}  // namespace braid_split
