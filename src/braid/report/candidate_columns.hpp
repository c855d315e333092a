// The per-candidate columns an engineer sorts and exports by: knob values (from the stored
// knob key) and numeric public metrics. Shared by the listing, the export and the knob views.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "braid/report/run_reader.hpp"

namespace braid::report {

// "name=value;..." (program/program.hpp knob_key_of) back into its pairs.
std::map<std::string, std::string> knobs_of_key(const std::string& knob_key);

std::optional<std::string> knob_value(const CandidateNode& n, const std::string& name);
std::optional<double> metric_value(const CandidateNode& n, const std::string& name);

// The listing's extra fields of one candidate: {"knobs": {name: value}, "metrics": {name: v}}.
void add_columns(json& item, const CandidateNode& n);
// Every knob and metric name the run's candidates carry: {"knobs": [...], "metrics": [...]}.
json column_names(const std::vector<CandidateNode>& nodes);

// Strict weak order for the listing's "knob:NAME" / "metric:NAME" orders: candidates without
// the value last in either direction; knob values compared as numbers when both are numbers.
bool column_before(const CandidateNode& x, const CandidateNode& y, const std::string& order, bool ascending, bool tie);

// One CSV cell (RFC 4180 quoting). Text that a spreadsheet would run as a formula (=, +, -, @
// first) is prefixed with ' : cells hold run text, which is untrusted.
std::string csv_text_cell(const std::string& text);

}  // namespace braid::report
