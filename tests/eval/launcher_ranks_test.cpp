// The launcher with real multi-rank CPU programs: under `local` and under Debian's mpirun
// (OpenMPI), covering success, a crash, an early exit, a hang, output floods and orphans left by
// a braid killed with SIGKILL. The rank program is compiled once from the source below.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <regex>
#include <fstream>
#include <iostream>
#include <thread>

#include "braid/eval/launcher.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/subprocess.hpp"
#include "eval_test_support.hpp"

namespace braid {
namespace {

using testing::TempDir;

// Reads the bootstrap variables the harness reads, then behaves as argv[1] says.
const char* kRankProgram = R"(
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>
static int env_int(const char* a, const char* b, const char* c) {
  for (const char* n : {a, b, c}) if (const char* v = std::getenv(n)) return std::atoi(v);
  return -1;
}
int main(int argc, char** argv) {
  const int rank = env_int("BRAID_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID");
  const int world = env_int("BRAID_WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS");
  const std::string mode = argc > 1 ? argv[1] : "ok";
  const char* dir = std::getenv("BRAID_EVAL_DIR");
  std::string pid_file = std::string(dir ? dir : ".") + "/pid." + std::to_string(rank);
  if (FILE* f = std::fopen(pid_file.c_str(), "w")) { std::fprintf(f, "%d\n", (int)getpid()); std::fclose(f); }
  std::printf("rank %d of %d gpus=%s run=%s\n", rank, world, std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "",
              std::getenv("BRAID_RUN_ID") ? std::getenv("BRAID_RUN_ID") : "");
  std::fflush(stdout);
  if (mode == "ok") return 0;
  if (mode == "outside") {  // a rank that writes where its sandbox forbids, then exits 0
    const char* out = std::getenv("BRAID_TEST_OUTSIDE");
    FILE* f = out ? std::fopen((std::string(out) + "/rank" + std::to_string(rank)).c_str(), "w") : nullptr;
    std::printf("outside write %s\n", f ? "allowed" : "denied");
    if (f) std::fclose(f);
    return 0;
  }
  if (mode == "crash1" && rank == 1) { std::fprintf(stderr, "rank 1 about to crash\n"); std::fflush(stderr); std::raise(SIGSEGV); }
  if (mode == "exit3" && rank == 1) { std::fprintf(stderr, "boom on rank 1\n"); return 3; }
  if (mode == "early" && rank == 1) return 0;
  if (mode == "flood" && rank == 0) {
    std::string line(1023, 'x'); line += '\n';
    for (int i = 0; i < 20 * 1024; ++i) std::fwrite(line.data(), 1, line.size(), stdout);
    return 0;
  }
  if (mode == "flood") return 0;
  for (;;) pause();  // hang: a barrier the peer never reaches
}
)";

class LauncherTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("launcher_prog");
    write_file_atomic(*dir_ / "rank.cpp", kRankProgram);
    SubprocessOptions cc;
    cc.argv = {"c++", "-O0", "-o", (*dir_ / "rank").string(), (*dir_ / "rank.cpp").string()};
    cc.timeout_s = 120;
    SubprocessResult built = run_subprocess(cc);
    ASSERT_TRUE(built.succeeded()) << built.stderr_text;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  LaunchSpec spec(LauncherKind kind, const std::string& mode, const TempDir& work, double timeout_s = 20) {
    LaunchSpec s;
    s.kind = kind;
    s.ranks = 2;
    s.argv = {(*dir_ / "rank").string(), mode};
    s.cwd = work.path();
    s.gpus = {3, 5};
    s.log_dir = work / "logs";
    s.eval_dir = work.path();
    s.timeout_s = timeout_s;
    s.peer_grace_s = 1.0;
    s.kill_grace_s = 0.5;
    s.name = "test " + mode;
    return s;
  }

  static TempDir* dir_;
};
TempDir* LauncherTest::dir_ = nullptr;

bool process_alive(long pid) {
  if (::kill(static_cast<pid_t>(pid), 0) != 0) return false;
  // A zombie is dead for our purposes.
  auto stat = try_read_file("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  auto close = stat->rfind(')');
  return close != std::string::npos && close + 2 < stat->size() && (*stat)[close + 2] != 'Z';
}

long read_pid(const std::filesystem::path& file) {
  auto text = try_read_file(file);
  return text ? std::atol(text->c_str()) : 0;
}

TEST_F(LauncherTest, LocalRanksBootstrapAndKeepTheirOutput) {
  TempDir work("launch_ok");
  // The ranks start on threads of their own, and the observer hears them one at a time: it takes
  // no lock, and a call that overlaps another is seen (each lingers so that one would).
  std::vector<std::pair<long, bool>> events;
  std::atomic<int> inside{0};
  std::atomic<bool> overlapped{false};
  LaunchResult r = launch_ranks(spec(LauncherKind::Local, "ok", work), [&](long pgid, bool running, const std::string&) {
    if (inside.fetch_add(1) != 0) overlapped = true;
    events.emplace_back(pgid, running);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    inside.fetch_sub(1);
  });
  EXPECT_FALSE(overlapped.load());
  ASSERT_TRUE(r.succeeded()) << r.describe_failure("run");
  ASSERT_EQ(r.ranks.size(), 2u);
  EXPECT_NE(r.ranks[0].stdout_text.find("rank 0 of 2 gpus=3,5"), std::string::npos) << r.ranks[0].stdout_text;
  EXPECT_NE(r.ranks[1].stdout_text.find("rank 1 of 2 gpus=3,5"), std::string::npos);
  EXPECT_NE(read_file(work / "logs" / "rank1.stdout").find("rank 1 of 2"), std::string::npos);
  EXPECT_EQ(events.size(), 4u);  // each rank's group started and ended
}

TEST_F(LauncherTest, LocalCrashNamesTheRankAndStopsThePeers) {
  TempDir work("launch_crash");
  LaunchResult r = launch_ranks(spec(LauncherKind::Local, "crash1", work));
  EXPECT_FALSE(r.succeeded());
  EXPECT_FALSE(r.timed_out);
  ASSERT_EQ(r.first_failed_rank(), 1);
  EXPECT_EQ(r.ranks[1].term_signal, SIGSEGV);
  EXPECT_TRUE(r.ranks[0].stopped);
  EXPECT_LT(r.wall_s, 10.0);
  const std::string text = r.describe_failure("run+verify");
  EXPECT_NE(text.find("rank 1: killed by signal SIGSEGV"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 1 about to crash"), std::string::npos) << text;
}

TEST_F(LauncherTest, LocalHangTimesOutNamingEveryRunningRank) {
  TempDir work("launch_hang");
  LaunchResult r = launch_ranks(spec(LauncherKind::Local, "hang", work, 1.0));
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.ranks_still_running(), (std::vector<int>{0, 1}));
  EXPECT_LT(r.wall_s, 6.0);
  EXPECT_NE(r.describe_failure("run").find("ranks 0, 1 still running"), std::string::npos) << r.describe_failure("run");
  EXPECT_FALSE(process_alive(read_pid(work / "pid.0")));
}

TEST_F(LauncherTest, LocalRankThatExitsEarlyLeavesTheOtherToTheTimeout) {
  TempDir work("launch_early");
  LaunchResult r = launch_ranks(spec(LauncherKind::Local, "early", work, 1.0));
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.ranks_still_running(), std::vector<int>{0});
  EXPECT_EQ(r.ranks[1].exit_code, 0);
  EXPECT_NE(r.describe_failure("run").find("rank 0 still running"), std::string::npos);
}

TEST_F(LauncherTest, LocalOutputFloodIsCapped) {
  TempDir work("launch_flood");
  LaunchSpec s = spec(LauncherKind::Local, "flood", work);
  s.output_cap_bytes = 16 * 1024;
  LaunchResult r = launch_ranks(s);
  ASSERT_TRUE(r.succeeded()) << r.describe_failure("run");
  EXPECT_LT(r.ranks[0].stdout_text.size(), 40u * 1024);
  EXPECT_NE(r.ranks[0].stdout_text.find("bytes omitted"), std::string::npos);
  EXPECT_LT(std::filesystem::file_size(work / "logs" / "rank0.stdout"), 40u * 1024);
}

TEST_F(LauncherTest, MpirunRanksBootstrapThroughOpenMpi) {
  TempDir work("mpi_ok");
  LaunchResult r = launch_ranks(spec(LauncherKind::Mpirun, "ok", work, 60));
  ASSERT_TRUE(r.succeeded()) << r.describe_failure("run") << r.launcher_output;
  EXPECT_NE(r.ranks[0].stdout_text.find("rank 0 of 2 gpus=3,5"), std::string::npos) << r.ranks[0].stdout_text;
  EXPECT_NE(r.ranks[1].stdout_text.find("rank 1 of 2"), std::string::npos);
  EXPECT_NE(read_file(work / "logs" / "rank1.stdout").find("rank 1 of 2"), std::string::npos);
}

// LaunchSpec::sandbox (the GPU profile): local ranks and mpirun's ranks start, bootstrap and
// write their eval folder as before; a write to a hidden folder fails; the level is reported.
TEST_F(LauncherTest, LocalAndMpirunRanksRunInTheSandbox) {
  for (LauncherKind kind : {LauncherKind::Local, LauncherKind::Mpirun}) {
    SCOPED_TRACE(to_string(kind));
    TempDir work("sandboxed_ranks");
    TempDir outside("sandboxed_outside");
    LaunchSpec s = spec(kind, "outside", work, 60);
    s.env["BRAID_TEST_OUTSIDE"] = outside.path().string();
    s.sandbox.enabled = true;
    s.sandbox.profile = SandboxProfile::Gpu;
    s.sandbox.scratch = work.path();
    s.sandbox.hidden = {outside.path()};
    s.sandbox.max_processes = 4096;
    LaunchResult r = launch_ranks(s);
    ASSERT_TRUE(r.succeeded()) << r.describe_failure("run") << r.launcher_output;
    EXPECT_NE(r.sandbox_level, "off");
    std::cout << to_string(kind) << ": " << r.sandbox_level << "\n";
    EXPECT_NE(r.sandbox_level.find("rlimits"), std::string::npos) << r.sandbox_level;
    EXPECT_NE(r.ranks[1].stdout_text.find("rank 1 of 2"), std::string::npos) << r.ranks[1].stdout_text;
    EXPECT_GT(read_pid(work / "pid.1"), 0);  // the eval folder stays writable
    // No Landlock layer (this host, or mpirun: docs/sandbox.md): writes unconfined.
    if (!std::regex_search(r.sandbox_level, std::regex("^landlock[0-9]"))) continue;
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_NE(r.ranks[rank].stdout_text.find("outside write denied"), std::string::npos) << r.ranks[rank].stdout_text;
      EXPECT_FALSE(std::filesystem::exists(outside / ("rank" + std::to_string(rank))));
    }
  }
}

TEST_F(LauncherTest, MpirunFailureNamesTheRank) {
  TempDir work("mpi_exit");
  LaunchResult r = launch_ranks(spec(LauncherKind::Mpirun, "exit3", work, 60));
  EXPECT_FALSE(r.succeeded());
  ASSERT_EQ(r.first_failed_rank(), 1) << r.launcher_output;
  EXPECT_EQ(r.ranks[1].exit_code, 3);
  EXPECT_NE(r.describe_failure("run").find("boom on rank 1"), std::string::npos) << r.describe_failure("run");
}

// mpirun's messages carry no times: when it also reports the rank it ended with SIGTERM after
// another rank's failure, the rank that failed on its own is named, whatever their order.
TEST(LaunchResultTest, FirstFailedRankPrefersTheRootCauseOverRanksTheLauncherEnded) {
  LaunchResult r;
  r.started = true;
  for (int i = 0; i < 3; ++i) r.ranks.push_back(RankOutcome{i, true, 0, 0, false, false, 5.0});
  r.ranks[0].term_signal = SIGTERM;
  r.ranks[2].exit_code = 3;
  EXPECT_EQ(r.first_failed_rank(), 2);
  r.ranks[2].exit_code = 0;
  r.ranks[2].term_signal = SIGSEGV;
  EXPECT_EQ(r.first_failed_rank(), 2);
  r.ranks[2].term_signal = 0;  // only the ended rank failed: it is the one named
  EXPECT_EQ(r.first_failed_rank(), 0);
  r.ranks[1].exit_code = 1;  // an earlier end still comes first
  r.ranks[1].end_s = 4.0;
  r.ranks[2].exit_code = 3;
  EXPECT_EQ(r.first_failed_rank(), 1);
}

TEST_F(LauncherTest, MpirunHangTimesOutAndLeavesNoRank) {
  TempDir work("mpi_hang");
  std::vector<long> groups;
  std::mutex m;
  LaunchResult r = launch_ranks(spec(LauncherKind::Mpirun, "hang", work, 3.0), [&](long pgid, bool running, const std::string&) {
    std::lock_guard lock(m);
    if (running) groups.push_back(pgid);
  });
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.ranks_still_running(), (std::vector<int>{0, 1}));
  EXPECT_GE(groups.size(), 3u);  // mpirun and each rank's own group, for `braid resume`
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(process_alive(read_pid(work / "pid.0")));
  EXPECT_FALSE(process_alive(read_pid(work / "pid.1")));
}

// braid (here: a forked child running the launcher) dies by SIGKILL mid-run: no rank survives.
void expect_no_orphans(LauncherKind kind, LaunchSpec s) {
  const pid_t braid = ::fork();
  ASSERT_GE(braid, 0);
  if (braid == 0) {
    launch_ranks(s);
    ::_exit(0);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while ((read_pid(s.eval_dir / "pid.0") == 0 || read_pid(s.eval_dir / "pid.1") == 0) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const long rank0 = read_pid(s.eval_dir / "pid.0"), rank1 = read_pid(s.eval_dir / "pid.1");
  ASSERT_GT(rank0, 0);
  ASSERT_GT(rank1, 0);
  ::kill(braid, SIGKILL);
  int status = 0;
  ::waitpid(braid, &status, 0);
  const auto gone_by = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while ((process_alive(rank0) || process_alive(rank1)) && std::chrono::steady_clock::now() < gone_by)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(process_alive(rank0)) << to_string(kind);
  EXPECT_FALSE(process_alive(rank1)) << to_string(kind);
}

TEST_F(LauncherTest, LocalRanksDieWithBraid) {
  TempDir work("orphan_local");
  expect_no_orphans(LauncherKind::Local, spec(LauncherKind::Local, "hang", work, 60));
}

TEST_F(LauncherTest, MpirunRanksDieWithBraid) {
  TempDir work("orphan_mpi");
  expect_no_orphans(LauncherKind::Mpirun, spec(LauncherKind::Mpirun, "hang", work, 60));
}

TEST(LauncherArgv, SrunAndMpirunCommandLines) {
  LaunchSpec s;
  s.ranks = 4;
  s.argv = {"/w/prog.out", "--mode", "verify"};
  s.log_dir = "/w/logs";
  s.gpus = {0, 1, 2, 3};
  s.env = {{"NCCL_DEBUG", "WARN"}};
  s.kind = LauncherKind::Srun;
  auto srun = launcher_argv(s);
  EXPECT_EQ(srun[0], "srun");
  EXPECT_NE(std::find(srun.begin(), srun.end(), "--ntasks=4"), srun.end());
  EXPECT_NE(std::find(srun.begin(), srun.end(), "--output=/w/logs/rank%t.stdout"), srun.end());
  EXPECT_NE(std::find(srun.begin(), srun.end(), "--gpus-per-task=1"), srun.end());
  EXPECT_EQ(std::vector<std::string>(srun.end() - 3, srun.end()), s.argv);
  s.kind = LauncherKind::Mpirun;
  auto mpi = launcher_argv(s);
  EXPECT_EQ(mpi[0], "mpirun");
  auto x = std::find(mpi.begin(), mpi.end(), "NCCL_DEBUG");
  ASSERT_NE(x, mpi.end());
  EXPECT_EQ(*(x - 1), "-x");
  EXPECT_EQ(std::vector<std::string>(mpi.end() - 3, mpi.end()), s.argv);
  EXPECT_EQ(parse_launcher_kind("srun"), LauncherKind::Srun);
  EXPECT_FALSE(parse_launcher_kind("ssh"));
}

}  // namespace
}  // namespace braid
