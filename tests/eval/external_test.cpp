#include "braid/eval/external.hpp"

#include <gtest/gtest.h>

#include "braid/eval/workload.hpp"
#include "braid/util/fs.hpp"
#include "eval_test_support.hpp"

namespace braid {
namespace {

using testing::TempDir;

// evaluate.py (python3 + g++) on the example, through the workload that names it.
TEST(External, EvaluatePyEndToEnd) {
  WorkloadSpec spec = load_workload(testing::example_dir("matmul_cpu_external"));
  auto evaluator = make_evaluator(spec);
  const std::string code = read_file(spec.program);

  TempDir good("external_ok");
  int started = 0;
  EvalResult ok = evaluator->evaluate(EvalRequest{"e1", code, good.path(), 5},
                                      [&](long, bool running, const std::string&) { started += running; });
  ASSERT_EQ(ok.failure, FailureKind::Ok) << ok.error_text;
  EXPECT_TRUE(ok.correct);
  EXPECT_EQ(ok.level_reached, 3);
  EXPECT_GT(ok.combined_score, 0.0);
  EXPECT_GT(ok.public_metrics.value("gflops", 0.0), 0.0);
  EXPECT_GT(ok.timings.value("external", 0.0), 0.0);
  EXPECT_EQ(started, 1);

  TempDir bad("external_build");
  const std::string broken = testing::variant(code, "  const float* b_source = B;\n", "  const float* b_source = B\n");
  EvalResult failed = evaluator->evaluate(EvalRequest{"e2", broken, bad.path(), 5}, nullptr);
  EXPECT_EQ(failed.failure, FailureKind::BuildFailed) << failed.error_text;
  EXPECT_EQ(failed.level_reached, 1);
  EXPECT_NE(failed.error_text.find("program.cpp:"), std::string::npos) << failed.error_text;
  EXPECT_NE(failed.error_text.find("error"), std::string::npos);
}

// Small shell evaluators for the classifications evaluate.py does not reach.
class ExternalScripts : public ::testing::Test {
 protected:
  TempDir workload{"external_scripts"};
  EvalResult run(const std::string& script, double timeout_s = 10.0, const std::string& verdict = "auto") {
    write_file_atomic(workload / "evaluate.sh", script);
    ExternalConfig config;
    config.verdict = verdict;
    config.workload_dir = workload.path();
    config.command = "sh evaluate.sh";
    config.timeout_s = timeout_s;
    ExternalEvaluator evaluator(config);
    return evaluator.evaluate(EvalRequest{"x", "program text\n", workload / ("work" + std::to_string(count_++)), 3},
                              nullptr);
  }

 private:
  int count_ = 0;
};

TEST_F(ExternalScripts, ReceivesTheContractArguments) {
  // $1..$4 = --program_path P --results_dir D; the script runs in the workload folder.
  EvalResult r = run(
      "[ \"$1\" = --program_path ] && [ \"$3\" = --results_dir ] && [ -f evaluate.sh ] || exit 9\n"
      "echo '{\"correct\": true, \"error\": \"\"}' > \"$4/correct.json\"\n"
      "echo \"{\\\"combined_score\\\": $(wc -l < \"$2\"), \\\"text_feedback\\\": \\\"one line\\\"}\" > \"$4/metrics.json\"\n");
  ASSERT_EQ(r.failure, FailureKind::Ok) << r.error_text;
  EXPECT_DOUBLE_EQ(r.combined_score, 1.0);
  EXPECT_EQ(r.text_feedback, "one line");
}

TEST_F(ExternalScripts, ClassifiesFailures) {
  EvalResult silent = run("echo 'Traceback: boom' 1>&2; exit 1\n");
  EXPECT_EQ(silent.failure, FailureKind::RunFailed);
  EXPECT_NE(silent.error_text.find("no correct.json"), std::string::npos);
  EXPECT_NE(silent.error_text.find("exit code 1"), std::string::npos);
  EXPECT_NE(silent.error_text.find("Traceback: boom"), std::string::npos);

  EvalResult wrong = run("echo '{\"correct\": false, \"error\": \"max error 3.5\"}' > \"$4/correct.json\"\n");
  EXPECT_EQ(wrong.failure, FailureKind::VerifyFailed);
  EXPECT_EQ(wrong.level_reached, 2);
  EXPECT_EQ(wrong.error_text, "max error 3.5");

  EvalResult slow = run("sleep 30\n", 0.5);
  EXPECT_EQ(slow.failure, FailureKind::Timeout);
  EXPECT_LT(slow.timings.value("external", 99.0), 5.0);

  EvalResult no_score = run("echo '{\"correct\": true}' > \"$4/correct.json\"; echo '{}' > \"$4/metrics.json\"\n");
  EXPECT_EQ(no_score.failure, FailureKind::RunFailed);
  EXPECT_NE(no_score.error_text.find("combined_score"), std::string::npos);
}

// `verdict: channel`: the evaluator reads this step's nonce from BRAID_RESULT_FD and answers
// on it; files alone, or a record without the nonce, are refused.
TEST_F(ExternalScripts, VerdictChannelRecordIsRequiredAndChecked) {
  const std::string record =
      "printf '{\"braid_verdict\": 1, \"token\": \"%s\", \"mode\": \"bench\", \"seed\": 3, \"rank\": 0, "
      "\"correct\": true, \"error\": \"\", \"combined_score\": 2.5, \"timed_ms\": 1}\\n' \"$nonce\" >&$BRAID_RESULT_FD\n";
  EvalResult ok = run("read nonce <&$BRAID_RESULT_FD\n" + record, 10.0, "channel");
  ASSERT_EQ(ok.failure, FailureKind::Ok) << ok.error_text;
  EXPECT_DOUBLE_EQ(ok.combined_score, 2.5);
  EXPECT_EQ(ok.private_metrics.value("verdict_channel", ""), "verified");

  EvalResult files = run(
      "echo '{\"correct\": true}' > \"$4/correct.json\"; echo '{\"combined_score\": 1e9}' > \"$4/metrics.json\"\n", 10.0,
      "channel");
  EXPECT_EQ(files.failure, FailureKind::RunFailed) << files.error_text;
  EXPECT_NE(files.error_text.find("verdict channel"), std::string::npos) << files.error_text;

  EvalResult guessed = run("nonce=00000000000000000000000000000000\n" + record, 10.0, "channel");
  EXPECT_EQ(guessed.failure, FailureKind::VerifyFailed) << guessed.error_text;
  EXPECT_NE(guessed.error_text.find("wrong token"), std::string::npos) << guessed.error_text;
}

}  // namespace
}  // namespace braid
