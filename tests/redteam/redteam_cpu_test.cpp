// Cheating CPU candidates (tests/redteam/cpu/*.cpp: each replaces the evolve block of
// examples/matmul_cpu) through the real CascadeEvaluator: each must be rejected with a clear
// diagnostic or scored honestly, and the honest program still scores. The example runs split
// (docs/sandbox.md, "Driver and worker"): the candidate is the worker beside driver.cpp, which
// alone holds the verdict channel, times and verifies.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "../eval/eval_test_support.hpp"
#include "braid/eval/cascade.hpp"
#include "braid/eval/external.hpp"
#include "braid/eval/workload.hpp"
#include "braid/util/fs.hpp"

namespace braid {
namespace {

const std::filesystem::path kRedteam = std::filesystem::path(BRAID_SOURCE_DIR) / "tests" / "redteam" / "cpu";

// The example with its evolve block replaced by the cheating candidate's text.
std::string candidate(const std::string& name) {
  const std::string program = read_file(testing::example_dir("matmul_cpu") / "program.cpp");
  std::string block = read_file(kRedteam / (name + ".cpp"));
  const std::string include = "#include \"honest_kernel.inc\"";
  if (auto at = block.find(include); at != std::string::npos)
    block.replace(at, include.size(), read_file(kRedteam / "honest_kernel.inc"));
  const std::string begin_marker = "// EVOLVE-BLOCK-START kernel\n", end_marker = "// EVOLVE-BLOCK-END";
  const auto begin = program.find(begin_marker) + begin_marker.size();
  const auto end = program.find(end_marker);
  return program.substr(0, begin) + block + "\n" + program.substr(end);
}

// A run folder like braid's: evolution.db and a previous candidate's folder beside this one.
// Parameter: whether the namespace layer may be used (false: the Landlock + keeper + rlimit
// fallback of hosts without unprivileged user namespaces, such as containers that forbid them;
// without Landlock either, the file and network cases skip and say so).
class Redteam : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    WorkloadSpec spec = load_workload(testing::example_dir("matmul_cpu"));
    config_ = CascadeConfig::from_json(spec.evaluator, spec.dir, "program.cpp");
    config_.run_timeout_s = 10;
    config_.bench_timeout_s = 20;
    config_.memory_limit_mb = 512;
    config_.sandbox.max_processes = 64;
    config_.sandbox.namespaces = GetParam();
    if (GetParam() && !sandbox_support().namespaces)
      GTEST_SKIP() << "no namespace layer here (the fallback cases run instead): " << sandbox_support().notes;

    run_ = dir_.path() / "run";
    std::filesystem::create_directories(run_ / "gen_0" / "results");
    write_file_atomic(run_ / "evolution.db", "the run's database\n");
    write_file_atomic(run_ / "gen_0" / "results" / "metrics.json", "{\"combined_score\": 3.0}\n");
    write_file_atomic(run_ / "gen_0" / "program.cpp", "previous candidate\n");
  }

  EvalResult evaluate(const std::string& code, int index = 1) {
    CascadeEvaluator evaluator(config_);
    EvalRequest request{"c" + std::to_string(index), code, run_ / ("gen_" + std::to_string(index)), 7};
    return evaluator.evaluate(request, {});
  }

  // Whether this case's layers keep files and the network out of reach (the keeper, rlimits
  // and the verdict channel work everywhere; the file and network cases need one of these).
  static bool files_confined() { return GetParam() || sandbox_support().landlock_abi > 0; }
  static bool network_confined() { return GetParam() || sandbox_support().landlock_abi >= 4; }
  static std::string missing_layer() {
    return "no namespaces and no Landlock on this host, so the fallback cannot confine it: " + sandbox_support().notes;
  }

  std::filesystem::path work(int index = 1) const { return run_ / ("gen_" + std::to_string(index)); }
  bool database_untouched() const { return read_file(run_ / "evolution.db") == "the run's database\n"; }

  testing::TempDir dir_{"redteam"};
  std::filesystem::path run_;
  CascadeConfig config_;
};

bool process_with_argument_alive(const std::string& argument) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    auto cmdline = try_read_file(entry.path() / "cmdline");
    if (cmdline && cmdline->find(argument) != std::string::npos && cmdline->find("sleep") != std::string::npos)
      return true;
  }
  return false;
}

TEST_P(Redteam, HonestProgramScoresThroughTheVerdictChannel) {
  EvalResult r = evaluate(read_file(testing::example_dir("matmul_cpu") / "program.cpp"));
  ASSERT_EQ(r.failure, FailureKind::Ok) << r.error_text;
  EXPECT_TRUE(r.correct);
  EXPECT_GT(r.combined_score, 0.0);
  EXPECT_EQ(r.private_metrics.value("verdict_channel", ""), "verified");
  const std::string level = r.private_metrics.value("sandbox", "");
  std::printf("sandbox level in force: %s\n", level.c_str());  // for CI logs: which layers this host has
  EXPECT_FALSE(level.empty());
  EXPECT_NE(level, "off");
  // braid wrote the files from the channel's record.
  EXPECT_TRUE(std::filesystem::exists(work() / "results" / "metrics.json"));
}

// The worker exits without answering: the driver says so (no files are read).
TEST_P(Redteam, ForgedVerdictFilesAreRejected) {
  EvalResult r = evaluate(candidate("forged_verdict_files"));
  EXPECT_EQ(r.failure, FailureKind::RunFailed) << r.error_text;
  EXPECT_EQ(r.combined_score, 0.0);
  EXPECT_NE(r.error_text.find("the worker ended before answering"), std::string::npos) << r.error_text;
}

// Beside a driver the record lands on the worker's socket, not on a channel: a broken protocol.
TEST_P(Redteam, ForgedChannelRecordIsRejected) {
  EvalResult r = evaluate(candidate("forged_channel_record"));
  EXPECT_EQ(r.failure, FailureKind::VerifyFailed) << r.error_text;
  EXPECT_EQ(r.combined_score, 0.0);
  EXPECT_NE(r.error_text.find("broke the protocol"), std::string::npos) << r.error_text;
}

TEST_P(Redteam, DatabaseStaysUntouched) {
  if (!files_confined()) GTEST_SKIP() << missing_layer();
  EvalResult r = evaluate(candidate("database_tamper"));
  EXPECT_EQ(r.failure, FailureKind::Ok) << r.error_text;
  EXPECT_TRUE(database_untouched());
}

TEST_P(Redteam, WritesOutsideTheScratchFolderFail) {
  if (!files_confined()) GTEST_SKIP() << missing_layer();
  const std::filesystem::path other_tmp = dir_.path() / "other_candidate_tmp";
  std::filesystem::create_directories(other_tmp);
  config_.env["REDTEAM_OTHER_TMP"] = (other_tmp / "pwned_by_candidate").string();
  EvalResult r = evaluate(candidate("write_outside"));
  EXPECT_EQ(r.failure, FailureKind::Ok) << r.error_text;
  EXPECT_FALSE(std::filesystem::exists(testing::example_dir("matmul_cpu") / "pwned_by_candidate"));
  EXPECT_FALSE(std::filesystem::exists(other_tmp / "pwned_by_candidate"));
  EXPECT_FALSE(std::filesystem::exists(run_ / "gen_0" / "pwned_by_candidate"));
  if (const char* home = std::getenv("HOME"))
    EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(home) / "pwned_by_candidate"));
}

TEST_P(Redteam, PreviousCandidatesAreInvisible) {
  if (!files_confined()) GTEST_SKIP() << missing_layer();
  EvalResult r = evaluate(candidate("read_previous"));
  EXPECT_EQ(r.failure, FailureKind::Ok) << r.error_text;
  EXPECT_FALSE(std::filesystem::exists(work() / "stolen.txt")) << read_file(work() / "stolen.txt");
}

TEST_P(Redteam, SetsidDoubleForkDiesWithTheEvaluation) {
  EvalResult r = evaluate(candidate("setsid_orphan"));
  EXPECT_EQ(r.failure, FailureKind::Ok) << r.error_text;
  // The other layer's instance of this test may run beside it (ctest -j2) with its own orphan
  // still inside its evaluation: an orphan that escaped sleeps 61 s, so a few seconds tell them apart.
  bool alive = true;
  for (int i = 0; i < 50 && alive; ++i) {
    alive = process_with_argument_alive("61.4242");
    if (alive) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_FALSE(alive) << "a `setsid` grandchild outlived its evaluation";
}

TEST_P(Redteam, UnboundedMallocIsBounded) {
  EvalResult r = evaluate(candidate("unbounded_malloc"));
  EXPECT_EQ(r.failure, FailureKind::RunFailed) << r.error_text;
  EXPECT_LT(r.timings.value("run", 99.0), 9.0);
}

TEST_P(Redteam, ForkBombIsContained) {
  if (::geteuid() == 0 && !sandbox_support().pids_cgroup)
    GTEST_SKIP() << "max_processes is not enforceable here (root, no writable pids cgroup): "
                 << sandbox_support().notes;
  config_.run_timeout_s = 3;
  EvalResult r = evaluate(candidate("fork_bomb"));
  EXPECT_TRUE(r.failure == FailureKind::Timeout || r.failure == FailureKind::RunFailed) << to_string(r.failure);
  EXPECT_EQ(r.combined_score, 0.0);
}

TEST_P(Redteam, NonceThiefIsRejectedUnrun) {
  EvalResult r = evaluate(candidate("steal_nonce_early"));
  EXPECT_EQ(r.failure, FailureKind::VerifyFailed) << r.error_text;
  EXPECT_EQ(r.combined_score, 0.0);
  EXPECT_NE(r.error_text.find("names the verdict channel"), std::string::npos) << r.error_text;
}

// The worker has no descriptor 3: nothing to steal, the honest kernel scores honestly.
TEST_P(Redteam, NonceThiefWithoutTheNamesFindsNoNonce) {
  EvalResult r = evaluate(candidate("steal_nonce_fd3"));
  EXPECT_EQ(r.failure, FailureKind::Ok) << r.error_text;
  EXPECT_GT(r.combined_score, 0.0);
  EXPECT_LT(r.combined_score, 100.0);
}

TEST_P(Redteam, StaticInitialiserForgeryFindsNoChannel) {
  EvalResult r = evaluate(candidate("forge_record_and_exit"));
  ASSERT_EQ(r.failure, FailureKind::Ok) << r.error_text;
  EXPECT_GT(r.combined_score, 0.0);
  EXPECT_LT(r.combined_score, 100.0);  // the driver's honest verdict, not the forged 1e9
}

TEST_P(Redteam, WorkerCannotReportItsOwnTime) {
  EvalResult r = evaluate(candidate("lie_about_time"));
  ASSERT_EQ(r.failure, FailureKind::Ok) << r.error_text;
  EXPECT_LT(r.combined_score, 100.0);
  EXPECT_GE(r.public_metrics.value("ms", 0.0), 3.0) << "the driver timed less than the worker spent";
}

TEST_P(Redteam, EveryCallIsVerified) {
  EvalResult r = evaluate(candidate("partial_work"));
  EXPECT_EQ(r.failure, FailureKind::VerifyFailed) << r.error_text;
  EXPECT_EQ(r.combined_score, 0.0);
  // bench's third call, the first one skipped (the worker's count starts afresh in each step)
  EXPECT_NE(r.error_text.find("call 2:"), std::string::npos) << r.error_text;
}

TEST_P(Redteam, AnswerBeforeFinishingFailsVerification) {
  EvalResult r = evaluate(candidate("early_done"));
  EXPECT_EQ(r.failure, FailureKind::VerifyFailed) << r.error_text;
  EXPECT_EQ(r.combined_score, 0.0);
}

TEST_P(Redteam, WorkerCannotReachTheDriversMemory) {
  if (!GetParam() && sandbox_support().landlock_abi == 0 && ::geteuid() == 0)
    GTEST_SKIP() << "root without namespaces or Landlock may ptrace anything: " << sandbox_support().notes;
  EvalResult r = evaluate(candidate("peek_driver"));
  ASSERT_EQ(r.failure, FailureKind::Ok) << r.error_text;
  EXPECT_LT(r.combined_score, 100.0);
  const std::string peeked = read_file(work() / "peek.txt");
  EXPECT_EQ(peeked.find("ok"), std::string::npos) << peeked;
  std::printf("what the worker saw of the driver: %s", peeked.c_str());
}

TEST_P(Redteam, HangIsKilledAndTheNextEvaluationRuns) {
  config_.run_timeout_s = 2;
  EvalResult r = evaluate(candidate("hang"), 1);
  EXPECT_EQ(r.failure, FailureKind::Timeout) << r.error_text;
  EXPECT_LT(r.timings.value("run", 99.0), 8.0);
  EvalResult next = evaluate(read_file(testing::example_dir("matmul_cpu") / "program.cpp"), 2);
  EXPECT_EQ(next.failure, FailureKind::Ok) << next.error_text;
  EXPECT_TRUE(database_untouched());
}

TEST_P(Redteam, NoNetwork) {
  if (!network_confined()) GTEST_SKIP() << missing_layer();
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  socklen_t len = sizeof addr;
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  config_.env["REDTEAM_PORT"] = std::to_string(ntohs(addr.sin_port));
  EvalResult r = evaluate(candidate("network_connect"));
  EXPECT_EQ(r.failure, FailureKind::Ok) << r.error_text;
  pollfd p{listener, POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 0), 0) << "the candidate connected to 127.0.0.1";
  ::close(listener);
}

TEST_P(Redteam, ClockOverrideIsTimedHonestly) {
  EvalResult honest = evaluate(read_file(testing::example_dir("matmul_cpu") / "program.cpp"), 1);
  EvalResult r = evaluate(candidate("clock_override"), 2);
  ASSERT_EQ(r.failure, FailureKind::Ok) << r.error_text;
  // A plain i-k-j loop is a few times faster than the naive one, never thousands of times.
  EXPECT_GT(r.combined_score, 0.0);
  EXPECT_LT(r.combined_score, 100.0);
  EXPECT_GT(r.public_metrics.value("ms", 0.0), 0.01);
  (void)honest;
}

TEST_P(Redteam, SecretsNeverReachTheCandidate) {
  ::setenv("AWS_SECRET_ACCESS_KEY", "redteam-aws-4b7e", 1);
  ::setenv("GITHUB_PAT", "redteam-pat-91c2", 1);
  ::setenv("DB_PASSWORD", "redteam-db-77aa", 1);
  EvalResult r = evaluate(candidate("print_secrets"));
  ::unsetenv("AWS_SECRET_ACCESS_KEY");
  ::unsetenv("GITHUB_PAT");
  ::unsetenv("DB_PASSWORD");
  EXPECT_EQ(r.failure, FailureKind::RunFailed) << r.error_text;
  // The candidate is the worker: its output lands in run.worker.stderr.
  const std::string logs =
      read_file(work() / "logs" / "run.stderr") + read_file(work() / "logs" / "run.worker.stderr") + r.error_text;
  EXPECT_NE(logs.find("BRAID_SEED"), std::string::npos) << "the candidate's environment was not printed";
  for (const char* secret : {"redteam-aws-4b7e", "redteam-pat-91c2", "redteam-db-77aa"})
    EXPECT_EQ(logs.find(secret), std::string::npos) << secret;
}

// The external evaluator runs the candidate too: a script that tampers instead of judging.
TEST_P(Redteam, ExternalEvaluatorIsSandboxedToo) {
  const std::filesystem::path workload = dir_.path() / "external_workload";
  std::filesystem::create_directories(workload);
  write_file_atomic(workload / "evaluate.sh",
                    "echo TAMPERED > ../run/evolution.db\n"
                    "echo TAMPERED > \"$BRAID_WORK_DIR/../evolution.db\"\n"
                    "cat \"$BRAID_WORK_DIR/../gen_0/program.cpp\" > \"$BRAID_WORK_DIR/stolen.txt\"\n"
                    "echo pwned > \"$BRAID_WORKLOAD_DIR/pwned_by_evaluator\"\n"
                    "setsid sh -c 'sleep 53.2727 &'\n"
                    "echo '{\"correct\": true, \"error\": \"\"}' > \"$4/correct.json\"\n"
                    "echo '{\"combined_score\": 1e9}' > \"$4/metrics.json\"\n");
  ExternalConfig config;
  config.workload_dir = workload;
  config.command = "sh evaluate.sh";
  config.timeout_s = 10;
  config.sandbox.namespaces = GetParam();
  config.verdict = "channel";
  ExternalEvaluator evaluator(config);
  EvalResult r = evaluator.evaluate(EvalRequest{"x1", "program text\n", work(), 7}, nullptr);
  EXPECT_EQ(r.failure, FailureKind::RunFailed) << r.error_text;  // files are no verdict
  EXPECT_EQ(r.combined_score, 0.0);
  EXPECT_FALSE(process_with_argument_alive("53.2727"));
  if (!files_confined()) GTEST_SKIP() << missing_layer();
  EXPECT_TRUE(database_untouched());
  EXPECT_EQ(read_file(work() / "stolen.txt"), "");
  EXPECT_FALSE(std::filesystem::exists(workload / "pwned_by_evaluator"));
}

INSTANTIATE_TEST_SUITE_P(Layers, Redteam, ::testing::Bool(), [](const ::testing::TestParamInfo<bool>& info) {
  return info.param ? "namespaces" : "fallback";
});

}  // namespace
}  // namespace braid
