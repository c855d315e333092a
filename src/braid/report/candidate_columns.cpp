#include "braid/report/candidate_columns.hpp"

#include <charconv>
#include <set>

namespace braid::report {
namespace {

std::optional<double> as_number(const std::string& text) {
  double v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || text.empty()) return std::nullopt;
  return v;
}

// -1, 0, 1 for present values; absent ones compare after every present one.
template <class T>
int compare_present(const std::optional<T>& a, const std::optional<T>& b, bool ascending) {
  if (!a && !b) return 0;
  if (!a) return 1;
  if (!b) return -1;
  if (*a == *b) return 0;
  return (*a < *b) == ascending ? -1 : 1;
}

}  // namespace

std::map<std::string, std::string> knobs_of_key(const std::string& knob_key) {
  std::map<std::string, std::string> out;
  std::size_t start = 0;
  while (start < knob_key.size()) {
    std::size_t end = knob_key.find(';', start);
    if (end == std::string::npos) end = knob_key.size();
    std::string pair = knob_key.substr(start, end - start);
    if (auto eq = pair.find('='); eq != std::string::npos && eq > 0) out[pair.substr(0, eq)] = pair.substr(eq + 1);
    start = end + 1;
  }
  return out;
}

std::optional<std::string> knob_value(const CandidateNode& n, const std::string& name) {
  auto knobs = knobs_of_key(n.knob_key);
  if (auto it = knobs.find(name); it != knobs.end()) return it->second;
  return std::nullopt;
}

std::optional<double> metric_value(const CandidateNode& n, const std::string& name) {
  for (const auto& [k, v] : n.metrics)
    if (k == name) return v;
  return std::nullopt;
}

void add_columns(json& item, const CandidateNode& n) {
  json knobs = json::object(), metrics = json::object();
  for (auto& [k, v] : knobs_of_key(n.knob_key)) knobs[k] = v;
  for (const auto& [k, v] : n.metrics) metrics[k] = v;
  item["knobs"] = std::move(knobs);
  item["metrics"] = std::move(metrics);
}

json column_names(const std::vector<CandidateNode>& nodes) {
  std::set<std::string> knobs, metrics;
  std::string last_key;  // consecutive candidates often share a knob key
  for (const auto& n : nodes) {
    if (n.knob_key != last_key) {
      for (auto& [k, v] : knobs_of_key(n.knob_key)) knobs.insert(k);
      last_key = n.knob_key;
    }
    for (const auto& [k, v] : n.metrics) metrics.insert(k);
  }
  return {{"knobs", knobs}, {"metrics", metrics}};
}

bool column_before(const CandidateNode& x, const CandidateNode& y, const std::string& order, bool ascending, bool tie) {
  const auto colon = order.find(':');
  const std::string kind = order.substr(0, colon), name = order.substr(colon + 1);
  int c = 0;
  if (kind == "metric") {
    c = compare_present(metric_value(x, name), metric_value(y, name), ascending);
  } else {
    auto a = knob_value(x, name), b = knob_value(y, name);
    auto na = a ? as_number(*a) : std::nullopt, nb = b ? as_number(*b) : std::nullopt;
    c = (na && nb) ? compare_present(na, nb, ascending) : compare_present(a, b, ascending);
  }
  return c != 0 ? c < 0 : tie;
}

std::string csv_text_cell(const std::string& text) {
  std::string t = text;
  if (!t.empty() && (t[0] == '=' || t[0] == '+' || t[0] == '-' || t[0] == '@' || t[0] == '\t' || t[0] == '\r')) t.insert(0, "'");
  if (t.find_first_of(",\"\n\r") == std::string::npos) return t;
  std::string out = "\"";
  for (char ch : t) {
    if (ch == '"') out += '"';
    out += ch;
  }
  return out + "\"";
}

}  // namespace braid::report
