#include "braid/report/run_reader.hpp"

#include "braid/db/database.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <regex>
#include <set>

#include "braid/program/origin.hpp"
#include "braid/program/patch.hpp"
#include "braid/program/program.hpp"
#include "braid/report/candidate_columns.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"

namespace braid::report {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Cascade level a candidate reached, from its failure kind: L1 build, L2 run + verify, L3 bench.
int level_reached(std::string_view failure) {
  if (failure == "rejected") return 0;
  if (failure == "build_failed") return 1;
  if (failure == "run_failed" || failure == "timeout" || failure == "verify_failed") return 2;
  return 3;
}

// The last `cap` bytes of a log, cut at a line start, so the end of a long log (where errors
// are) is what is shown.
std::string log_tail(const std::string& text, std::size_t cap) {
  if (text.size() <= cap) return text;
  std::size_t start = text.size() - cap;
  std::size_t nl = text.find('\n', start);
  if (nl != std::string::npos && nl + 1 < text.size()) start = nl + 1;
  return "[... " + std::to_string(start) + " bytes before ...]\n" + text.substr(start);
}

bool looks_binary(const std::string& text) {
  std::size_t probe = std::min<std::size_t>(text.size(), 4096);
  return std::memchr(text.data(), '\0', probe) != nullptr;
}

}  // namespace

RunReader::RunReader(const std::filesystem::path& results_dir) : dir_(results_dir) {
  db_path_ = dir_ / "evolution.db";
  if (!std::filesystem::is_directory(dir_))
    throw UserError(dir_.string(), "not a folder (expected a results folder of `braid evolve`)");
  if (!std::filesystem::exists(db_path_)) throw UserError(db_path_.string(), "no such database (has the run started?)");
  // Read-only: the UI never writes a run's database, even by accident.
  // In a read-only folder (where -wal/-shm cannot be created) it reads the file as immutable.
  db_ = std::make_unique<ProgramDatabase>(db_path_, DbAccess::LiveReadOnly);
  std::lock_guard lock(mutex_);
  refresh_locked();
}

RunReader::~RunReader() = default;

std::string RunReader::name() const {
  auto abs = std::filesystem::absolute(dir_).lexically_normal();
  std::string n = abs.filename().string();
  if (n.empty()) n = abs.parent_path().filename().string();
  return n;
}

bool RunReader::refresh() {
  std::lock_guard lock(mutex_);
  return refresh_locked();
}

bool RunReader::refresh_locked() {
  // data_version changes whenever another connection commits; reading it costs no I/O.
  std::int64_t v = db_->data_version();
  bool changed = v != data_version_;
  data_version_ = v;
  std::size_t before = nodes_.size();
  if (changed) {
    read_new_rows();
    archive_dirty_ = true;
  }
  // Archive membership changes on old rows too and has no index; the scan is throttled to a
  // small fraction of wall time so 100k-candidate runs stay responsive while live.
  if (archive_dirty_ && now_seconds() >= archive_checked_at_) refresh_archive_flags();
  bool grew = nodes_.size() != before;
  if (changed) ++changes_;
  return grew;
}

void RunReader::read_new_rows() {
  for (auto& row : db_->candidates_after(last_rowid_)) {
    CandidateNode n{std::move(row)};
    last_rowid_ = std::max(last_rowid_, n.rowid);
    auto index = static_cast<std::uint32_t>(nodes_.size());
    if (!n.parent_id.empty()) {
      if (auto p = index_of(n.parent_id)) {
        n.parent_index = static_cast<std::int32_t>(*p);
        nodes_[*p].children.push_back(index);
      } else {
        orphans_[n.parent_id].push_back(index);
      }
    }
    by_id_.emplace(n.id, index);
    if (auto it = orphans_.find(n.id); it != orphans_.end()) {
      for (auto child : it->second) {
        nodes_[child].parent_index = static_cast<std::int32_t>(index);
        n.children.push_back(child);
      }
      orphans_.erase(it);
    }
    nodes_.push_back(std::move(n));
  }
}

void RunReader::refresh_archive_flags() {
  double started = now_seconds();
  std::vector<bool> member(nodes_.size(), false);
  for (const auto& id : db_->archive_ids())
    if (auto i = index_of(id)) member[*i] = true;
  for (std::size_t i = 0; i < nodes_.size(); ++i) nodes_[i].in_archive = member[i];
  double took = now_seconds() - started;
  archive_checked_at_ = now_seconds() + 20.0 * took;
  archive_dirty_ = false;
}

std::optional<std::uint32_t> RunReader::index_of(const std::string& id) const {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return std::nullopt;
  return it->second;
}

json RunReader::meta_json(const char* key) const {
  auto text = db_->meta(key);
  if (!text) return nullptr;
  json v = json::parse(*text, nullptr, false);
  return v.is_discarded() ? json(nullptr) : v;
}

// Best = the best the search confirmed by re-runs (meta "best", search/confirmation.hpp); in a
// run without it, the highest score among correct candidates (ties: the earliest).
std::optional<std::uint32_t> RunReader::best_index() const {
  const json confirmed = meta_json("best");
  if (confirmed.is_object())
    if (auto i = index_of(confirmed.value("id", std::string()))) return i;
  std::optional<std::uint32_t> best;
  for (std::uint32_t i = 0; i < nodes_.size(); ++i) {
    const auto& n = nodes_[i];
    if (!n.correct) continue;
    if (!best || n.score > nodes_[*best].score) best = i;
  }
  return best;
}

// The best's node with its trusted figure: `score` is the median of its re-runs when confirmed,
// `first_measurement` its evaluation's own score, `runs` how many measurements stand behind it.
json RunReader::best_json() const {
  auto b = best_index();
  if (!b) return nullptr;
  json j = node_json(nodes_[*b]);
  j["first_measurement"] = nodes_[*b].score;
  j["confirmed"] = false;
  j["runs"] = 1;
  j["spread"] = nullptr;
  const json confirmed = meta_json("best");
  if (confirmed.is_object() && confirmed.value("id", std::string()) == nodes_[*b].id) {
    j["score"] = confirmed.value("score", nodes_[*b].score);
    j["confirmed"] = confirmed.value("confirmed", false);
    j["runs"] = confirmed.value("runs", 1);
    j["spread"] = confirmed.value("spread", 0.0);
  }
  return j;
}

json RunReader::node_json(const CandidateNode& n) const {
  json j = {{"id", n.id},
            {"parent", n.parent_id},
            {"generation", n.generation},
            {"island", n.island},
            {"score", n.score},
            {"correct", n.correct},
            {"failure", n.failure},
            {"patch_type", n.patch_type},
            {"model", n.model},
            {"created_at", n.created_at},
            {"cost_usd", n.cost_usd},
            {"in_archive", n.in_archive},
            {"archive_cell", n.archive_cell},
            {"children", n.children.size()}};
  j["ratio_to_bound"] = n.ratio_to_bound ? json(*n.ratio_to_bound) : json(nullptr);
  return j;
}

std::int64_t RunReader::count() {
  std::lock_guard lock(mutex_);
  refresh_locked();
  return static_cast<std::int64_t>(nodes_.size());
}

json RunReader::status() {
  std::lock_guard lock(mutex_);
  refresh_locked();
  std::int64_t max_gen = -1;
  double last_at = 0.0;
  for (const auto& n : nodes_) {
    max_gen = std::max(max_gen, n.generation);
    last_at = std::max(last_at, n.created_at);
  }
  json best = best_json();
  return {{"name", name()},     {"count", nodes_.size()}, {"changes", changes_},    {"max_generation", max_gen},
          {"last_at", last_at}, {"best", best},           {"state", state_locked()}};
}

json RunReader::overview() {
  std::lock_guard lock(mutex_);
  refresh_locked();
  std::map<std::string, std::int64_t> failures;
  std::map<std::string, std::int64_t> models;
  std::map<std::string, std::int64_t> patch_types;
  double candidate_cost = 0.0;
  double first_at = 0.0, last_at = 0.0;
  std::int64_t max_gen = -1;
  bool any_ratio = false;
  for (const auto& n : nodes_) {
    ++failures[n.failure];
    if (!n.model.empty()) ++models[n.model];
    if (!n.patch_type.empty()) ++patch_types[n.patch_type];
    candidate_cost += n.cost_usd;
    if (first_at == 0.0 || n.created_at < first_at) first_at = n.created_at;
    last_at = std::max(last_at, n.created_at);
    max_gen = std::max(max_gen, n.generation);
    any_ratio = any_ratio || n.ratio_to_bound.has_value();
  }
  json j;
  j["name"] = name();
  j["path"] = std::filesystem::absolute(dir_).lexically_normal().string();
  j["count"] = nodes_.size();
  j["max_generation"] = max_gen;
  j["failures"] = failures;
  j["models"] = models;
  j["patch_types"] = patch_types;
  j["started_at"] = first_at;
  j["last_at"] = last_at;
  j["elapsed_s"] = last_at - first_at;
  j["has_ratio_to_bound"] = any_ratio;
  j["best"] = best_json();
  j["noise"] = meta_json("noise");  // the seed re-timed: {id, samples, median, spread}
  if (auto seed_text = db_->meta("run_seed")) j["run_seed"] = *seed_text;
  // `braid run`: the fast path's summary (rules, what was left, LLM rewrite, gate, annotation).
  j["conversion"] = meta_json("conversion");

  // stop_when: the candidate that met the run's goal (with its re-runs) and those whose re-runs
  // disagreed (meta target_reached / target_refuted, search/runner.cpp).
  j["goal"] = nullptr;
  {
    json goal = {{"reached", nullptr}, {"refuted", json::array()}};
    bool any = false;
    for (const char* key : {"target_reached", "target_refuted"}) {
      auto text = db_->meta(key);
      if (!text) continue;
      json v = json::parse(*text, nullptr, false);
      if (v.is_discarded()) continue;
      any = true;
      if (std::string_view(key) == "target_reached") goal["reached"] = v;
      else if (v.is_object())
        for (auto& [code_hash, item] : v.items()) goal["refuted"].push_back(item);
    }
    if (any) j["goal"] = goal;
  }

  // LLM cost: the cost ledger's table when the run used one, else the per-candidate costs.
  json cost = {{"candidates_usd", candidate_cost}, {"llm_calls", nullptr}, {"llm_calls_usd", nullptr}};
  {
    if (auto calls = db_->llm_call_cost()) {
      cost["llm_calls"] = calls->calls;
      if (calls->cost_usd) cost["llm_calls_usd"] = *calls->cost_usd;
    }
  }
  j["cost"] = cost;
  std::map<int, json> islands;
  for (const auto& n : nodes_) {
    auto& isl = islands[n.island];
    if (isl.is_null())
      isl = {{"island", n.island}, {"count", 0}, {"ok", 0}, {"best_score", nullptr}, {"best_id", nullptr}};
    isl["count"] = isl["count"].get<std::int64_t>() + 1;
    if (n.failure == "ok") isl["ok"] = isl["ok"].get<std::int64_t>() + 1;
    if (n.correct && (isl["best_score"].is_null() || n.score > isl["best_score"].get<double>())) {
      isl["best_score"] = n.score;
      isl["best_id"] = n.id;
    }
  }
  j["islands"] = json::array();
  for (auto& [k, v] : islands) j["islands"].push_back(v);
  return j;
}

json RunReader::candidates(const CandidatePageQuery& q) {
  std::lock_guard lock(mutex_);
  refresh_locked();
  std::vector<std::uint32_t> picked;
  picked.reserve(nodes_.size());
  for (std::uint32_t i = 0; i < nodes_.size(); ++i) {
    const auto& n = nodes_[i];
    if (q.island && n.island != *q.island) continue;
    if (q.failure && n.failure != *q.failure) continue;
    picked.push_back(i);
  }
  auto by = [&](std::uint32_t a, std::uint32_t b) {
    const auto& x = nodes_[a];
    const auto& y = nodes_[b];
    if (q.order == "generation") return x.generation != y.generation ? x.generation > y.generation : a > b;
    if (q.order == "generation_asc") return x.generation != y.generation ? x.generation < y.generation : a < b;
    if (q.order.find(':') != std::string::npos) return column_before(x, y, q.order, q.ascending, a < b);
    if (x.correct != y.correct) return x.correct;
    return x.score != y.score ? x.score > y.score : a < b;
  };
  int limit = std::clamp(q.limit, 1, 500);
  std::size_t offset = static_cast<std::size_t>(std::max(0, q.offset));
  std::size_t end = std::min(picked.size(), offset + static_cast<std::size_t>(limit));
  json items = json::array();
  if (offset < picked.size()) {
    // Only the requested page is ordered: partial_sort keeps 100k-row listings cheap.
    std::partial_sort(picked.begin(), picked.begin() + static_cast<std::ptrdiff_t>(end), picked.end(), by);
    for (std::size_t k = offset; k < end; ++k) {
      json item = node_json(nodes_[picked[k]]);
      add_columns(item, nodes_[picked[k]]);
      items.push_back(std::move(item));
    }
    add_trust_fields(items);
  }
  return {{"total", picked.size()}, {"offset", offset}, {"limit", limit},
          {"order", q.order},       {"items", items},   {"columns", column_names(nodes_)}};
}

std::optional<json> RunReader::candidate(const std::string& id) {
  std::lock_guard lock(mutex_);
  refresh_locked();
  // A unique prefix stands for the id (tables and the UI show short ids).
  std::string full = id;
  if (!index_of(id)) {
    std::optional<std::uint32_t> only;
    for (std::uint32_t i = 0; i < nodes_.size(); ++i)
      if (nodes_[i].id.compare(0, id.size(), id) == 0) {
        if (only) return std::nullopt;  // ambiguous
        only = i;
      }
    if (!only || id.empty()) return std::nullopt;
    full = nodes_[*only].id;
  }
  auto stored = db_->program_columns(full);
  if (!stored) return std::nullopt;
  const json& rec = *stored;
  json j;
  j["record"] = rec;
  std::string failure = rec.value("failure_kind", std::string("ok"));
  int reached = level_reached(failure);
  j["cascade"] = {{"level_reached", reached},
                  {"failed", failure != "ok"},
                  {"failure", failure},
                  {"levels", json::array({"build", "run+verify", "bench"})},
                  {"timings", rec.value("timings", json::object())}};

  std::string parent_id = rec.value("parent_id", std::string());
  j["parent"] = nullptr;
  j["diff"] = nullptr;
  if (!parent_id.empty()) {
    if (auto parent = db_->program_code(parent_id)) {
      j["parent"] = {{"id", parent_id}, {"score", parent->combined_score}, {"generation", parent->generation}};
      j["diff"] = unified_diff(parent->code, rec.value("code", std::string()));
    }
  }
  // Children, best first, capped: the tree view pages through the rest.
  j["children"] = json::array();
  if (auto i = index_of(full)) {
    auto kids = nodes_[*i].children;
    std::sort(kids.begin(), kids.end(), [&](auto a, auto b) { return nodes_[a].score > nodes_[b].score; });
    for (std::size_t k = 0; k < kids.size() && k < 50; ++k) j["children"].push_back(node_json(nodes_[kids[k]]));
    j["children_total"] = nodes_[*i].children.size();
    j["node"] = node_json(nodes_[*i]);
  }
  // Build and run logs the evaluation left in its work folder (gen_N/), newest text only.
  j["logs"] = json::array();
  // Work folders are gen_N/ (seeds: gen_0_island_I/) with logs/ and results/ inside.
  auto generation = rec.value("generation", std::int64_t{-1});
  std::filesystem::path work = origin_from(rec.value("patch_type", std::string())) == Origin::Seed
                                   ? dir_ / ("gen_0_island_" + std::to_string(rec.value("island_idx", 0)))
                                   : dir_ / ("gen_" + std::to_string(generation));
  std::vector<std::filesystem::path> folders = {work / "logs", work / "results", work};
  std::error_code ec;
  for (const auto& folder : folders) {
    if (!std::filesystem::is_directory(folder, ec)) continue;
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(folder, ec)) {
      if (!e.is_regular_file(ec)) continue;
      auto ext = e.path().extension().string();
      if (ext == ".log" || ext == ".txt" || ext == ".json" || ext == ".out" || ext == ".err") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      if (j["logs"].size() >= 12) break;
      auto text = try_read_file(f);
      if (!text || looks_binary(*text)) continue;
      j["logs"].push_back({{"name", std::filesystem::relative(f, dir_, ec).string()},
                           {"bytes", text->size()},
                           {"text", log_tail(*text, 64 * 1024)}});
    }
  }
  return j;
}

json RunReader::islands() {
  std::lock_guard lock(mutex_);
  refresh_locked();
  std::map<int, json> by_island;
  for (const auto& n : nodes_) {
    auto& isl = by_island[n.island];
    if (isl.is_null())
      isl = {{"island", n.island}, {"count", 0},          {"correct", 0},
             {"archive", 0},       {"migrants", 0},       {"best_score", nullptr},
             {"best_id", nullptr}, {"max_generation", 0}, {"failures", json::object()}};
    isl["count"] = isl["count"].get<std::int64_t>() + 1;
    if (n.correct) isl["correct"] = isl["correct"].get<std::int64_t>() + 1;
    if (n.in_archive) isl["archive"] = isl["archive"].get<std::int64_t>() + 1;
    if (origin_from(n.patch_type) == Origin::Migrant) isl["migrants"] = isl["migrants"].get<std::int64_t>() + 1;
    isl["max_generation"] = std::max(isl["max_generation"].get<std::int64_t>(), n.generation);
    auto& f = isl["failures"][n.failure];
    f = f.is_null() ? 1 : f.get<std::int64_t>() + 1;
    if (n.correct && (isl["best_score"].is_null() || n.score > isl["best_score"].get<double>())) {
      isl["best_score"] = n.score;
      isl["best_id"] = n.id;
    }
  }
  json out = json::array();
  for (auto& [k, v] : by_island) out.push_back(v);
  return {{"islands", out}};
}

json RunReader::archive(int offset, int limit) {
  std::lock_guard lock(mutex_);
  refresh_locked();
  std::vector<std::uint32_t> members;
  for (std::uint32_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].in_archive) members.push_back(i);
  std::sort(members.begin(), members.end(), [&](auto a, auto b) { return nodes_[a].score > nodes_[b].score; });
  std::set<std::string> cells;
  for (auto m : members) cells.insert(nodes_[m].archive_cell);
  json items = json::array();
  std::size_t start = static_cast<std::size_t>(std::max(0, offset));
  std::size_t end = std::min(members.size(), start + static_cast<std::size_t>(std::clamp(limit, 1, 500)));
  for (std::size_t k = start; k < end; ++k) items.push_back(node_json(nodes_[members[k]]));
  return {{"total", members.size()}, {"cells", cells.size()}, {"offset", start}, {"items", items}};
}

json RunReader::meta() {
  // Files written by the meta-summarizer every meta_rec_interval generations.
  static const std::regex meta_name(R"(meta_(\d+)\.txt)");
  std::vector<std::pair<long, std::filesystem::path>> found;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir_, ec)) {
    std::smatch m;
    std::string fname = e.path().filename().string();
    if (std::regex_match(fname, m, meta_name)) found.emplace_back(std::stol(m[1].str()), e.path());
  }
  std::sort(found.begin(), found.end(), [](auto& a, auto& b) { return a.first > b.first; });
  json recs = json::array();
  for (std::size_t i = 0; i < found.size() && i < 100; ++i) {
    auto text = try_read_file(found[i].second);
    struct stat st {};
    double written_at = ::stat(found[i].second.c_str(), &st) == 0 ? static_cast<double>(st.st_mtime) : 0.0;
    recs.push_back(
        {{"n", found[i].first}, {"written_at", written_at}, {"text", text ? log_tail(*text, 64 * 1024) : ""}});
  }
  json memory = nullptr;
  if (auto text = try_read_file(dir_ / "meta_memory.json")) {
    json parsed = json::parse(*text, nullptr, false);
    memory = parsed.is_discarded() ? json(*text) : parsed;
  }
  return {{"total", found.size()}, {"recommendations", recs}, {"memory", memory}};
}

json RunReader::best_knobs() {
  std::lock_guard lock(mutex_);
  refresh_locked();
  json out = {{"best", nullptr}, {"knobs", json::array()}};
  auto b = best_index();
  if (!b) return out;
  out["best"] = node_json(nodes_[*b]);
  auto code = db_->program_code(nodes_[*b].id);
  if (!code) return out;
  Program program = Program::parse(code->code, nodes_[*b].id);
  if (!program.ok()) {
    out["error"] = program.error()->message;
    return out;
  }
  for (const auto& k : program.knobs())
    out["knobs"].push_back({{"name", k.name}, {"value", k.value}, {"domain", k.domain}});
  return out;
}

std::vector<Curve> RunReader::curves(CurveAxis axis, CurveValue value, bool per_island) {
  std::lock_guard lock(mutex_);
  refresh_locked();
  return curves_locked(axis, value, per_island);
}

std::vector<Curve> RunReader::curves_locked(CurveAxis axis, CurveValue value, bool per_island) const {
  std::vector<Curve> out;
  if (nodes_.empty()) return out;
  double t0 = nodes_.front().created_at;
  for (const auto& n : nodes_) t0 = std::min(t0, n.created_at);
  std::map<int, std::size_t> slot;  // island -> curve index (after "all")
  out.push_back({"all", {}, 0.0});
  std::vector<std::optional<double>> best_score(1);
  auto x_of = [&](std::size_t i, const CandidateNode& n) {
    return axis == CurveAxis::Evaluations ? static_cast<double>(i + 1) : n.created_at - t0;
  };
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const auto& n = nodes_[i];
    double x = x_of(i, n);
    std::vector<std::size_t> targets = {0};
    if (per_island) {
      auto [it, inserted] = slot.emplace(n.island, out.size());
      if (inserted) {
        out.push_back({"island " + std::to_string(n.island), {}, 0.0});
        best_score.emplace_back();
      }
      targets.push_back(it->second);
    }
    for (auto t : targets) {
      out[t].x_end = std::max(out[t].x_end, x);
      if (!n.correct) continue;
      if (best_score[t] && n.score <= *best_score[t]) continue;
      best_score[t] = n.score;
      if (value == CurveValue::BestScore) {
        out[t].points.push_back({x, n.score, n.id});
      } else if (n.ratio_to_bound) {
        out[t].points.push_back({x, *n.ratio_to_bound, n.id});
      }
    }
  }
  // Every curve runs to the end of the run (the best holds until now).
  double x_end = 0;
  for (const auto& c : out) x_end = std::max(x_end, c.x_end);
  for (auto& c : out) c.x_end = x_end;
  return out;
}

std::vector<CandidateNode> RunReader::top_candidates(int limit) {
  std::lock_guard lock(mutex_);
  refresh_locked();
  std::vector<std::uint32_t> idx;
  for (std::uint32_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].correct) idx.push_back(i);
  std::size_t n = std::min(idx.size(), static_cast<std::size_t>(std::max(0, limit)));
  std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(n), idx.end(), [&](auto a, auto b) {
    return nodes_[a].score != nodes_[b].score ? nodes_[a].score > nodes_[b].score : a < b;
  });
  std::vector<CandidateNode> out;
  for (std::size_t k = 0; k < n; ++k) out.push_back(nodes_[idx[k]]);
  return out;
}

}  // namespace braid::report
