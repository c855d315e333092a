// The log's account of scores the GPU harness withheld: the harness's reason on the program's line,
// and one warning when correct programs' scores keep being withheld (another process on the GPUs).
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <sstream>

#include "braid/search/withheld_scores.hpp"

namespace braid {
namespace {

ProgramRecord withheld_record() {
  ProgramRecord r;
  r.failure = FailureKind::Ok;
  r.public_metrics = json::parse(R"({"score_withheld": true, "sizes": [
    {"size": 4096, "plausibility": "ok"},
    {"size": 819232, "plausibility": "flagged", "plausibility_reason": "first run: CUDA events (1.37 ms) and the host clock (3.76 ms) disagree"}]})");
  return r;
}

ProgramRecord scored_record() {
  ProgramRecord r;
  r.failure = FailureKind::Ok;
  r.combined_score = 1.2;
  r.public_metrics =
      json::parse(R"({"score_withheld": false, "sizes": [{"size": 4096, "plausibility": "rechecked"}]})");
  return r;
}

struct CapturedLog {
  std::ostringstream text;
  std::shared_ptr<spdlog::logger> previous = spdlog::default_logger();
  CapturedLog() {
    spdlog::set_default_logger(
        std::make_shared<spdlog::logger>("t", std::make_shared<spdlog::sinks::ostream_sink_mt>(text)));
  }
  ~CapturedLog() { spdlog::set_default_logger(previous); }
};

TEST(WithheldScores, TheProgramsLineGivesTheHarnesssReason) {
  EXPECT_EQ(withheld_reason(withheld_record().public_metrics),
            "size 819232: first run: CUDA events (1.37 ms) and the host clock (3.76 ms) disagree");
  EXPECT_EQ(withheld_reason(scored_record().public_metrics), "");
  EXPECT_EQ(withheld_reason(json::parse(R"({"score_withheld": true})")), "the harness gave no reason");
  WithheldScores w;
  EXPECT_EQ(w.score_text(scored_record()), " score 1.2");
  EXPECT_EQ(
      w.score_text(withheld_record()),
      " score 0 (score withheld: size 819232: first run: CUDA events (1.37 ms) and the host clock (3.76 ms) disagree)");
  ProgramRecord failed = withheld_record();
  failed.failure = FailureKind::VerifyFailed;
  EXPECT_EQ(w.score_text(failed), "");  // a failure's line already says what failed
}

TEST(WithheldScores, AStreakOfWithheldScoresWarnsOnceNamingAnotherProcess) {
  CapturedLog log;
  WithheldScores w;
  for (int i = 0; i < WithheldScores::kWarnAfter - 1; ++i) w.score_text(withheld_record());
  w.score_text(scored_record());  // a believable score breaks the streak
  for (int i = 0; i < WithheldScores::kWarnAfter - 1; ++i) w.score_text(withheld_record());
  EXPECT_EQ(log.text.str().find("another process"), std::string::npos);
  w.score_text(withheld_record());
  const std::string said = log.text.str();
  EXPECT_NE(said.find("another process is using these GPUs"), std::string::npos) << said;
  for (int i = 0; i < 5; ++i) w.score_text(withheld_record());
  EXPECT_EQ(log.text.str(), said);  // once per run
}

}  // namespace
}  // namespace braid
