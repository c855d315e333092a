// The fast path's summary of a `braid run` (meta "conversion" of the run's database) in the
// overview JSON (what the web UI's overview renders) and the static report, escaped; runs
// without it have a null conversion and no section.
#include <gtest/gtest.h>

#include <filesystem>

#include "braid/db/database.hpp"
#include "braid/report/html_report.hpp"
#include "braid/report/run_reader.hpp"
#include "braid/search/runner.hpp"
#include "report_support.hpp"

namespace braid {
namespace {

using ConversionSummary = test::EmptyRunDir;

TEST_F(ConversionSummary, OverviewAndReportShowIt) {
  const json conversion = {
      {"input", "/x/seed.cu"},
      {"method", "rules+llm"},
      {"nccl_calls", 2},
      {"converted_calls", 1},
      {"changes", json::array({json::object(), json::object(), json::object()})},
      {"left", json::array({{{"line", 33}, {"construct", "ncclReduce"}, {"reason", "no rule <script>"}}})},
      {"rewrite", {{"accepted", true}, {"attempts", 2}, {"failure", ""}}},
      {"compiled", "compiles (nvcc -c)"},
      {"gate", {{"status", "unverified"}, {"reason", "--no-gate"}}},
      {"annotation", {{"method", "rules"}, {"blocks", {"knobs", "comm_0"}}, {"knob_count", 8}}}};
  {
    ProgramDatabase db(db_path(dir_));
    db.set_meta("conversion", conversion.dump());
  }
  report::RunReader run(dir_);
  const json ov = run.overview();
  ASSERT_TRUE(ov.at("conversion").is_object());
  EXPECT_EQ(ov.at("conversion"), conversion);
  const std::string html = report::render_html_report(run, report::ReportOptions{});
  EXPECT_NE(html.find("<h2>Conversion</h2>"), std::string::npos);
  EXPECT_NE(html.find("1 of 2"), std::string::npos);
  EXPECT_NE(html.find("accepted after 2 attempt(s)"), std::string::npos);
  EXPECT_NE(html.find("unverified (--no-gate)"), std::string::npos);
  EXPECT_NE(html.find("rules: 2 blocks, 8 knobs"), std::string::npos);
  EXPECT_NE(html.find("no rule &lt;script&gt;"), std::string::npos);
  EXPECT_EQ(html.find("no rule <script>"), std::string::npos);
}

TEST_F(ConversionSummary, AbsentForPlainEvolveRuns) {
  { ProgramDatabase db(db_path(dir_)); }
  report::RunReader run(dir_);
  EXPECT_TRUE(run.overview().at("conversion").is_null());
  EXPECT_EQ(report::render_html_report(run, report::ReportOptions{}).find("<h2>Conversion</h2>"), std::string::npos);
}

}  // namespace
}  // namespace braid
