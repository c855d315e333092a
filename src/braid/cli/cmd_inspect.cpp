// `braid top`, `braid show`, `braid export`: read-only views of a results folder.
#include <cstdio>
#include <map>
#include <set>

#include <fmt/format.h>

#include "braid/cli/command.hpp"
#include "braid/cli/run_setup.hpp"
#include "braid/db/database.hpp"
#include "braid/mutate/llm_operators.hpp"
#include "braid/pipeline/rebench.hpp"
#include "braid/program/patch.hpp"
#include "braid/search/confirmation.hpp"
#include "braid/search/remeasure.hpp"
#include "braid/search/runner.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/hash.hpp"
#include "braid/util/log.hpp"

namespace braid::cli {
namespace {

// Views open the database read-only: they work on a read-only folder (or one a live run is
// writing) and never create -wal/-shm files or tables there. rebench writes its table.
std::unique_ptr<ProgramDatabase> open_results(const std::filesystem::path& results, DbAccess access = DbAccess::ReadOnly) {
  if (!std::filesystem::exists(db_path(results)))
    throw UserError(results.string(), "holds no braid run (no evolution.db)");
  return std::make_unique<ProgramDatabase>(db_path(results), access);
}

std::string short_knobs(const std::string& key, std::size_t width) {
  std::string s = key;
  for (auto& c : s)
    if (c == ';') c = ' ';
  if (s.size() > width) s = s.substr(0, width - 3) + "...";
  return s;
}

// Counts by failure kind straight from SQL (no whole-table load), and the LLM ledger's totals.
void print_totals(ProgramDatabase& db) {
  const auto counts = db.failure_counts();
  std::string line = fmt::format("{} candidates:", db.count());
  for (auto& [k, v] : counts) line += fmt::format(" {} {}", v, k);
  json llm = llm_totals_from_db(db);
  if (llm.value("calls", 0) > 0)
    line += fmt::format("; LLM {} calls, {} + {} tokens, ${:.4f}, {} errors", llm.value("calls", 0), llm.value("tokens_in", 0),
                        llm.value("tokens_out", 0), llm.value("cost_usd", 0.0), llm.value("errors_total", 0));
  std::printf("%s\n", line.c_str());
  // stop_when: which candidate met the run's goal (search/config.hpp).
  if (auto met = db.meta("target_reached")) {
    try {
      json t = json::parse(*met);
      std::string runs;
      for (const auto& r : t.value("runs", json::array())) runs += fmt::format("{}{:.4g}", runs.empty() ? "" : ", ", r.get<double>());
      std::printf("goal %s met by %s (generation %lld, %s = %.4g%s)\n", t.value("goal", std::string()).c_str(),
                  t.value("id", std::string()).c_str(), (long long)t.value("generation", 0LL), t.value("metric", std::string()).c_str(),
                  t.value("value", 0.0), runs.empty() ? "" : fmt::format("; runs {}", runs).c_str());
    } catch (const json::exception&) {
      std::printf("goal met (record unreadable: %s)\n", met->c_str());
    }
  }
  // Candidates that met the goal once but not on their re-runs (stop_when confirm).
  if (auto refuted = db.meta("target_refuted")) {
    json t = json::parse(*refuted, nullptr, false);
    if (t.is_object())
      for (auto it = t.begin(); it != t.end(); ++it)
        std::printf("not confirmed: %s (generation %lld): %s\n", it->value("id", std::string()).c_str(),
                    (long long)it->value("generation", 0LL), it->value("why", std::string()).c_str());
  }
}

// Programs whose stop_when re-runs disagreed with their score, by code hash (meta target_refuted).
json refuted_programs(ProgramDatabase& db) {
  json t = json::parse(db.meta("target_refuted").value_or("{}"), nullptr, false);
  return t.is_object() ? t : json::object();
}

// Ranked by the trusted figure (search/confirmation.hpp): the median of re-runs where the
// program was re-measured, else its single measurement ("1 run").
int do_top(const std::filesystem::path& results, int n) {
  auto db = open_results(results);
  const auto rows = rank_by_trusted_score(*db, n);
  const json refuted = refuted_programs(*db);
  std::printf("%-4s %-16s %5s %6s %-7s %10s %-16s %10s  %s\n", "rank", "id", "gen", "island", "patch", "score", "measured", "first", "knobs");
  int rank = 1;
  for (const auto& row : rows) {
    const auto& r = row.record;
    auto it = refuted.find(hash_hex(r.code));
    std::string note = it == refuted.end() ? "" : "  [not confirmed: " + it->value("why", std::string()) + "]";
    if (row.refuted && note.empty()) note = "  [lost its confirmation]";
    const std::string measured = row.runs <= 1 && !row.confirmed && !row.refuted ? "1 run"
                                 : fmt::format("{} re-runs ±{:.0f}%", row.runs, row.spread * 50.0);
    std::printf("%-4d %-16s %5lld %6d %-7s %10.4g %-16s %10.4g  %s%s\n", rank++, r.id.c_str(), (long long)r.generation, r.island_idx,
                r.patch_type.c_str(), row.score, measured.c_str(), r.combined_score, short_knobs(r.knob_key, 60).c_str(), note.c_str());
  }
  if (rows.empty()) std::printf("(no correct candidate yet)\n");
  if (auto best = reported_best(*db)) std::printf("best: %s %s\n", best->record.id.c_str(), best->describe().c_str());
  if (auto noise = noise_level(*db)) std::printf("%s\n", noise->describe().c_str());
  print_totals(*db);
  return 0;
}

int do_show(const std::filesystem::path& results, const std::string& id_or_prefix) {
  auto db = open_results(results);
  auto r = db->get(resolve_candidate_id(*db, id_or_prefix, results.string()));
  if (!r) throw UserError(results.string(), "no candidate with id " + id_or_prefix);
  std::printf("id: %s\ngeneration: %lld  island: %d  patch: %s  model: %s\nparents: %s\n", r->id.c_str(),
              (long long)r->generation, r->island_idx, r->patch_type.c_str(), r->model.c_str(),
              fmt::format("{}", fmt::join(r->parent_ids, ", ")).c_str());
  std::printf("outcome: %s  correct: %s  score: %.6g\n", std::string(to_string(r->failure)).c_str(),
              r->correct ? "yes" : "no", r->combined_score);
  json metrics = r->public_metrics;
  const json profile = metrics.is_object() && metrics.contains("profile") ? metrics["profile"] : json();
  if (!profile.is_null()) metrics.erase("profile");
  std::printf("\n== metrics ==\n%s\n", metrics.dump(2).c_str());
  if (auto summary = profile_summary(r->public_metrics); !summary.empty())
    std::printf("\n== profile (Nsight Compute) ==\n%s\n", summary.c_str());
  else if (profile.is_object() && profile.contains("note"))
    std::printf("\n== profile (Nsight Compute) ==\nnone: %s\n", profile["note"].is_string() ? profile["note"].get<std::string>().c_str() : "");
  if (!r->timings.empty()) std::printf("timings: %s\n", r->timings.dump().c_str());
  if (!r->error_text.empty()) std::printf("\n== diagnostics ==\n%s\n", r->error_text.c_str());
  if (!r->text_feedback.empty()) std::printf("\n== feedback ==\n%s\n", r->text_feedback.c_str());
  if (!r->code_diff.empty()) std::printf("\n== patch (%s) ==\n%s\n", r->patch_type.c_str(), r->code_diff.c_str());
  if (!r->parent_id.empty()) {
    if (auto p = db->get(r->parent_id)) std::printf("\n== diff against parent %s ==\n%s\n", p->id.c_str(), unified_diff(p->code, r->code).c_str());
  }
  std::printf("\n== code ==\n%s\n", r->code.c_str());
  return 0;
}

int do_export(const std::filesystem::path& results, bool best, const std::string& id, const std::filesystem::path& out) {
  auto db = open_results(results);
  std::optional<ProgramRecord> r;
  std::string figure;
  if (!id.empty()) {
    r = db->get(resolve_candidate_id(*db, id, results.string()));
    figure = fmt::format("score {:.6g}", r->combined_score);
  } else {
    // The confirmed best (search/confirmation.hpp); a run without confirmations: its highest
    // single measurement not refuted by stop_when re-runs, said so.
    auto b = reported_best(*db);
    if (!b) throw UserError(results.string(), "no correct candidate to export");
    figure = "score " + b->describe();
    r = std::move(b->record);
  }
  (void)best;
  if (out.empty() || out == "-") {
    std::fwrite(r->code.data(), 1, r->code.size(), stdout);
  } else {
    if (std::filesystem::is_directory(out))
      throw UserError(out.string(), "is a folder: -o names the file to write (e.g. " + (out / "best.cu").string() + ")");
    if (!out.parent_path().empty() && !std::filesystem::is_directory(out.parent_path()))
      throw UserError(out.string(), "its folder " + out.parent_path().string() + " does not exist");
    write_file_atomic(out, r->code);
    std::fprintf(stderr, "wrote %s (candidate %s, %s)\n", out.string().c_str(), r->id.c_str(), figure.c_str());
  }
  return 0;
}

// `braid rebench` (pipeline/rebench.hpp): the table of the re-measured programs.
int do_rebench(const std::filesystem::path& results, int top, int runs) {
  const json out = rebench(results, top, runs);
  const auto& rows = out["rows"];
  const std::string goal_metric = out.value("metric", std::string());
  const int round = out.value("round", 1);
  std::printf("re-measured %zu program(s), %d run(s) each with fresh inputs (round %d); ranked by the median score\n", rows.size(), runs, round);
  const bool with_metric = !goal_metric.empty();
  std::printf("%-4s %-16s %10s %10s %s%-7s  %s\n", "rank", "id", "recorded", "median", with_metric ? fmt::format("{:>22} ", goal_metric + " (median)").c_str() : "",
              "failed", "knobs");
  int rank = 1;
  for (const auto& row : rows) {
    std::string metric_cell;
    if (with_metric)
      metric_cell = fmt::format("{:>22} ", row.contains("median_metric") ? fmt::format("{:.4g} (was {:.4g})", row["median_metric"].get<double>(),
                                                                                       row.value("recorded_metric", 0.0))
                                                                         : std::string("-"));
    std::printf("%-4d %-16s %10.4g %10.4g %s%-7zu  %s\n", rank++, row["id"].get<std::string>().c_str(), row["recorded"].get<double>(),
                row["median"].get<double>(), metric_cell.c_str(), row["failures"].size(), short_knobs(row["knobs"].get<std::string>(), 60).c_str());
  }
  return 0;
}

Registrar rebench_reg(33, [](CLI::App& app, Action& action) {
  static std::filesystem::path results;
  static int top = 5, runs = 3;
  auto* cmd = app.add_subcommand("rebench", "Re-measure a run's best programs with fresh inputs (median of several runs)");
  cmd->add_option("results", results, "Results folder")->required();
  cmd->add_option("-n,--top", top, "How many of the best programs")->default_val(5);
  cmd->add_option("--runs", runs, "Runs per program")->default_val(3);
  cmd->callback([&action] { action = [] { return do_rebench(results, top, runs); }; });
});

Registrar top_reg(30, [](CLI::App& app, Action& action) {
  static std::filesystem::path results;
  static int n = 10;
  auto* cmd = app.add_subcommand("top", "Table of the best candidates of a run");
  cmd->add_option("results", results, "Results folder")->required();
  cmd->add_option("-n,--top", n, "How many rows")->default_val(10);
  cmd->callback([&action] { action = [] { return do_top(results, n); }; });
});

Registrar show_reg(31, [](CLI::App& app, Action& action) {
  static std::filesystem::path results;
  static std::string id;
  auto* cmd = app.add_subcommand("show", "One candidate: code, patch, diff, metrics, feedback");
  cmd->add_option("results", results, "Results folder")->required();
  cmd->add_option("id", id, "Candidate id (a unique prefix is enough)")->required();
  cmd->callback([&action] { action = [] { return do_show(results, id); }; });
});

Registrar export_reg(32, [](CLI::App& app, Action& action) {
  static std::filesystem::path results, out;
  static bool best = false;
  static std::string id;
  auto* cmd = app.add_subcommand("export", "Write a candidate's program (the best by default)");
  cmd->add_option("results", results, "Results folder")->required();
  cmd->add_flag("--best", best, "The best correct candidate (default)");
  cmd->add_option("--id", id, "A candidate by id (a unique prefix is enough)");
  cmd->add_option("-o,--output", out, "Output file (default: standard output)");
  cmd->callback([&action] { action = [] { return do_export(results, best, id, out); }; });
});

}  // namespace
}  // namespace braid::cli
