#include <gtest/gtest.h>

#include "braid/eval/evaluator.hpp"
#include "braid/util/fs.hpp"
#include "eval_test_support.hpp"

namespace braid {
namespace {

using testing::TempDir;

TEST(MetricsContract, ReadsAPassingEvaluation) {
  TempDir dir("contract_ok");
  write_file_atomic(dir / "correct.json", R"({"correct": true, "error": ""})");
  write_file_atomic(dir / "metrics.json",
                    R"({"combined_score": 2.5, "public": {"ms": 1.5}, "private": {"runs": [1, 2]},
                        "text_feedback": "fast"})");
  EvalResult r;
  read_metrics_contract(dir.path(), FailureKind::BenchFailed, r);
  EXPECT_EQ(r.failure, FailureKind::Ok);
  EXPECT_TRUE(r.correct);
  EXPECT_DOUBLE_EQ(r.combined_score, 2.5);
  EXPECT_EQ(r.public_metrics["ms"], 1.5);
  EXPECT_EQ(r.private_metrics["runs"].size(), 2u);
  EXPECT_EQ(r.text_feedback, "fast");
  EXPECT_TRUE(r.error_text.empty());
}

TEST(MetricsContract, IncorrectIsVerifyFailedWithItsError) {
  TempDir dir("contract_wrong");
  write_file_atomic(dir / "correct.json", R"({"correct": false, "error": "C[1][2] differs"})");
  write_file_atomic(dir / "metrics.json", R"({"combined_score": 9.0, "text_feedback": "wrong but fast"})");
  EvalResult r;
  read_metrics_contract(dir.path(), FailureKind::RunFailed, r);
  EXPECT_EQ(r.failure, FailureKind::VerifyFailed);
  EXPECT_FALSE(r.correct);
  EXPECT_EQ(r.combined_score, 0.0);
  EXPECT_EQ(r.error_text, "C[1][2] differs");
  EXPECT_EQ(r.text_feedback, "wrong but fast");
}

TEST(MetricsContract, MissingOrMalformedFilesAreTheGivenFailure) {
  TempDir dir("contract_missing");
  EvalResult none;
  read_metrics_contract(dir.path(), FailureKind::RunFailed, none);
  EXPECT_EQ(none.failure, FailureKind::RunFailed);
  EXPECT_EQ(none.error_text, "no correct.json was written");

  write_file_atomic(dir / "correct.json", R"({"correct": true})");
  EvalResult no_metrics;
  read_metrics_contract(dir.path(), FailureKind::BenchFailed, no_metrics);
  EXPECT_EQ(no_metrics.failure, FailureKind::BenchFailed);
  EXPECT_EQ(no_metrics.error_text, "no metrics.json was written");

  write_file_atomic(dir / "metrics.json", R"({"combined_score": "high"})");
  EvalResult bad_score;
  read_metrics_contract(dir.path(), FailureKind::BenchFailed, bad_score);
  EXPECT_EQ(bad_score.failure, FailureKind::BenchFailed);
  EXPECT_NE(bad_score.error_text.find("combined_score"), std::string::npos);

  write_file_atomic(dir / "metrics.json", "{not json");
  EvalResult malformed;
  read_metrics_contract(dir.path(), FailureKind::BenchFailed, malformed);
  EXPECT_EQ(malformed.error_text, "metrics.json is not a JSON object");

  write_file_atomic(dir / "correct.json", R"({"correct": "yes"})");
  EvalResult bad_flag;
  read_metrics_contract(dir.path(), FailureKind::RunFailed, bad_flag);
  EXPECT_EQ(bad_flag.failure, FailureKind::RunFailed);
  EXPECT_NE(bad_flag.error_text.find("boolean"), std::string::npos);
}

}  // namespace
}  // namespace braid
