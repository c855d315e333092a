// AheadEvaluations (search/ahead_evaluations.hpp): a knob-only candidate evaluated ahead of its turn
// is kept in memory until its turn; a candidate asked again at its turn (new code) never gets the
// old code's result, and a dropped or unwanted result leaves no work folder behind.
#include "braid/search/ahead_evaluations.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace braid {
namespace {

namespace fs = std::filesystem;

struct AheadFixture : ::testing::Test {
  fs::path results = fs::temp_directory_path() / "braid_ahead_evaluations_test";
  void SetUp() override {
    fs::remove_all(results);
    fs::create_directories(results);
  }
  void TearDown() override { fs::remove_all(results); }
  fs::path work_dir(std::int64_t g) {
    const fs::path dir = results / ("gen_" + std::to_string(g));
    fs::create_directories(dir);
    std::ofstream(dir / "program.cu") << "x";
    return dir;
  }
  static ProgramRecord record(std::int64_t g, const std::string& code, double score) {
    ProgramRecord r;
    r.generation = g;
    r.code = code;
    r.combined_score = score;
    r.correct = true;
    return r;
  }
};

TEST_F(AheadFixture, ResultIsKeptUntilItsTurnAndTakenOnce) {
  AheadEvaluations ahead(results);
  ahead.start(7);
  EXPECT_TRUE(ahead.covers(7, "kA = 1"));
  ProgramRecord r = record(7, "kA = 1", 1.25);
  ASSERT_TRUE(ahead.finish(7, r, /*pending=*/true));
  EXPECT_FALSE(ahead.running(7));
  EXPECT_TRUE(ahead.has_result(7, "kA = 1"));
  auto taken = ahead.take(7, "kA = 1");
  ASSERT_TRUE(taken.has_value());
  EXPECT_DOUBLE_EQ(taken->combined_score, 1.25);
  EXPECT_FALSE(ahead.take(7, "kA = 1").has_value());  // taken once
}

TEST_F(AheadFixture, CandidateAskedAgainNeverGetsTheOldCodesResult) {
  AheadEvaluations ahead(results);
  ahead.start(3);
  ProgramRecord r = record(3, "kA = 1", 2.0);
  ASSERT_TRUE(ahead.finish(3, r, true));
  // At its turn the proposal was asked again and came back with other code.
  EXPECT_FALSE(ahead.covers(3, "kA = 2"));
  EXPECT_FALSE(ahead.take(3, "kA = 2").has_value());
  // The old code's result is gone too: nothing can bring it back later.
  EXPECT_FALSE(ahead.has_result(3, "kA = 1"));
  EXPECT_FALSE(ahead.take(3, "kA = 1").has_value());
}

TEST_F(AheadFixture, UnwantedAndDroppedResultsLeaveNoWorkFolder) {
  AheadEvaluations ahead(results);
  const fs::path rejected = work_dir(4), dropped = work_dir(5);
  ahead.start(4);
  ProgramRecord r4 = record(4, "kB = 8", 1.0);
  ASSERT_TRUE(ahead.finish(4, r4, /*pending=*/false));  // its generation was rejected meanwhile
  EXPECT_FALSE(fs::exists(rejected));
  EXPECT_FALSE(ahead.has_result(4, "kB = 8"));
  ahead.start(5);
  ProgramRecord r5 = record(5, "kB = 16", 1.0);
  ASSERT_TRUE(ahead.finish(5, r5, true));
  EXPECT_TRUE(fs::exists(dropped));
  ahead.drop(5);
  EXPECT_FALSE(fs::exists(dropped));
  EXPECT_FALSE(ahead.take(5, "kB = 16").has_value());
}

TEST_F(AheadFixture, AnEvaluationAtItsTurnIsNotTouched) {
  AheadEvaluations ahead(results);
  ProgramRecord r = record(9, "kC = 1", 3.0);
  EXPECT_FALSE(ahead.finish(9, r, true));  // never started ahead
  EXPECT_EQ(r.code, "kC = 1");             // left alone, not moved from
  EXPECT_FALSE(ahead.has_result(9, "kC = 1"));
}

}  // namespace
}  // namespace braid
