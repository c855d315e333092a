// The candidate sandbox (util/sandbox.hpp) and the environment allowlist, on real processes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "braid/util/fs.hpp"
#include "braid/util/subprocess.hpp"

namespace braid {
namespace {

struct Folder {
  std::filesystem::path run;
  std::filesystem::path work;
  Folder() {
    static int n = 0;
    run = std::filesystem::temp_directory_path() /
          ("braid_sandbox_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    work = run / "gen_1";
    std::filesystem::create_directories(work);
    write_file_atomic(run / "evolution.db", "db\n");
  }
  ~Folder() {
    std::error_code ec;
    std::filesystem::remove_all(run, ec);
  }
};

SubprocessOptions sandboxed(const Folder& f, const std::string& script, SandboxProfile profile = SandboxProfile::Cpu) {
  SubprocessOptions o;
  o.argv = {"/bin/sh", "-c", script};
  o.cwd = f.work;
  o.candidate = true;
  o.sandbox.enabled = true;
  o.sandbox.profile = profile;
  o.sandbox.scratch = f.work;
  o.sandbox.hidden = {f.run};
  o.sandbox.memory_bytes = 256u << 20;
  o.sandbox.max_processes = 32;
  o.timeout_s = 20;
  return o;
}

TEST(Sandbox, LevelIsNamedAndTheRunFolderIsOutOfReach) {
  Folder f;
  auto r = run_subprocess(sandboxed(f, "echo ok > mine.txt; echo x > ../evolution.db; cat ../evolution.db; true"));
  ASSERT_TRUE(r.started) << r.start_error;
  EXPECT_FALSE(r.sandbox_level.empty());
  EXPECT_NE(r.sandbox_level, "off");
  EXPECT_EQ(read_file(f.run / "evolution.db"), "db\n") << r.sandbox_level;
  EXPECT_EQ(read_file(f.work / "mine.txt"), "ok\n");
  if (sandbox_support().namespaces)
    EXPECT_EQ(r.stdout_text.find("db"), std::string::npos) << "the database was readable";
}

TEST(Sandbox, DescendantsDieWithTheCandidateInEitherProfile) {
  for (auto profile : {SandboxProfile::Cpu, SandboxProfile::Gpu}) {
    Folder f;
    auto r = run_subprocess(sandboxed(f, "setsid sh -c 'sleep 77.3131 &' ; echo started", profile));
    ASSERT_TRUE(r.started) << r.start_error;
    EXPECT_EQ(r.exit_code, 0);
    bool alive = false;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/proc", ec))
      if (auto c = try_read_file(e.path() / "cmdline"); c && c->find("77.3131") != std::string::npos) alive = true;
    EXPECT_FALSE(alive) << r.sandbox_level;
  }
}

TEST(Sandbox, ExitStatusAndSignalsPassThroughTheKeeper) {
  Folder f;
  auto exited = run_subprocess(sandboxed(f, "exit 7"));
  EXPECT_EQ(exited.exit_code, 7);
  auto killed = run_subprocess(sandboxed(f, "kill -SEGV $$"));
  EXPECT_EQ(killed.term_signal, SIGSEGV) << killed.describe_end();
  auto gpu = run_subprocess(sandboxed(f, "kill -ABRT $$", SandboxProfile::Gpu));
  EXPECT_EQ(gpu.term_signal, SIGABRT) << gpu.describe_end();
}

TEST(Sandbox, MemoryLimit) {
  Folder f;
  auto r = run_subprocess(sandboxed(f, "python3 -c 'x = bytearray(1 << 30)' 2>&1; echo rc=$?"));
  EXPECT_NE(r.stdout_text.find("MemoryError"), std::string::npos) << r.stdout_text;
}

// GPU ranks: no address-space limit (CUDA reserves far more than it uses), a resident one through
// a memory cgroup where braid runs as root. A process that touches more is killed; the level says so.
TEST(Sandbox, ResidentMemoryLimitOfTheGpuProfile) {
  Folder f;
  auto o = sandboxed(f, "python3 -c 'x = bytearray(512 << 20); print(\"touched\")'; echo rc=$?", SandboxProfile::Gpu);
  o.sandbox.memory_bytes = 0;
  o.sandbox.resident_bytes = 128u << 20;
  auto r = run_subprocess(o);
  ASSERT_TRUE(r.started) << r.start_error;
  if (::geteuid() != 0 || !sandbox_support().memory_cgroup) {
    EXPECT_NE(r.sandbox_level.find("resident memory not limited"), std::string::npos) << r.sandbox_level;
    GTEST_SKIP() << "no writable memory cgroup here: " << sandbox_support().notes;
  }
  EXPECT_NE(r.sandbox_level.find("memory-cgroup"), std::string::npos) << r.sandbox_level;
  EXPECT_EQ(r.stdout_text.find("touched"), std::string::npos) << r.stdout_text;
  EXPECT_NE(r.stdout_text.find("rc=137"), std::string::npos) << r.stdout_text;  // SIGKILL from the cgroup
  // Under the limit, the same process runs.
  auto small = sandboxed(f, "python3 -c 'x = bytearray(32 << 20); print(\"touched\")'", SandboxProfile::Gpu);
  small.sandbox.memory_bytes = 0;
  small.sandbox.resident_bytes = 128u << 20;
  EXPECT_NE(run_subprocess(small).stdout_text.find("touched"), std::string::npos);
}

TEST(Sandbox, ResultChannelReachesTheParent) {
  Folder f;
  auto o = sandboxed(f, "read nonce <&3; echo \"$BRAID_RESULT_FD $nonce\" >&3; env | grep -c 5ca1ab1e >&2");
  o.result_channel = true;
  o.channel_greeting = "5ca1ab1e\n";
  auto r = run_subprocess(o);
  EXPECT_EQ(r.channel_text, "3 5ca1ab1e\n");
  EXPECT_EQ(r.stderr_text, "0\n") << "the nonce reached the environment";
}

// Two sandboxed processes joined by a socket pair each gets as descriptor 5 (a workload's
// driver and worker, eval/work_folder.hpp): they talk, neither gets descriptor 3, and the
// caller's copies are closed once the children have theirs.
TEST(Sandbox, PeerSocketJoinsTwoSandboxedProcesses) {
  Folder f;
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  auto speaker = sandboxed(f, "echo \"hello from $BRAID_PEER_FD\" >&5; [ -e /proc/self/fd/3 ] && echo has3 >&2; true");
  auto listener = sandboxed(f, "read line <&5; echo \"$line\"");
  speaker.peer_fd = pair[0];
  listener.peer_fd = pair[1];
  SubprocessResult heard;
  std::thread other([&] { heard = run_subprocess(listener); });
  SubprocessResult spoke = run_subprocess(speaker);
  other.join();
  EXPECT_EQ(spoke.exit_code, 0) << spoke.describe_end() << spoke.stderr_text;
  EXPECT_EQ(spoke.stderr_text, "");
  EXPECT_EQ(heard.stdout_text, "hello from 5\n") << heard.describe_end() << heard.stderr_text;
  for (int fd : pair) EXPECT_EQ(::fcntl(fd, F_GETFD), -1) << "the caller's copy of " << fd << " is still open";
}

}  // namespace
}  // namespace braid
