#include "braid/report/run_reader.hpp"

#include <gtest/gtest.h>

#include "braid/report/plots.hpp"
#include "braid/report/svg.hpp"
#include "braid/util/error.hpp"
#include "report_support.hpp"

namespace braid::report {
namespace {

class RunReaderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { run_ = new test::SyntheticRun(test::make_synthetic_run(test::test_dir("reader"), 400)); }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(run_->dir);
    delete run_;
  }
  static test::SyntheticRun* run_;
};
test::SyntheticRun* RunReaderTest::run_ = nullptr;

TEST_F(RunReaderTest, OverviewCountsEveryCandidateAndFindsTheBest) {
  RunReader r(run_->dir);
  json ov = r.overview();
  EXPECT_EQ(ov["count"], 400);
  std::int64_t total = 0;
  for (auto& [k, v] : ov["failures"].items()) total += v.get<std::int64_t>();
  EXPECT_EQ(total, 400);
  EXPECT_GT(ov["failures"]["ok"].get<int>(), 200);
  EXPECT_EQ(ov["best"]["id"], run_->best_id);
  EXPECT_EQ(ov["islands"].size(), 4u);
  EXPECT_TRUE(ov["has_ratio_to_bound"].get<bool>());
  EXPECT_NEAR(ov["cost"]["candidates_usd"].get<double>(), 200 * 0.001, 1e-9);
  EXPECT_EQ(ov["run_seed"], "7");
}

TEST_F(RunReaderTest, CandidatePagesAreOrderedAndCoverTheTableOnce) {
  RunReader r(run_->dir);
  std::set<std::string> seen;
  double last = 1e300;
  for (int offset = 0; offset < 400; offset += 64) {
    CandidatePageQuery q;
    q.offset = offset;
    q.limit = 64;
    json page = r.candidates(q);
    EXPECT_EQ(page["total"], 400);
    for (auto& c : page["items"]) {
      EXPECT_TRUE(seen.insert(c["id"].get<std::string>()).second);
      if (c["correct"].get<bool>()) {
        EXPECT_LE(c["score"].get<double>(), last);
        last = c["score"].get<double>();
      }
    }
  }
  EXPECT_EQ(seen.size(), 400u);
  CandidatePageQuery f;
  f.failure = "build_failed";
  f.island = 2;
  for (auto& c : r.candidates(f)["items"]) {
    EXPECT_EQ(c["failure"], "build_failed");
    EXPECT_EQ(c["island"], 2);
  }
}

TEST_F(RunReaderTest, CandidateDetailHasDiffAgainstItsParentAndCascade) {
  RunReader r(run_->dir);
  auto d = r.candidate(run_->best_id);
  ASSERT_TRUE(d);
  EXPECT_EQ((*d)["record"]["id"], run_->best_id);
  EXPECT_TRUE((*d)["record"]["public_metrics"].is_object());
  ASSERT_TRUE((*d)["diff"].is_string());
  EXPECT_NE((*d)["diff"].get<std::string>().find("@@"), std::string::npos);
  EXPECT_EQ((*d)["cascade"]["level_reached"], 3);
  EXPECT_FALSE(r.candidate("0000000000000000"));
  auto seed = r.candidate(run_->seed_id);
  ASSERT_TRUE(seed);
  EXPECT_TRUE((*seed)["diff"].is_null());
}

TEST_F(RunReaderTest, TreeIsBoundedAndKeepsThePathToTheFocus) {
  RunReader r(run_->dir);
  TreeQuery q;
  q.focus = run_->best_id;
  q.up = 6;
  q.down = 2;
  q.max_children = 3;
  json t = r.tree(q);
  EXPECT_EQ(t["focus"], run_->best_id);
  std::set<std::string> ids;
  bool focus_found = false;
  for (auto& n : t["nodes"]) {
    ids.insert(n["id"].get<std::string>());
    focus_found = focus_found || n["focus"].get<bool>();
  }
  EXPECT_TRUE(focus_found);
  EXPECT_LE(t["nodes"].size(), 400u);
  EXPECT_EQ(t["edges"].size(), t["nodes"].size() - 1);  // one tree
  for (auto& e : t["edges"]) {
    EXPECT_TRUE(ids.count(e["from"].get<std::string>()));
    EXPECT_TRUE(ids.count(e["to"].get<std::string>()));
  }
  // Paged children of the top node add up to its child count.
  const auto& top = t["nodes"][0];
  json kids = r.children(top["id"], 0, 500);
  EXPECT_EQ(kids["total"], top["children"]);
}

TEST_F(RunReaderTest, CurvesAreMonotoneStepsEndingAtTheBest) {
  RunReader r(run_->dir);
  auto curves = r.curves(CurveAxis::Evaluations, CurveValue::BestScore, true);
  ASSERT_EQ(curves.size(), 5u);  // all + 4 islands
  for (const auto& c : curves) {
    for (std::size_t k = 1; k < c.points.size(); ++k) {
      EXPECT_GT(c.points[k].y, c.points[k - 1].y);
      EXPECT_GT(c.points[k].x, c.points[k - 1].x);
    }
  }
  EXPECT_EQ(curves[0].points.back().id, run_->best_id);
  EXPECT_EQ(curves[0].x_end, 400);
  auto ratio = r.curves(CurveAxis::WallSeconds, CurveValue::RatioToBoundOfBest, false);
  ASSERT_FALSE(ratio[0].points.empty());
  EXPECT_NEAR(ratio[0].x_end, 399 * 0.5, 1e-6);
}

TEST_F(RunReaderTest, IslandsArchiveMetaAndKnobs) {
  RunReader r(run_->dir);
  json isl = r.islands();
  std::int64_t sum = 0, in_archive = 0;
  for (auto& i : isl["islands"]) {
    sum += i["count"].get<std::int64_t>();
    in_archive += i["archive"].get<std::int64_t>();
  }
  EXPECT_EQ(sum, 400);
  json a = r.archive(0, 10);
  EXPECT_EQ(a["total"], in_archive);
  EXPECT_GT(in_archive, 10);
  EXPECT_EQ(a["items"].size(), 10u);
  json m = r.meta();
  ASSERT_EQ(m["recommendations"].size(), 2u);
  EXPECT_EQ(m["recommendations"][0]["n"], 20);  // newest first
  EXPECT_EQ(m["memory"]["recommendations"][0], "tile");
  json k = r.best_knobs();
  ASSERT_EQ(k["knobs"].size(), 2u);
  EXPECT_EQ(k["knobs"][0]["name"], "kChunks");
}

TEST_F(RunReaderTest, PlotsEscapeRunTextAndCarryNoScript) {
  RunReader r(run_->dir);
  for (const char* name : {"best_by_eval", "best_by_time", "ratio_by_eval", "failures"}) {
    auto svg = run_plot_svg(r, name);
    ASSERT_TRUE(svg) << name;
    EXPECT_EQ(svg->rfind("<svg", 0), 0u);
    EXPECT_EQ(svg->find("<script"), std::string::npos);
  }
  EXPECT_FALSE(run_plot_svg(r, "nope"));
  Curve c{"<script>alert(1)</script>", {{1, 1, "\"><script>"}}, 2};
  std::string svg = step_chart_svg({c}, {"t&t", "x", "y"});
  EXPECT_EQ(svg.find("<script"), std::string::npos);
  EXPECT_NE(svg.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(svg.find("t&amp;t"), std::string::npos);
  EXPECT_EQ(escape_html("<a href=\"x\">'&'</a>"), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
}

TEST(RunReader, SeesCandidatesWrittenWhileOpen) {
  auto dir = test::test_dir("live");
  auto run = test::make_synthetic_run(dir, 20, 2, 500, false);
  RunReader r(dir);
  EXPECT_EQ(r.count(), 20);
  json before = r.status();
  {
    ProgramDatabase writer(dir / "evolution.db");
    ProgramRecord rec;
    rec.id = "00000000000000aa";
    rec.parent_id = run.best_id;
    rec.generation = 100;
    rec.island_idx = 1;
    rec.patch_type = "diff";
    rec.code = test::program_text(8, 4, 500);
    rec.correct = true;
    rec.combined_score = 1e6;
    rec.created_at = 1.8e9;
    writer.insert(rec);
    writer.set_in_archive({rec.id}, {});
  }
  json after = r.status();
  EXPECT_EQ(after["count"], 21);
  EXPECT_NE(after["changes"], before["changes"]);
  EXPECT_EQ(after["best"]["id"], "00000000000000aa");
  json kids = r.children(run.best_id, 0, 50);
  bool found = false;
  for (auto& k : kids["items"]) found = found || k["id"] == "00000000000000aa";
  EXPECT_TRUE(found);
  EXPECT_EQ(r.archive(0, 1)["items"][0]["id"], "00000000000000aa");
  std::filesystem::remove_all(dir);
}

TEST(RunReader, RejectsFoldersThatAreNotRuns) {
  auto dir = test::test_dir("notarun");
  std::filesystem::create_directories(dir);
  EXPECT_THROW(RunReader{dir}, UserError);
  write_file_atomic(dir / "evolution.db", "");
  EXPECT_THROW(RunReader{dir}, UserError);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace braid::report
