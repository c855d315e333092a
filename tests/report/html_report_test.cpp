#include "braid/report/html_report.hpp"

#include <gtest/gtest.h>

#include <regex>

#include "braid/util/fs.hpp"
#include "report_support.hpp"

namespace braid::report {
namespace {

TEST(HtmlReport, SelfContainedWithPlotsAndEscapedCandidates) {
  auto dir = test::test_dir("html");
  auto run = test::make_synthetic_run(dir, 120);
  auto out = dir / "report.html";
  ReportOptions options;
  options.top = 200;      // every correct candidate in the table, the hostile one included
  options.detailed = 200; // and its code and feedback shown
  std::size_t bytes = write_html_report(dir, out, options);
  std::string html = read_file(out);
  EXPECT_EQ(bytes, html.size());
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  // No script at all, and nothing fetched at view time (the only URL is the SVG namespace).
  EXPECT_EQ(html.find("<script"), std::string::npos);
  std::regex url(R"((src|href)\s*=\s*"(https?:)?//)");
  EXPECT_FALSE(std::regex_search(html, url));
  EXPECT_EQ(html.find("<link"), std::string::npos);
  // Plots and the lineage are inline SVG.
  EXPECT_GE(std::count(html.begin(), html.end(), '\n'), 1);
  std::size_t svgs = 0;
  for (std::size_t p = html.find("<svg"); p != std::string::npos; p = html.find("<svg", p + 1)) ++svgs;
  EXPECT_GE(svgs, 5u);
  EXPECT_NE(html.find("Best score over evaluations"), std::string::npos);
  EXPECT_NE(html.find(run.best_id), std::string::npos);
  // The hostile candidate's code and feedback appear, escaped.
  EXPECT_NE(html.find("&lt;/script&gt;&lt;script&gt;window.__pwned = 1&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(html.find("&amp;amp; &amp;lt;b&amp;gt;"), std::string::npos);
  EXPECT_NE(html.find("&lt;b&gt;bold?&lt;/b&gt;"), std::string::npos);
  EXPECT_NE(html.find("&lt;i&gt;model&lt;/i&gt;"), std::string::npos);
  EXPECT_EQ(html.find("<img"), std::string::npos);
  EXPECT_NE(html.find("Recommendation 20: larger tiles"), std::string::npos);
  // The Islands table has one row per island (it was empty: a loop over a dangling reference).
  const auto islands = html.find("<h2>Islands</h2>");
  ASSERT_NE(islands, std::string::npos);
  const std::string table = html.substr(islands, html.find("</table>", islands) - islands);
  for (int i = 0; i < 4; ++i) EXPECT_NE(table.find("<tr><td>" + std::to_string(i) + "</td>"), std::string::npos) << table;
  // A run without confirmations says its best is a single measurement.
  EXPECT_NE(html.find("single measurement"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace braid::report
