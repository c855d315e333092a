#include "braid/util/subprocess.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "braid/util/fs.hpp"

namespace braid {
namespace {

SubprocessResult sh(const std::string& script, double timeout_s = 10.0) {
  SubprocessOptions options;
  options.argv = {"sh", "-c", script};
  options.timeout_s = timeout_s;
  return run_subprocess(options);
}

// A pid is gone once it no longer exists or only remains as a zombie awaiting its reaper.
bool process_gone(pid_t pid) {
  auto stat = try_read_file("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return true;
  auto close = stat->rfind(')');
  return close != std::string::npos && close + 2 < stat->size() && (*stat)[close + 2] == 'Z';
}

bool wait_until_gone(pid_t pid, double seconds) {
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    if (process_gone(pid)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return process_gone(pid);
}

std::filesystem::path temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("braid_subprocess_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(Subprocess, ExitCodeAndOutput) {
  auto r = sh("echo out; echo err 1>&2; exit 3");
  ASSERT_TRUE(r.started) << r.start_error;
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.term_signal, 0);
  EXPECT_FALSE(r.timed_out);
  EXPECT_FALSE(r.succeeded());
  EXPECT_EQ(r.stdout_text, "out\n");
  EXPECT_EQ(r.stderr_text, "err\n");
  EXPECT_EQ(r.describe_end(), "exit code 3");
  EXPECT_TRUE(sh("true").succeeded());
}

TEST(Subprocess, TerminatingSignalIsReported) {
  auto r = sh("kill -SEGV $$");
  ASSERT_TRUE(r.started);
  EXPECT_EQ(r.term_signal, SIGSEGV);
  EXPECT_NE(r.describe_end().find("SIGSEGV"), std::string::npos);
}

TEST(Subprocess, MissingExecutableIsAValue) {
  SubprocessOptions options;
  options.argv = {"braid-no-such-program-xyz"};
  auto r = run_subprocess(options);
  EXPECT_FALSE(r.started);
  EXPECT_NE(r.start_error.find("not found"), std::string::npos);

  options.argv = {"/nonexistent/dir/prog"};
  r = run_subprocess(options);
  EXPECT_FALSE(r.started);
  EXPECT_NE(r.start_error.find("cannot execute"), std::string::npos);
}

TEST(Subprocess, RunsInWorkingDirectoryWithAddedEnvironment) {
  auto dir = temp_dir("cwd");
  SubprocessOptions options;
  options.argv = {"sh", "-c", "pwd; echo \"$BRAID_TEST_VALUE\""};
  options.cwd = dir;
  options.env_add = {{"BRAID_TEST_VALUE", "forty two"}};
  options.stdout_path = dir / "out.txt";
  auto r = run_subprocess(options);
  ASSERT_TRUE(r.succeeded()) << r.describe_end();
  EXPECT_EQ(r.stdout_text, std::filesystem::canonical(dir).string() + "\nforty two\n");
  EXPECT_EQ(read_file(dir / "out.txt"), r.stdout_text);
  std::filesystem::remove_all(dir);
}

TEST(Subprocess, TimeoutKillsTheWholeGroup) {
  auto dir = temp_dir("timeout");
  auto pid_file = dir / "grandchild.pid";
  long observed_pgid = 0;
  SubprocessOptions options;
  // The child ignores SIGTERM (so SIGKILL must follow) and leaves a sleeping grandchild.
  options.argv = {"sh", "-c", "trap '' TERM; sleep 30 & echo $! > '" + pid_file.string() + "'; sleep 30"};
  options.timeout_s = 0.5;
  options.kill_grace_s = 0.3;
  options.on_start = [&](long pgid) { observed_pgid = pgid; };
  auto r = run_subprocess(options);
  ASSERT_TRUE(r.started);
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.term_signal, SIGKILL);
  EXPECT_LT(r.wall_s, 5.0);
  EXPECT_EQ(observed_pgid, r.pgid);
  pid_t grandchild = std::stoi(read_file(pid_file));
  EXPECT_TRUE(wait_until_gone(grandchild, 2.0));
  EXPECT_NE(r.describe_end().find("timed out"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(Subprocess, BackgroundLeftoversAreKilledWhenTheChildExits) {
  auto r = sh("sleep 30 & echo $!");
  ASSERT_TRUE(r.succeeded());
  EXPECT_LT(r.wall_s, 5.0);
  pid_t grandchild = std::stoi(r.stdout_text);
  EXPECT_TRUE(wait_until_gone(grandchild, 2.0));
}

TEST(Subprocess, OutputFloodIsCapped) {
  auto dir = temp_dir("flood");
  SubprocessOptions options;
  options.argv = {"sh", "-c", "head -c 20000000 /dev/zero | tr '\\0' 'x'; echo END 1>&2"};
  options.output_cap_bytes = 4096;
  options.stdout_path = dir / "out.txt";
  auto r = run_subprocess(options);
  ASSERT_TRUE(r.succeeded()) << r.describe_end();
  EXPECT_EQ(r.stdout_bytes, 20000000u);
  EXPECT_LT(r.stdout_text.size(), 3 * 4096u);
  EXPECT_NE(r.stdout_text.find("bytes omitted"), std::string::npos);
  EXPECT_EQ(r.stdout_text.substr(0, 10), "xxxxxxxxxx");
  EXPECT_EQ(r.stdout_text.back(), 'x');
  EXPECT_LT(std::filesystem::file_size(dir / "out.txt"), 3 * 4096u);
  EXPECT_EQ(r.stderr_text, "END\n");
  std::filesystem::remove_all(dir);
}

TEST(Subprocess, EnvironmentHasNoSecrets) {
  ::setenv("BRAID_TEST_OPENAI_API_KEY", "sk-secret", 1);
  ::setenv("BRAID_TEST_HF_TOKEN", "hf-secret", 1);
  ::setenv("BRAID_TEST_CUSTOM_KEY_VAR", "custom-secret", 1);
  ::setenv("BRAID_TEST_EXTRA_SECRET", "extra-secret", 1);
  ::setenv("BRAID_TEST_PLAIN", "visible", 1);
  register_secret_env_name("BRAID_TEST_CUSTOM_KEY_VAR");
  SubprocessOptions options;
  options.argv = {"env"};
  options.secret_env_names = {"BRAID_TEST_EXTRA_SECRET"};
  options.env_add = {{"BRAID_TEST_ADDED_TOKEN", "added-secret"}, {"BRAID_TEST_ADDED", "ok"}};
  auto r = run_subprocess(options);
  ASSERT_TRUE(r.succeeded());
  EXPECT_EQ(r.stdout_text.find("secret"), std::string::npos) << r.stdout_text;
  EXPECT_NE(r.stdout_text.find("BRAID_TEST_PLAIN=visible"), std::string::npos);
  EXPECT_NE(r.stdout_text.find("BRAID_TEST_ADDED=ok"), std::string::npos);
  EXPECT_TRUE(is_secret_env_name("ANTHROPIC_API_KEY"));
  EXPECT_TRUE(is_secret_env_name("GITHUB_TOKEN"));
  EXPECT_FALSE(is_secret_env_name("PATH"));
}

// A candidate's environment comes from an allowlist: secrets of any name stay behind.
TEST(Subprocess, CandidateEnvironmentIsAnAllowlist) {
  ::setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-1", 1);
  ::setenv("GITHUB_PAT", "ghp-secret-2", 1);
  ::setenv("DB_PASSWORD", "db-secret-3", 1);
  ::setenv("NCCL_DEBUG", "WARN", 1);
  SubprocessOptions options;
  options.argv = {"sh", "-c", "env"};
  options.candidate = true;
  options.env_add["BRAID_SEED"] = "7";
  options.timeout_s = 10;
  auto r = run_subprocess(options);
  ::unsetenv("AWS_SECRET_ACCESS_KEY");
  ::unsetenv("GITHUB_PAT");
  ::unsetenv("DB_PASSWORD");
  ::unsetenv("NCCL_DEBUG");
  ASSERT_TRUE(r.succeeded()) << r.describe_end();
  for (const char* secret : {"aws-secret-1", "ghp-secret-2", "db-secret-3"}) EXPECT_EQ(r.stdout_text.find(secret), std::string::npos);
  EXPECT_NE(r.stdout_text.find("PATH="), std::string::npos);
  EXPECT_NE(r.stdout_text.find("NCCL_DEBUG=WARN"), std::string::npos);
  EXPECT_NE(r.stdout_text.find("BRAID_SEED=7"), std::string::npos);
  EXPECT_NE(r.stdout_text.find("BRAID_EVAL_TOKEN="), std::string::npos);
  EXPECT_TRUE(candidate_env_allowed("LC_ALL"));
  EXPECT_FALSE(candidate_env_allowed("NCCL_API_KEY"));  // a secret's name wins over an allowed prefix
  EXPECT_FALSE(candidate_env_allowed("HTTPS_PROXY"));
}

// A process that left the group with setsid (a double fork) dies with the evaluation.
TEST(Subprocess, CandidateDescendantsThatCalledSetsidAreKilled) {
  const auto pid_file = std::filesystem::temp_directory_path() / ("braid_setsid_" + std::to_string(::getpid()));
  std::filesystem::remove(pid_file);
  SubprocessOptions options;
  options.argv = {"sh", "-c", "setsid sh -c 'echo $$ > " + pid_file.string() + "; exec sleep 60' >/dev/null 2>&1 & sleep 0.3; exit 0"};
  options.candidate = true;
  options.timeout_s = 10;
  auto r = run_subprocess(options);
  ASSERT_TRUE(r.succeeded()) << r.describe_end();
  auto text = try_read_file(pid_file);
  ASSERT_TRUE(text.has_value());
  const pid_t escaped = static_cast<pid_t>(std::stol(*text));
  EXPECT_TRUE(wait_until_gone(escaped, 5.0)) << "pid " << escaped << " survived the evaluation";
  if (!process_gone(escaped)) ::kill(escaped, SIGKILL);
  std::filesystem::remove(pid_file);
}

// The workload's memory limit (RLIMIT_AS) holds in the candidate's processes.
TEST(Subprocess, CandidateMemoryLimitStopsAnUnboundedAllocation) {
  SubprocessOptions options;
  options.argv = {"python3", "-c", "b = bytearray(2 << 30); print('allocated')"};
  options.candidate = true;
  options.memory_limit_bytes = std::size_t(512) << 20;
  options.timeout_s = 20;
  auto r = run_subprocess(options);
  ASSERT_TRUE(r.started) << r.start_error;
  EXPECT_FALSE(r.succeeded());
  EXPECT_EQ(r.stdout_text.find("allocated"), std::string::npos);
  EXPECT_NE(r.stderr_text.find("MemoryError"), std::string::npos) << r.stderr_text;
}

TEST(Subprocess, ChildDiesWithItsParent) {
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t middle = ::fork();
  ASSERT_GE(middle, 0);
  if (middle == 0) {
    ::close(ready[0]);
    SubprocessOptions options;
    options.argv = {"sleep", "30"};
    options.on_start = [&](long pgid) {
      long value = pgid;
      ssize_t ignored = ::write(ready[1], &value, sizeof value);
      (void)ignored;
    };
    run_subprocess(options);
    ::_exit(0);
  }
  ::close(ready[1]);
  long child = 0;
  ASSERT_EQ(::read(ready[0], &child, sizeof child), static_cast<ssize_t>(sizeof child));
  ::close(ready[0]);
  EXPECT_FALSE(process_gone(static_cast<pid_t>(child)));
  ::kill(middle, SIGKILL);
  int status = 0;
  ::waitpid(middle, &status, 0);
  EXPECT_TRUE(wait_until_gone(static_cast<pid_t>(child), 3.0));
}

TEST(Subprocess, KillGroupChecksStartMarker) {
  std::atomic<long> pgid{0};
  SubprocessResult result;
  std::thread runner([&] {
    SubprocessOptions options;
    options.argv = {"sleep", "30"};
    options.timeout_s = 20;
    options.on_start = [&](long g) { pgid = g; };
    result = run_subprocess(options);
  });
  while (pgid == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::string marker = process_start_marker(pgid);
  ASSERT_FALSE(marker.empty());
  EXPECT_EQ(process_start_marker(pgid), marker);
  std::string other = marker.substr(0, marker.find(':') + 1) + "1";
  EXPECT_FALSE(kill_process_group_if_alive(pgid, other));
  EXPECT_FALSE(process_gone(static_cast<pid_t>(pgid.load())));
  EXPECT_TRUE(kill_process_group_if_alive(pgid, marker));
  runner.join();
  EXPECT_EQ(result.term_signal, SIGKILL);
  EXPECT_FALSE(result.timed_out);
  EXPECT_LT(result.wall_s, 10.0);
  EXPECT_EQ(process_start_marker(999999999), "");
}

TEST(Subprocess, ConcurrentRunsKeepTheirOwnOutput) {
  std::vector<std::thread> threads;
  std::vector<SubprocessResult> results(6);
  for (int i = 0; i < 6; ++i) {
    threads.emplace_back([i, &results] {
      SubprocessOptions options;
      options.argv = {"sh", "-c", "echo run-$0", std::to_string(i)};
      results[i] = run_subprocess(options);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(results[i].succeeded());
    EXPECT_EQ(results[i].stdout_text, "run-" + std::to_string(i) + "\n");
  }
}

TEST(Subprocess, ThrowingOnStartLeavesNoChild) {
  long pgid = 0;
  SubprocessOptions options;
  options.argv = {"sleep", "30"};
  options.on_start = [&](long g) {
    pgid = g;
    throw std::runtime_error("database is locked");
  };
  EXPECT_THROW(run_subprocess(options), std::runtime_error);
  ASSERT_NE(pgid, 0);
  EXPECT_TRUE(process_gone(static_cast<pid_t>(pgid)));
  EXPECT_EQ(process_start_marker(pgid), "");  // reaped, not a zombie
}

TEST(Subprocess, SignalNames) {
  EXPECT_EQ(signal_name(SIGABRT), "SIGABRT");
  EXPECT_EQ(signal_name(SIGKILL), "SIGKILL");
  EXPECT_EQ(signal_name(63), "SIG63");
}

}  // namespace
}  // namespace braid
