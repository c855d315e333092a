// Plots as standalone SVG text, shared by `braid serve` (served as image/svg+xml) and
// `braid report` (inlined into the HTML). No script, no external reference: safe to inline.
// Every text that came from a run (labels, ids) is escaped.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "braid/report/run_reader.hpp"
#include "braid/util/json.hpp"

namespace braid::report {

// Text for HTML and XML bodies and attribute values: & < > " ' escaped.
std::string escape_html(std::string_view text);

struct ChartOptions {
  std::string title;
  std::string x_label;
  std::string y_label;
  int width = 720;
  int height = 320;
};

// Best-so-far step lines, one colour per curve, a point (with a tooltip naming the candidate)
// where a curve improved. Empty curves draw an explanatory note instead of axes.
std::string step_chart_svg(const std::vector<Curve>& curves, const ChartOptions& options);

// Horizontal bars (e.g. candidates per failure kind).
std::string bar_chart_svg(const std::vector<std::pair<std::string, double>>& bars, const ChartOptions& options);

// Every correct candidate as a point (RunReader::points()): score over evaluation index, single
// measurements hollow, re-measured ones with their re-run range, the seed's line, the best ringed.
std::string points_svg(const json& points, const ChartOptions& options);

// A lineage tree laid out by RunReader::tree(): nodes coloured by score, the focus ringed.
std::string tree_svg(const json& tree, int width = 900);

// Colour for the i-th series (islands, runs) and for a score in [lo, hi].
std::string series_colour(std::size_t i);
std::string score_colour(double score, double lo, double hi);

}  // namespace braid::report
