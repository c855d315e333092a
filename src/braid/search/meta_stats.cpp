#include "braid/search/meta_stats.hpp"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "braid/program/program.hpp"

namespace braid {
namespace {

// "k1=v1;k2=v2" -> pairs
std::vector<std::pair<std::string, std::string>> split_key(const std::string& key) {
  std::vector<std::pair<std::string, std::string>> out;
  std::size_t start = 0;
  while (start < key.size()) {
    std::size_t end = key.find(';', start);
    if (end == std::string::npos) end = key.size();
    std::string item = key.substr(start, end - start);
    if (auto eq = item.find('='); eq != std::string::npos) out.emplace_back(item.substr(0, eq), item.substr(eq + 1));
    start = end + 1;
  }
  return out;
}

}  // namespace

MetaUpdate StatsMetaSummarizer::summarize(const std::vector<ProgramRecord>& recent, const ProgramRecord* best,
                                          const json& memory, std::int64_t generation) {
  MetaUpdate u;
  std::map<std::string, int> by_type, by_failure;
  std::map<std::string, int> improved_by_type;
  std::vector<const ProgramRecord*> ok;
  for (const auto& r : recent) {
    by_type[r.patch_type]++;
    by_failure[std::string(to_string(r.failure))]++;
    if (r.correct && r.failure == FailureKind::Ok) ok.push_back(&r);
  }
  std::sort(ok.begin(), ok.end(), [](auto* a, auto* b) { return a->combined_score > b->combined_score; });
  double best_score = best ? best->combined_score : 0.0;

  std::string summary = fmt::format("generation {}: {} candidates, {} correct", generation, recent.size(), ok.size());
  for (auto& [k, v] : by_failure)
    if (k != "ok") summary += fmt::format(", {} {}", v, k);
  if (!ok.empty()) summary += fmt::format("; batch best {:.4g} ({}), run best {:.4g}", ok.front()->combined_score, ok.front()->id, best_score);
  u.summary = summary;

  // Scratchpad: cumulative counts carried over from memory.
  u.scratchpad = memory.contains("scratchpad") && memory["scratchpad"].is_object() ? memory["scratchpad"] : json::object();
  auto& tried = u.scratchpad["patch_types_tried"];
  auto& failures = u.scratchpad["failure_kinds"];
  if (!tried.is_object()) tried = json::object();
  if (!failures.is_object()) failures = json::object();
  for (auto& [k, v] : by_type) tried[k] = tried.value(k, 0) + v;
  for (auto& [k, v] : by_failure) failures[k] = failures.value(k, 0) + v;

  // Knob values among the top quarter of correct candidates versus all failures.
  std::map<std::string, std::map<std::string, int>> top_counts, fail_counts;
  std::size_t top_n = std::max<std::size_t>(1, ok.size() / 4);
  for (std::size_t i = 0; i < ok.size() && i < top_n; ++i)
    for (auto& [k, v] : split_key(ok[i]->knob_key)) top_counts[k][v]++;
  for (const auto& r : recent)
    if (!(r.correct && r.failure == FailureKind::Ok))
      for (auto& [k, v] : split_key(r.knob_key)) fail_counts[k][v]++;

  std::vector<std::pair<double, std::string>> recs;
  if (best) {
    for (auto& [k, v] : split_key(best->knob_key))
      recs.emplace_back(3.0, fmt::format("keep {}={} (in the best program so far, score {:.4g})", k, v, best_score));
  }
  for (auto& [knob, counts] : top_counts)
    for (auto& [value, n] : counts)
      if (n >= 2) recs.emplace_back(1.0 + n, fmt::format("try {}={} more: {} of the top {} recent candidates use it", knob, value, n, top_n));
  for (auto& [knob, counts] : fail_counts)
    for (auto& [value, n] : counts)
      if (n >= 2) recs.emplace_back(0.5 + n * 0.1, fmt::format("avoid {}={}: {} recent failures use it", knob, value, n));
  for (auto& [k, v] : by_failure)
    if (k != "ok" && v * 2 > int(recent.size()))
      recs.emplace_back(2.5, fmt::format("most recent candidates end in {}: read their diagnostics before changing more", k));
  std::stable_sort(recs.begin(), recs.end(), [](auto& a, auto& b) { return a.first > b.first; });
  for (auto& [score, text] : recs) {
    if (u.recommendations.size() >= 8) break;
    u.recommendations.push_back(text);
  }
  auto& won = u.scratchpad["won"];
  if (!won.is_array()) won = json::array();
  if (!ok.empty()) won.push_back({{"generation", generation}, {"id", ok.front()->id}, {"score", ok.front()->combined_score},
                                  {"knobs", ok.front()->knob_key}, {"patch_type", ok.front()->patch_type}});
  while (won.size() > 20) won.erase(won.begin());
  return u;
}

std::string render_meta_text(const MetaUpdate& u, std::int64_t generation) {
  std::string out = fmt::format("# meta summary at generation {}\n\n## summary\n{}\n\n## recommendations\n", generation, u.summary);
  for (std::size_t i = 0; i < u.recommendations.size(); ++i) out += fmt::format("{}. {}\n", i + 1, u.recommendations[i]);
  out += "\n## scratchpad\n" + u.scratchpad.dump(2) + "\n";
  return out;
}

}  // namespace braid
