#include "braid/report/plots.hpp"

#include <map>
#include <set>

#include "braid/report/svg.hpp"

namespace braid::report {

std::optional<std::string> run_plot_svg(RunReader& run, std::string_view name) {
  if (name == "best_by_eval")
    return step_chart_svg(run.curves(CurveAxis::Evaluations, CurveValue::BestScore, true),
                          {"Best score over evaluations", "evaluations", "combined score (best so far)"});
  if (name == "best_by_time")
    return step_chart_svg(run.curves(CurveAxis::WallSeconds, CurveValue::BestScore, true),
                          {"Best score over wall time", "seconds since the first candidate", "combined score (best so far)"});
  if (name == "ratio_by_eval")
    return step_chart_svg(run.curves(CurveAxis::Evaluations, CurveValue::RatioToBoundOfBest, true),
                          {"Ratio to bound of the best candidate", "evaluations", "ratio_to_bound"});
  if (name == "every_candidate")
    return points_svg(run.points(), {"Score of every correct candidate", "evaluations", "score", 900, 340});
  if (name == "failures") {
    json ov = run.overview();
    std::vector<std::pair<std::string, double>> bars;
    for (auto& [kind, n] : ov.at("failures").items()) bars.emplace_back(kind, n.get<double>());
    return bar_chart_svg(bars, {"Candidates by outcome", "", ""});
  }
  return std::nullopt;
}

std::optional<std::string> compare_plot_svg(const std::vector<RunReader*>& runs, std::string_view name) {
  CurveAxis axis;
  ChartOptions options;
  if (name == "best_by_eval") {
    axis = CurveAxis::Evaluations;
    options = {"Best score over evaluations, per run", "evaluations", "combined score (best so far)"};
  } else if (name == "best_by_time") {
    axis = CurveAxis::WallSeconds;
    options = {"Best score over wall time, per run", "seconds since the run's first candidate", "combined score (best so far)"};
  } else {
    return std::nullopt;
  }
  std::vector<Curve> curves;
  for (auto* run : runs) {
    auto c = run->curves(axis, CurveValue::BestScore, false);
    Curve overall = c.empty() ? Curve{} : c.front();
    overall.label = run->name();
    curves.push_back(std::move(overall));
  }
  return step_chart_svg(curves, options);
}

json compare_knobs(const std::vector<RunReader*>& runs) {
  json out = {{"runs", json::array()}, {"knobs", json::array()}};
  std::vector<std::string> order;  // knob names in first-seen order
  std::set<std::string> seen;
  std::vector<std::map<std::string, std::string>> values;
  for (auto* run : runs) {
    json b = run->best_knobs();
    out["runs"].push_back({{"name", run->name()}, {"best", b.at("best")}, {"error", b.value("error", std::string())}});
    std::map<std::string, std::string> v;
    for (const auto& k : b.at("knobs")) {
      auto n = k.at("name").get<std::string>();
      v[n] = k.at("value").get<std::string>();
      if (seen.insert(n).second) order.push_back(n);
    }
    values.push_back(std::move(v));
  }
  for (const auto& n : order) {
    json row = {{"name", n}, {"values", json::array()}};
    for (const auto& v : values) {
      auto it = v.find(n);
      row["values"].push_back(it == v.end() ? json(nullptr) : json(it->second));
    }
    out["knobs"].push_back(row);
  }
  return out;
}

// Runs measure the same thing when they evaluated one workload folder from one seed program.
json compare_workloads(const std::vector<RunReader*>& runs) {
  json out = {{"runs", json::array()}, {"same", true}, {"why", ""}};
  std::set<std::string> folders, seeds;
  for (auto* run : runs) {
    json w = run->workload();
    w["name"] = run->name();
    folders.insert(w["workload_dir"].is_string() ? w["workload_dir"].get<std::string>() : "");
    seeds.insert(w["seed_hash"].is_string() ? w["seed_hash"].get<std::string>() : "");
    out["runs"].push_back(std::move(w));
  }
  if (folders.size() > 1) {
    std::string names;
    for (const auto& w : out["runs"])
      names += (names.empty() ? "" : ", ") + w["name"].get<std::string>() + " (" +
               (w["workload"].is_string() ? w["workload"].get<std::string>() : "no workload recorded") + ")";
    out["same"] = false;
    out["why"] = "runs of different workloads: " + names;
  } else if (seeds.size() > 1) {
    out["same"] = false;
    out["why"] = "runs of one workload folder from different seed programs";
  }
  return out;
}

}  // namespace braid::report
