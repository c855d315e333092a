// `braid report`: one self-contained HTML file (inline CSS and SVG, no script, no network at
// view time) with the run's plots, islands, lineage of the best and its best candidates.
#pragma once
#include <filesystem>
#include <string>

#include "braid/report/run_reader.hpp"

namespace braid::report {

struct ReportOptions {
  int top = 10;          // rows in the best-candidates table
  int detailed = 3;      // candidates shown with code, diff, metrics and feedback
};

std::string render_html_report(RunReader& run, const ReportOptions& options);

// Renders and writes atomically; returns the number of bytes written.
std::size_t write_html_report(const std::filesystem::path& results_dir, const std::filesystem::path& out,
                              const ReportOptions& options);

}  // namespace braid::report
