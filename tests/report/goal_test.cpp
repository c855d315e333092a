// stop_when's outcome (meta target_reached / target_refuted of the run's database) in the
// overview JSON (what the web UI's overview renders) and the static report, escaped; runs
// without a goal have a null goal and no section.
#include <gtest/gtest.h>

#include <filesystem>

#include "braid/db/database.hpp"
#include "braid/report/html_report.hpp"
#include "braid/report/run_reader.hpp"
#include "braid/search/runner.hpp"
#include "report_support.hpp"

namespace braid {
namespace {

using GoalSummary = test::EmptyRunDir;

TEST_F(GoalSummary, OverviewAndReportShowTheCandidateAndTheRefuted) {
  const json reached = {{"metric", "max_ratio_to_bound"}, {"value", 1.031}, {"goal", "max_ratio_to_bound <= 1.05 (median of 3 runs)"},
                        {"id", "abc123"}, {"generation", 41}, {"runs", {1.028, 1.031, 1.04}}};
  const json refuted = {{"9f9f", {{"id", "def456"}, {"generation", 30}, {"runs", {1.046, 1.062, 1.07}}, {"why", "median 1.062 <script>"}}}};
  {
    ProgramDatabase db(db_path(dir_));
    db.set_meta("target_reached", reached.dump());
    db.set_meta("target_refuted", refuted.dump());
  }
  report::RunReader run(dir_);
  const json ov = run.overview();
  ASSERT_TRUE(ov.at("goal").is_object());
  EXPECT_EQ(ov.at("goal").at("reached"), reached);
  ASSERT_EQ(ov.at("goal").at("refuted").size(), 1u);
  EXPECT_EQ(ov.at("goal").at("refuted")[0].at("id"), "def456");
  const std::string html = report::render_html_report(run, report::ReportOptions{});
  EXPECT_NE(html.find("<h2>Goal</h2>"), std::string::npos);
  EXPECT_NE(html.find("<code>abc123</code> (generation 41), max_ratio_to_bound = 1.031; runs 1.028, 1.031, 1.04"), std::string::npos)
      << html;
  EXPECT_NE(html.find("<code>def456</code> (generation 30): runs 1.046, 1.062, 1.07; median 1.062 &lt;script&gt;"), std::string::npos)
      << html;
  EXPECT_EQ(html.find("<script>"), std::string::npos);
}

TEST_F(GoalSummary, AbsentWithoutAGoal) {
  { ProgramDatabase db(db_path(dir_)); }
  report::RunReader run(dir_);
  EXPECT_TRUE(run.overview().at("goal").is_null());
  EXPECT_EQ(report::render_html_report(run, report::ReportOptions{}).find("<h2>Goal</h2>"), std::string::npos);
}

}  // namespace
}  // namespace braid
