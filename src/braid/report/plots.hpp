// The named plots of a run and of a comparison, shared by the web UI and the HTML report.
//   best_by_eval   best score so far over evaluations, overall and per island
//   best_by_time   the same over wall-clock seconds since the first candidate
//   ratio_by_eval  ratio_to_bound (public metric) of the best-so-far candidate
//   failures       candidates per failure kind
//   every_candidate  every correct candidate with its re-runs (svg.hpp points_svg)
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "braid/report/run_reader.hpp"

namespace braid::report {

// nullopt for an unknown name.
std::optional<std::string> run_plot_svg(RunReader& run, std::string_view name);
// Best-so-far curves of several runs overlaid ("best_by_eval" | "best_by_time").
std::optional<std::string> compare_plot_svg(const std::vector<RunReader*>& runs, std::string_view name);
// Knob values of each run's best, side by side: {"runs":[{name,best}], "knobs":[{name, values:[...]}]}.
json compare_knobs(const std::vector<RunReader*>& runs);
// Which workload each run evaluated: {"runs":[{name, workload, workload_dir, seed_hash}], "same", "why"};
// `same` is false when the folders or the seed programs differ (`why` says which).
json compare_workloads(const std::vector<RunReader*>& runs);

}  // namespace braid::report
