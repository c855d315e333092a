// RunReader's trust views: every candidate's measurements (the evaluation, the confirmation
// re-runs of search/confirmation.hpp, `braid rebench`'s medians), the run's state, its workload
// and the candidate export. Kept apart from run_reader.cpp, which reads and lays out the lineage.
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "braid/program/origin.hpp"
#include "braid/report/candidate_columns.hpp"
#include "braid/report/run_reader.hpp"
#include "braid/search/confirmation.hpp"
#include "braid/search/remeasure.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/hash.hpp"
#include "braid/util/text.hpp"

namespace braid::report {
namespace {

// What stands behind one candidate's score besides its own evaluation.
struct Trust {
  std::vector<double> reruns;  // confirmation re-runs (as candidate and as incumbent)
  bool refuted = false;        // its latest confirmation did not promote it
  std::optional<double> rebench_median;
  int rebench_runs = 0;
};

std::unordered_map<std::string, Trust> trust_by_id(const ProgramDatabase& db, const json& rebench) {
  std::unordered_map<std::string, Trust> out;
  for (const auto& c : load_confirmations(db)) {
    Trust& t = out[c.id];
    t.reruns.insert(t.reruns.end(), c.samples.begin(), c.samples.end());
    t.refuted = !c.promoted;
    if (!c.against.empty()) {
      Trust& inc = out[c.against];
      inc.reruns.insert(inc.reruns.end(), c.against_samples.begin(), c.against_samples.end());
    }
  }
  if (rebench.is_object() && rebench.contains("rows") && rebench["rows"].is_array())
    for (const auto& row : rebench["rows"]) {
      if (!row.is_object() || !row.contains("median")) continue;
      Trust& t = out[row.value("id", std::string())];
      t.rebench_median = row.value("median", 0.0);
      t.rebench_runs = row.contains("scores") && row["scores"].is_array() ? int(row["scores"].size()) : 0;
    }
  return out;
}

// The measurement fields of one candidate (shared by the points and the export).
void add_trust(json& j, const Trust* t) {
  j["reruns"] = t ? json(t->reruns) : json::array();
  j["median"] = t && !t->reruns.empty() ? json(median(t->reruns)) : json(nullptr);
  j["spread"] = t && t->reruns.size() >= 2 ? json(relative_spread(t->reruns)) : json(nullptr);
  j["refuted"] = t ? t->refuted : false;
  j["rebench_median"] = t && t->rebench_median ? json(*t->rebench_median) : json(nullptr);
  j["rebench_runs"] = t ? t->rebench_runs : 0;
}

// Whether a live process holds the flock that `braid evolve` keeps on <results>/braid.lock for
// as long as it runs (pipeline/run_lock.hpp). Read from /proc/locks, so the reader never takes the
// lock itself (which would refuse a braid starting at that instant).
bool lock_held(const std::filesystem::path& lock_file) {
  struct stat st {};
  if (::stat(lock_file.c_str(), &st) != 0) return false;
  std::ifstream locks("/proc/locks");
  std::string line;
  while (std::getline(locks, line)) {
    std::istringstream in(line);
    std::string slot, type, advisory, mode, pid, where;
    in >> slot >> type;
    if (type == "->") continue;  // a waiter, not a holder
    in >> advisory >> mode >> pid >> where;
    unsigned maj = 0, min = 0;
    unsigned long inode = 0;
    if (type != "FLOCK" || std::sscanf(where.c_str(), "%x:%x:%lu", &maj, &min, &inode) != 3) continue;
    if (inode == st.st_ino && maj == major(st.st_dev) && min == minor(st.st_dev)) return true;
  }
  return false;
}

double unix_now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

bool is_child(const CandidateNode& n) { return is_proposed(n.patch_type); }

}  // namespace

json RunReader::points() {
  std::lock_guard lock(mutex_);
  refresh_locked();
  const auto trust = trust_by_id(*db_, meta_json("rebench"));
  json seed = nullptr;
  std::int64_t failed = 0;
  std::vector<std::size_t> shown, singles;  // indices of correct candidates
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const auto& n = nodes_[i];
    if (origin_from(n.patch_type) == Origin::Seed && n.correct &&
        (seed.is_null() || n.score > seed["score"].get<double>()))
      seed = {{"id", n.id}, {"score", n.score}};
    if (origin_from(n.patch_type) == Origin::Migrant) continue;  // a copy: its program is plotted where it was made
    if (!n.correct) {
      ++failed;
      continue;
    }
    (trust.count(n.id) ? shown : singles).push_back(i);
  }
  // Large runs: single measurements are thinned to the lowest and highest of each of
  // kBuckets evaluation ranges, which draws the same envelope; re-measured ones are all kept.
  constexpr std::size_t kBuckets = 2000;
  const std::size_t single_total = singles.size();
  if (singles.size() > 2 * kBuckets) {
    std::vector<std::pair<std::size_t, std::size_t>> extremes(kBuckets, {SIZE_MAX, SIZE_MAX});  // (lowest, highest)
    for (auto i : singles) {
      auto& [lo, hi] = extremes[i * kBuckets / nodes_.size()];
      if (lo == SIZE_MAX || nodes_[i].score < nodes_[lo].score) lo = i;
      if (hi == SIZE_MAX || nodes_[i].score > nodes_[hi].score) hi = i;
    }
    singles.clear();
    for (auto [lo, hi] : extremes) {
      if (lo != SIZE_MAX) singles.push_back(lo);
      if (hi != SIZE_MAX && hi != lo) singles.push_back(hi);
    }
  }
  shown.insert(shown.end(), singles.begin(), singles.end());
  std::sort(shown.begin(), shown.end());
  json items = json::array();
  for (auto i : shown) {
    const auto& n = nodes_[i];
    json p = {{"x", i + 1}, {"id", n.id}, {"score", n.score}, {"island", n.island}, {"generation", n.generation}};
    auto it = trust.find(n.id);
    add_trust(p, it == trust.end() ? nullptr : &it->second);
    items.push_back(std::move(p));
  }
  return {{"evaluations", nodes_.size()},
          {"failed", failed},
          {"seed", seed},
          {"noise", meta_json("noise")},
          {"best", best_json()},
          {"single_measurements", single_total},
          {"items", items}};
}

void RunReader::add_trust_fields(json& items) const {
  const auto trust = trust_by_id(*db_, meta_json("rebench"));
  for (auto& item : items) {
    auto it = trust.find(item.at("id").get<std::string>());
    add_trust(item, it == trust.end() ? nullptr : &it->second);
  }
}

json RunReader::state() {
  std::lock_guard lock(mutex_);
  refresh_locked();
  return state_locked();
}

// What a running search has in flight (search/runner.cpp publishes it): null when absent, not
// JSON, or older than 30 s (a run that stopped writing it says nothing current).
json RunReader::live_activity() const {
  auto text = try_read_file(dir_ / "activity.json");
  if (!text) return nullptr;
  json a = json::parse(*text, nullptr, false);
  if (!a.is_object() || !a.contains("updated_at") || !a["updated_at"].is_number()) return nullptr;
  if (unix_now() - a["updated_at"].get<double>() > 30.0) return nullptr;
  return a;
}

json RunReader::state_locked() const {
  const json config = meta_json("config");
  const std::optional<std::int64_t> total = config.is_object() && config.contains("num_generations")
                                                ? std::optional(config["num_generations"].get<std::int64_t>())
                                                : std::nullopt;
  std::set<std::int64_t> generations;
  std::vector<double> child_times;
  for (const auto& n : nodes_)
    if (is_child(n) && n.generation >= 1) {
      generations.insert(n.generation);
      child_times.push_back(n.created_at);
    }
  const auto done = static_cast<std::int64_t>(generations.size());
  const bool running = lock_held(dir_ / "braid.lock");
  const bool goal_met = meta_json("target_reached").is_object();
  std::string state = "unknown";
  if (running) state = "running";
  else if (goal_met || (total && done >= *total)) state = "done";
  else if (total) state = "interrupted";
  json eta = nullptr;
  // ETA from the pace of the latest generations (a resumed run's pause does not count).
  if (running && total && *total > done && !child_times.empty()) {
    std::sort(child_times.begin(), child_times.end());
    const std::size_t k = std::min<std::size_t>(20, child_times.size());
    const double per = (unix_now() - child_times[child_times.size() - k]) / double(k);
    eta = per * double(*total - done);
  }
  std::string why;
  if (state == "running") why = "braid holds braid.lock";
  else if (state == "done") why = goal_met ? "the goal (stop_when) was met" : "every generation is recorded";
  else if (state == "interrupted") why = "stopped before its last generation: continue with `braid resume`";
  else why = "the run records no configuration (num_generations)";
  return {{"state", state},
          {"why", why},
          {"generations_done", done},
          {"generations_total", total ? json(*total) : json(nullptr)},
          {"eta_s", eta},
          {"goal_met", goal_met},
          {"activity", running ? live_activity() : json(nullptr)}};
}

json RunReader::workload() {
  std::lock_guard lock(mutex_);
  json out = {{"workload_dir", nullptr}, {"workload", nullptr}, {"seed_hash", nullptr}};
  if (auto text = db_->meta("workload_dir")) {
    const std::filesystem::path dir = *text;
    out["workload_dir"] = dir.string();
    out["workload"] = dir.filename().empty() ? dir.parent_path().filename().string() : dir.filename().string();
  }
  // The seed's text: two runs of one folder whose seed differs do not measure the same thing.
  if (auto seed = db_->first_seed_code()) out["seed_hash"] = hash_hex(*seed);
  return out;
}

json RunReader::export_json() {
  std::lock_guard lock(mutex_);
  refresh_locked();
  return export_locked();
}

json RunReader::export_locked() const {
  const auto trust = trust_by_id(*db_, meta_json("rebench"));
  json items = json::array();
  for (const auto& n : nodes_) {
    json j = node_json(n);
    add_columns(j, n);
    auto it = trust.find(n.id);
    add_trust(j, it == trust.end() ? nullptr : &it->second);
    items.push_back(std::move(j));
  }
  const json names = column_names(nodes_);
  return {{"run", name()}, {"knobs", names["knobs"]}, {"metrics", names["metrics"]}, {"items", items}};
}

std::string RunReader::export_csv() {
  json all = export_json();
  const std::vector<std::string> fixed = {"id",      "parent",         "generation", "island",   "patch_type", "model",
                                          "failure", "correct",        "score",      "median",   "spread",     "reruns",
                                          "refuted", "rebench_median", "created_at", "cost_usd", "in_archive"};
  std::string out;
  auto row_end = [&out] { out.back() = '\n'; };
  for (const auto& h : fixed) out += h + ",";
  for (const auto& k : all.at("knobs")) out += csv_text_cell("knob:" + k.get<std::string>()) + ",";
  for (const auto& m : all["metrics"]) out += csv_text_cell("metric:" + m.get<std::string>()) + ",";
  row_end();
  auto cell = [](const json& v) -> std::string {
    if (v.is_null()) return "";
    if (v.is_string()) return csv_text_cell(v.get<std::string>());
    if (v.is_boolean()) return v.get<bool>() ? "1" : "0";
    if (v.is_number_float()) return fmt::format("{}", v.get<double>());
    if (v.is_array()) return csv_text_cell(v.dump());
    return v.dump();
  };
  for (const auto& item : all["items"]) {
    for (const auto& h : fixed)
      out += (h == "reruns" ? std::to_string(item.at("reruns").size()) : cell(item.value(h, json(nullptr)))) + ",";
    for (const auto& k : all["knobs"]) out += cell(item.at("knobs").value(k.get<std::string>(), json(nullptr))) + ",";
    for (const auto& m : all["metrics"])
      out += cell(item.at("metrics").value(m.get<std::string>(), json(nullptr))) + ",";
    row_end();
  }
  return out;
}

}  // namespace braid::report
