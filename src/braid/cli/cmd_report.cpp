// braid report <results> -o report.html : one self-contained HTML file (plots as SVG, best
// candidates), viewable with no network.
#include <cstdio>

#include "braid/cli/command.hpp"
#include "braid/report/html_report.hpp"

namespace {

braid::cli::Registrar reg(81, [](CLI::App& app, braid::cli::Action& action) {
  struct Options {
    std::string results;
    std::string out = "report.html";
    braid::report::ReportOptions report;
  };
  static Options o;
  auto* cmd = app.add_subcommand("report", "Write a self-contained HTML report of a run");
  cmd->add_option("results", o.results, "results folder of braid evolve")->required()->check(CLI::ExistingDirectory);
  cmd->add_option("-o,--output", o.out, "HTML file to write")->capture_default_str();
  cmd->add_option("-n,--top", o.report.top, "rows in the best-candidates table")->capture_default_str()->check(CLI::Range(1, 1000));
  cmd->add_option("--detailed", o.report.detailed, "best candidates shown with code and diff")->capture_default_str()->check(CLI::Range(0, 100));
  cmd->callback([&action] {
    action = [] {
      std::size_t bytes = braid::report::write_html_report(o.results, o.out, o.report);
      std::printf("braid report: wrote %s (%zu bytes)\n", o.out.c_str(), bytes);
      return 0;
    };
  });
});

}  // namespace
