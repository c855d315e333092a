// The cascade on the real example: g++ builds each variant once; the program verifies and
// benchmarks itself.
#include "braid/eval/cascade.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <deque>
#include <map>
#include <thread>

#include "braid/eval/driver_build.hpp"
#include "braid/eval/workload.hpp"
#include "braid/util/fs.hpp"
#include "eval_test_support.hpp"

namespace braid {
namespace {

using testing::TempDir;
using testing::variant;

CascadeConfig example_config() {
  WorkloadSpec spec = load_workload(testing::example_dir("matmul_cpu"));
  return CascadeConfig::from_json(spec.evaluator, spec.dir, spec.program.filename().string());
}

std::string example_code() { return read_file(testing::example_dir("matmul_cpu") / "program.cpp"); }

TEST(Cascade, DefaultProgramPassesWithAScore) {
  TempDir work("cascade_ok");
  CascadeEvaluator evaluator(example_config());
  // The driver and the worker start on two threads; the observer hears them one at a time, so it
  // takes no lock (a call overlapping another would be seen).
  std::vector<std::tuple<long, bool, std::string>> jobs;
  std::atomic<int> inside{0};
  std::atomic<bool> overlapped{false};
  EvalRequest request{"cand0001", example_code(), work.path(), 42};
  EvalResult r = evaluator.evaluate(request, [&](long pgid, bool running, const std::string& what) {
    if (inside.fetch_add(1) != 0) overlapped = true;
    jobs.emplace_back(pgid, running, what);
    inside.fetch_sub(1);
  });
  EXPECT_FALSE(overlapped.load());
  ASSERT_EQ(r.failure, FailureKind::Ok) << r.error_text;
  EXPECT_TRUE(r.correct);
  EXPECT_EQ(r.level_reached, 3);
  EXPECT_GT(r.combined_score, 0.0);
  EXPECT_GT(r.public_metrics.value("gflops", 0.0), 0.0);
  EXPECT_NE(r.text_feedback.find("GFLOP/s"), std::string::npos);
  for (const char* level : {"build", "run", "bench"}) EXPECT_GT(r.timings.value(level, 0.0), 0.0) << level;
  // Each process group was reported when it started and when it ended: the build, then the
  // driver and the worker beside it for run and bench (docs/sandbox.md, "Driver and worker").
  ASSERT_EQ(jobs.size(), 10u);
  EXPECT_TRUE(std::get<1>(jobs[0]));
  EXPECT_FALSE(std::get<1>(jobs[1]));
  EXPECT_EQ(std::get<0>(jobs[0]), std::get<0>(jobs[1]));
  std::map<std::string, int> open;
  for (const auto& [pgid, running, what] : jobs) open[what] += running ? 1 : -1;
  EXPECT_EQ(open, (std::map<std::string, int>{{"cand0001 build", 0},
                                              {"cand0001 run", 0},
                                              {"cand0001 run.worker", 0},
                                              {"cand0001 bench", 0},
                                              {"cand0001 bench.worker", 0}}));
  EXPECT_EQ(r.private_metrics.value("verdict_channel", ""), "verified");
  EXPECT_GT(r.private_metrics.value("round_trip_ms", 0.0), 0.0);  // the driver's pings
  // The contract files and logs are where the report looks for them.
  EXPECT_TRUE(std::filesystem::exists(work / "program.cpp"));
  EXPECT_TRUE(std::filesystem::exists(work / "results/metrics.json"));
  EXPECT_EQ(json::parse(read_file(work / "results/correct.json"))["correct"], true);
  EXPECT_TRUE(std::filesystem::exists(work / "logs/build.stderr"));
  EXPECT_TRUE(std::filesystem::exists(work / "logs/bench.stdout"));
  EXPECT_TRUE(std::filesystem::exists(work / "logs/bench.worker.stderr"));
}

// The workload's driver: built once into the cache (never into a work folder), and a driver
// that does not build fails the evaluation as build_failed, saying so.
TEST(Cascade, DriverIsBuiltOnceAndItsFailureIsABuildFailure) {
  TempDir cache("driver_cache");
  const std::filesystem::path workload = testing::example_dir("matmul_cpu");
  CascadeConfig config = example_config();
  DriverBuild first = build_driver(config.driver_build, workload, {}, 60, cache.path());
  ASSERT_TRUE(first.error.empty()) << first.error;
  EXPECT_TRUE(std::filesystem::is_regular_file(first.binary));
  EXPECT_EQ(first.binary.parent_path().parent_path(), cache.path());
  const auto built_at = std::filesystem::last_write_time(first.binary);
  DriverBuild again = build_driver(config.driver_build, workload, {}, 60, cache.path());
  EXPECT_EQ(again.binary, first.binary);
  EXPECT_EQ(std::filesystem::last_write_time(again.binary), built_at);  // from the cache

  TempDir work("cascade_no_driver");
  config.driver_build = "g++ -O2 -o {driver} {workload_dir}/no_such_driver.cpp";
  CascadeEvaluator evaluator(config);
  EvalResult r = evaluator.evaluate(EvalRequest{"c1", example_code(), work.path(), 3}, nullptr);
  EXPECT_EQ(r.failure, FailureKind::BuildFailed) << r.error_text;
  EXPECT_NE(r.error_text.find("driver did not build"), std::string::npos) << r.error_text;
  EXPECT_NE(r.error_text.find("no_such_driver.cpp"), std::string::npos) << r.error_text;
}

// Beside a driver: a worker that does not exist could not start (run_failed), one that exits
// at once ended before answering (run_failed), and a program that answers wrongly is a wrong
// answer (verify_failed) even when it then crashes.
TEST(Cascade, WorkerFailuresAreClassified) {
  CascadeConfig config = example_config();
  const std::string code = example_code();
  const std::string kernel_entry = "  const float* b_source = B;\n";
  struct WorkerCase {
    std::string name, worker, code;
    FailureKind expected;
    std::string error_has;
  };
  const std::vector<WorkerCase> cases = {
      {"missing", "{work_dir}/no_such_worker", code, FailureKind::RunFailed, "could not start"},
      {"quits", "{artifact}", variant(code, kernel_entry, kernel_entry + "  std::exit(0);\n"), FailureKind::RunFailed,
       "the worker ended before answering call 1"},
      {"wrong_then_crash", "{artifact}",
       variant(code, kernel_entry,
               kernel_entry + "  static const int crash_at_exit = std::atexit([] { std::abort(); });\n  (void)crash_at_exit;\n"
                              "  C[5] = 7;\n  return;\n"),
       FailureKind::VerifyFailed, "C[0][0]"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    TempDir work("cascade_worker_" + c.name);
    config.worker = c.worker;
    CascadeEvaluator evaluator(config);
    EvalResult r = evaluator.evaluate(EvalRequest{c.name, c.code, work.path(), 5}, nullptr);
    EXPECT_EQ(r.failure, c.expected) << r.error_text;
    EXPECT_NE(r.error_text.find(c.error_has), std::string::npos) << r.error_text;
  }
}

// braid init's skeleton and the example carry the same braid_split.hpp.
TEST(Cascade, SplitHeaderCopiesAgree) {
  const std::filesystem::path source(BRAID_SOURCE_DIR);
  EXPECT_EQ(read_file(source / "templates" / "workload" / "braid_split.hpp"),
            read_file(source / "examples" / "matmul_cpu" / "braid_split.hpp"));
}

struct Case {
  std::string name;
  std::string code;
  FailureKind expected;
  int level;
  std::string error_has;
};

// Four broken variants, evaluated at once from threads as the search does.
TEST(Cascade, BrokenVariantsFailTheRightWay) {
  const std::string code = example_code();
  const std::string kernel_entry = "  const float* b_source = B;\n";
  std::vector<Case> cases = {
      {"build", variant(code, kernel_entry, kernel_entry + "  undeclared_helper(C);\n"), FailureKind::BuildFailed, 1,
       "program.cpp:"},
      {"crash", variant(code, kernel_entry, kernel_entry + "  std::abort();\n"), FailureKind::RunFailed, 2, "SIGABRT"},
      {"loop", variant(code, kernel_entry, kernel_entry + "  for (volatile int spin = 0;; spin = spin + 1) {\n  }\n"),
       FailureKind::Timeout, 2, "run+verify timed out"},
      {"wrong", variant(code, "C[i * n + j] = acc;", "C[i * n + j] = acc + (i == 7 && j == 9 ? 1.0f : 0.0f);"),
       FailureKind::VerifyFailed, 2, "C[7][9]"},
  };
  CascadeConfig config = example_config();
  config.run_timeout_s = 1.5;
  CascadeEvaluator evaluator(config);
  std::deque<TempDir> dirs;  // TempDir does not move
  std::vector<EvalResult> results(cases.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    dirs.emplace_back("cascade_" + cases[i].name);
    threads.emplace_back([&, i] {
      results[i] = evaluator.evaluate(EvalRequest{cases[i].name, cases[i].code, dirs[i].path(), 7}, nullptr);
    });
  }
  for (auto& t : threads) t.join();

  for (std::size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].name);
    const EvalResult& r = results[i];
    EXPECT_EQ(r.failure, cases[i].expected) << r.error_text;
    EXPECT_EQ(r.level_reached, cases[i].level);
    EXPECT_FALSE(r.correct);
    EXPECT_EQ(r.combined_score, 0.0);
    EXPECT_NE(r.error_text.find(cases[i].error_has), std::string::npos) << r.error_text;
    json verdict = json::parse(read_file(dirs[i] / "results/correct.json"));
    EXPECT_EQ(verdict["correct"], false);
    EXPECT_EQ(verdict["failure"], std::string(to_string(cases[i].expected)));
  }
  // Compiler errors are trimmed to the error and its location, without the work folder.
  const std::string& build_error = results[0].error_text;
  EXPECT_NE(build_error.find("undeclared_helper"), std::string::npos);
  EXPECT_EQ(build_error.find(dirs[0].path().string()), std::string::npos);
  EXPECT_EQ(build_error.find("note:"), std::string::npos);
  EXPECT_LE(build_error.size(), 3072u);
  // The endless loop was cut at its limit, not at the test's patience.
  EXPECT_LT(results[2].timings.value("run", 99.0), 6.0);
}

TEST(Cascade, MissingVerdictAndBenchFailures) {
  TempDir work("cascade_custom");
  CascadeConfig config;
  config.workload_dir = work.path();
  config.program_filename = "prog.sh";
  config.build = "cp {program} {artifact}";
  config.run = "sh {artifact} verify {results_dir}";
  config.bench = "sh {artifact} bench {results_dir}";
  CascadeEvaluator evaluator(config);

  // Exits 0 without writing a verdict.
  EvalResult silent = evaluator.evaluate(EvalRequest{"s", "exit 0\n", work / "silent", 1}, nullptr);
  EXPECT_EQ(silent.failure, FailureKind::RunFailed);
  EXPECT_NE(silent.error_text.find("wrote no valid results/correct.json"), std::string::npos);

  // Verifies, then the bench crashes.
  const std::string bench_crash =
      "if [ \"$1\" = verify ]; then echo '{\"correct\": true}' > \"$2/correct.json\"; exit 0; fi\n"
      "echo 'bench exploded' 1>&2; exit 4\n";
  EvalResult crash = evaluator.evaluate(EvalRequest{"b", bench_crash, work / "bench", 1}, nullptr);
  EXPECT_EQ(crash.failure, FailureKind::BenchFailed);
  EXPECT_EQ(crash.level_reached, 3);
  EXPECT_NE(crash.error_text.find("exit code 4"), std::string::npos);
  EXPECT_NE(crash.error_text.find("bench exploded"), std::string::npos);

  // The bench writes a score; its verify-time correct.json is kept.
  const std::string scored =
      "if [ \"$1\" = verify ]; then echo '{\"correct\": true}' > \"$2/correct.json\"; "
      "echo '{\"combined_score\": 99}' > \"$2/metrics.json\"; exit 0; fi\n"
      "echo '{\"combined_score\": 1.25, \"public\": {\"seed\": '$BRAID_SEED'}}' > \"$2/metrics.json\"\n";
  EvalResult ok = evaluator.evaluate(EvalRequest{"o", scored, work / "ok", 31}, nullptr);
  ASSERT_EQ(ok.failure, FailureKind::Ok) << ok.error_text;
  EXPECT_DOUBLE_EQ(ok.combined_score, 1.25);
  EXPECT_EQ(ok.public_metrics["seed"], 31);

  // Scores are never read from stdout.
  const std::string stdout_only =
      "if [ \"$1\" = verify ]; then echo '{\"correct\": true}' > \"$2/correct.json\"; exit 0; fi\n"
      "echo '{\"combined_score\": 5}'\n";
  EvalResult printed = evaluator.evaluate(EvalRequest{"p", stdout_only, work / "printed", 1}, nullptr);
  EXPECT_EQ(printed.failure, FailureKind::BenchFailed);
  EXPECT_NE(printed.error_text.find("no metrics.json"), std::string::npos);
}

}  // namespace
}  // namespace braid
