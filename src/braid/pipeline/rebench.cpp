#include "braid/pipeline/rebench.hpp"

#include <algorithm>
#include <map>
#include <vector>

#include <fmt/format.h>

#include "braid/db/database.hpp"
#include "braid/pipeline/run_setup.hpp"
#include "braid/search/confirmation.hpp"
#include "braid/search/remeasure.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/log.hpp"

namespace braid {

namespace fs = std::filesystem;

namespace {

// What every re-run is measured against: the run's workload, goal and seed.
struct RebenchContext {
  WorkloadSpec spec;
  StopWhen goal;
  std::uint64_t run_seed = 0;
  int round = 1;
};

RebenchContext read_context(ProgramDatabase& db, const fs::path& results) {
  auto workload_dir = db.meta("workload_dir");
  auto config = db.meta("config");
  if (!workload_dir || !config)
    throw UserError(db_path(results).string(), "run metadata missing (workload_dir, config)");
  RebenchContext c;
  c.spec = load_workload(*workload_dir);
  if (auto r = db.meta("evaluator_ranks")) apply_ranks_override(c.spec, std::stoi(*r));
  c.goal = search_config_from_json(json::parse(*config), db_path(results).string()).stop_when;
  c.run_seed = std::stoull(db.meta("run_seed").value_or("0"));
  const json previous = json::parse(db.meta("rebench").value_or("{}"), nullptr, false);
  c.round = (previous.is_object() ? previous.value("round", 0) : 0) + 1;
  return c;
}

// One program's re-runs. A program that fails a re-run ranks by its correct runs but is
// flagged; none correct: 0.
json remeasure_program(Evaluator& evaluator, const RebenchContext& c, const ProgramRecord& rec, double reported,
                       int runs, const fs::path& dir) {
  json row = {{"id", rec.id},         {"knobs", rec.knob_key},   {"recorded", rec.combined_score},
              {"reported", reported}, {"scores", json::array()}, {"failures", json::array()}};
  if (c.goal.enabled())
    if (auto v = c.goal.value(rec.combined_score, rec.public_metrics)) row["recorded_metric"] = *v;
  std::vector<double> scores, metric;
  for (int k = 1; k <= runs; ++k) {
    EvalResult res = remeasure(evaluator, rec.code, fmt::format("{}-rebench{}.{}", rec.id, c.round, k), c.run_seed,
                               dir / fmt::format("{}_{}", rec.id, k), {});
    const bool ok = res.correct && res.failure == FailureKind::Ok;
    log::info("rebench {}: run {}/{} -> {}", rec.id, k, runs,
              ok ? fmt::format("score {:.4g}", res.combined_score) : std::string(to_string(res.failure)));
    if (!ok) {
      row["failures"].push_back(
          {{"run", k}, {"failure", to_string(res.failure)}, {"error", res.error_text.substr(0, 500)}});
      continue;
    }
    scores.push_back(res.combined_score);
    row["scores"].push_back(res.combined_score);
    if (c.goal.enabled())
      if (auto v = c.goal.value(res.combined_score, res.public_metrics)) metric.push_back(*v);
  }
  row["median"] = scores.empty() ? 0.0 : median(scores);
  if (!metric.empty()) row["median_metric"] = median(metric);
  return row;
}

}  // namespace

json rebench(const fs::path& results, int top, int runs) {
  if (top < 1 || top > 100) throw UserError("--top", "must be between 1 and 100");
  if (runs < 1 || runs > 20) throw UserError("--runs", "must be between 1 and 20");
  if (!fs::exists(db_path(results))) throw UserError(results.string(), "holds no braid run (no evolution.db)");
  ProgramDatabase db(db_path(results), DbAccess::Existing);
  const RebenchContext c = read_context(db, results);
  auto evaluator = make_evaluator(c.spec);

  // The best programs by their trusted figure, one per program text (copies share it).
  std::vector<ProgramRecord> picked;
  std::map<std::string, double> reported;
  for (auto& row : rank_by_trusted_score(db, top)) {
    reported[row.record.id] = row.score;
    picked.push_back(std::move(row.record));
  }
  if (picked.empty()) throw UserError(results.string(), "no correct candidate to re-measure");

  json out = {
      {"round", c.round}, {"runs", runs}, {"metric", c.goal.enabled() ? c.goal.metric : ""}, {"rows", json::array()}};
  const auto dir = results / fmt::format("rebench_{}", c.round);
  for (const auto& rec : picked) {
    out["rows"].push_back(remeasure_program(*evaluator, c, rec, reported[rec.id], runs, dir));
    db.set_meta("rebench", out.dump());  // after every program: an interruption keeps what was measured
  }
  auto& rows = out["rows"];
  std::stable_sort(rows.begin(), rows.end(),
                   [](const json& a, const json& b) { return a["median"].get<double>() > b["median"].get<double>(); });
  db.set_meta("rebench", out.dump());
  write_file_atomic(results / "rebench.json", out.dump(2));
  return out;
}

}  // namespace braid
