// The candidate sandbox (util/sandbox.hpp) and the environment allowlist, on real processes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "braid/util/fs.hpp"
#include "braid/util/subprocess.hpp"

namespace braid {
namespace {

struct Folder {
  std::filesystem::path run;
  std::filesystem::path work;
  Folder() {
    static int n = 0;
    run = std::filesystem::temp_directory_path() / ("braid_sandbox_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
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
  if (sandbox_support().namespaces) EXPECT_EQ(r.stdout_text.find("db"), std::string::npos) << "the database was readable";
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

TEST(Sandbox, ResultChannelReachesTheParent) {
  Folder f;
  auto o = sandboxed(f, "read nonce <&3; echo \"$BRAID_RESULT_FD $nonce\" >&3; env | grep -c 5ca1ab1e >&2");
  o.result_channel = true;
  o.channel_greeting = "5ca1ab1e\n";
  auto r = run_subprocess(o);
  EXPECT_EQ(r.channel_text, "3 5ca1ab1e\n");
  EXPECT_EQ(r.stderr_text, "0\n") << "the nonce reached the environment";
}

}  // namespace
}  // namespace braid
