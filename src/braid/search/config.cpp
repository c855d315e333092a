#include "braid/search/config.hpp"

#include <yaml-cpp/yaml.h>

#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <set>

#include "braid/program/patch.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"

namespace braid {
namespace {

std::mutex& extra_mutex() {
  static std::mutex m;
  return m;
}
std::set<std::string>& extra_keys() {
  static std::set<std::string> keys;
  return keys;
}

json yaml_to_json(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
    case YAML::NodeType::Scalar: {
      const std::string& s = n.Scalar();
      if (n.Tag() == "!") return s;  // quoted scalar stays a string
      if (s == "true" || s == "True" || s == "yes") return true;
      if (s == "false" || s == "False" || s == "no") return false;
      if (s == "null" || s == "~") return nullptr;
      try {
        size_t pos = 0;
        long long v = std::stoll(s, &pos);
        if (pos == s.size()) return v;
      } catch (...) {
      }
      // Seeds above 2^63 - 1 (half of all drawn seeds) are integers too, not doubles.
      if (!s.empty() && s[0] != '-') try {
          size_t pos = 0;
          unsigned long long v = std::stoull(s, &pos);
          if (pos == s.size()) return v;
        } catch (...) {
        }
      try {
        size_t pos = 0;
        double v = std::stod(s, &pos);
        if (pos == s.size()) return v;
      } catch (...) {
      }
      return s;
    }
    case YAML::NodeType::Sequence: {
      json a = json::array();
      for (const auto& item : n) a.push_back(yaml_to_json(item));
      return a;
    }
    case YAML::NodeType::Map: {
      json o = json::object();
      for (const auto& kv : n) o[kv.first.as<std::string>()] = yaml_to_json(kv.second);
      return o;
    }
  }
  return nullptr;
}

struct Ctx {
  const std::string& origin;
  const std::string& key;
  [[noreturn]] void fail(const std::string& what) const {
    throw UserError(origin, fmt::format("config key '{}': {}", key, what));
  }
};

std::int64_t as_int(const json& v, const Ctx& c) {
  if (!v.is_number_integer()) c.fail("expected an integer, got " + v.dump());
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > std::uint64_t(std::numeric_limits<std::int64_t>::max()))
    c.fail("too large (" + v.dump() + ")");
  return v.get<std::int64_t>();
}
double as_double(const json& v, const Ctx& c) {
  if (!v.is_number()) c.fail("expected a number, got " + v.dump());
  double d = v.get<double>();
  if (!std::isfinite(d)) c.fail("expected a finite number, got " + v.dump());
  return d;
}

// Every integer key of the search with its range, in one place: the YAML/JSON setters, the
// stored config of a resumed run and the command line (-g, -j) are all checked against it, so
// no value can wrap when narrowed to int or make the run allocate without bound.
struct IntKey {
  std::int64_t lo, hi;
  std::int64_t (*get)(const SearchConfig&);
  void (*set)(SearchConfig&, std::int64_t);
};

#define BRAID_INT_KEY(name, lo, hi)                                                          \
  {                                                                                          \
    #name, IntKey {                                                                          \
      lo, hi, [](const SearchConfig& s) { return std::int64_t(s.name); },                    \
          [](SearchConfig& s, std::int64_t v) { s.name = static_cast<decltype(s.name)>(v); } \
    }                                                                                        \
  }

const std::map<std::string, IntKey>& int_keys() {
  static const std::map<std::string, IntKey> table = {
      BRAID_INT_KEY(num_generations, 0, kMaxGenerations),
      BRAID_INT_KEY(max_parallel_jobs, 1, 1024),
      BRAID_INT_KEY(max_parallel_proposals, 1, 1024),
      BRAID_INT_KEY(proposal_lag, 0, 1 << 20),  // 0: derived
      BRAID_INT_KEY(num_islands, 1, 256),
      BRAID_INT_KEY(num_beams, 1, 1000),
      BRAID_INT_KEY(archive_size, 1, 100000),
      BRAID_INT_KEY(num_archive_inspirations, 0, 50),
      BRAID_INT_KEY(num_top_k_inspirations, 0, 50),
      BRAID_INT_KEY(num_failed_neighbours, 0, 50),
      BRAID_INT_KEY(migration_interval, 0, kMaxGenerations),
      BRAID_INT_KEY(max_novelty_attempts, 1, 100),
      BRAID_INT_KEY(max_patch_attempts, 1, 100),
      BRAID_INT_KEY(embedding_dims, 16, 8192),
      BRAID_INT_KEY(meta_rec_interval, 0, kMaxGenerations),
      BRAID_INT_KEY(confirm_runs, 0, 20),  // 0: no confirmation
      BRAID_INT_KEY(noise_runs, 0, 20),    // 0: no noise measurement
  };
  return table;
}
#undef BRAID_INT_KEY

// The whole uint64 range: a drawn seed is >= 2^63 half of the time.
std::uint64_t as_seed(const json& v, const Ctx& c) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0) return std::uint64_t(v.get<std::int64_t>());
  c.fail("must be an integer between 0 and 18446744073709551615, got " + v.dump());
}

// An island number of migration_graph; the edge check against num_islands comes in validate().
int island_index(const json& v, const Ctx& c) {
  std::int64_t i = as_int(v, c);
  if (i < 0 || i > int_keys().at("num_islands").hi) c.fail("island index out of range: " + std::to_string(i));
  return int(i);
}

std::string range_text(const IntKey& k) { return fmt::format("must be an integer between {} and {}", k.lo, k.hi); }
bool as_bool(const json& v, const Ctx& c) {
  if (!v.is_boolean()) c.fail("expected true or false, got " + v.dump());
  return v.get<bool>();
}
std::string as_string(const json& v, const Ctx& c) {
  if (!v.is_string()) c.fail("expected a string, got " + v.dump());
  return v.get<std::string>();
}
std::vector<std::string> as_strings(const json& v, const Ctx& c) {
  if (!v.is_array()) c.fail("expected a list of strings, got " + v.dump());
  std::vector<std::string> out;
  for (const auto& e : v) out.push_back(as_string(e, c));
  return out;
}
std::array<double, 3> as_triple(const json& v, const Ctx& c) {
  if (!v.is_array() || v.size() != 3) c.fail("expected [full, diff, cross] (3 numbers), got " + v.dump());
  return {as_double(v[0], c), as_double(v[1], c), as_double(v[2], c)};
}

using Setter = std::function<void(SearchConfig&, const json&, const Ctx&)>;

const std::map<std::string, Setter>& setters() {
  static const std::map<std::string, Setter> table = {
      {"parent_selection_strategy", [](auto& s, auto& v, auto& c) { s.parent_selection_strategy = as_string(v, c); }},
      {"exploitation_alpha", [](auto& s, auto& v, auto& c) { s.exploitation_alpha = as_double(v, c); }},
      {"parent_selection_lambda", [](auto& s, auto& v, auto& c) { s.parent_selection_lambda = as_double(v, c); }},
      {"elite_selection_ratio", [](auto& s, auto& v, auto& c) { s.elite_selection_ratio = as_double(v, c); }},
      {"migration_rate", [](auto& s, auto& v, auto& c) { s.migration_rate = as_double(v, c); }},
      {"migration_strategy", [](auto& s, auto& v, auto& c) { s.migration_strategy = as_string(v, c); }},
      {"migration_graph",
       [](auto& s, auto& v, auto& c) {
         // [[0, 2], [1, 2]] or {"0": [2], "1": [2]}
         s.migration_graph.clear();
         if (v.is_array()) {
           for (const auto& e : v) {
             if (!e.is_array() || e.size() != 2) c.fail("expected a list of [from, to] pairs");
             s.migration_graph.emplace_back(island_index(e[0], c), island_index(e[1], c));
           }
         } else if (v.is_object()) {
           for (auto it = v.begin(); it != v.end(); ++it) {
             int from = 0;
             try {
               from = island_index(json(std::stoll(it.key())), c);
             } catch (const UserError&) {
               throw;
             } catch (...) {
               c.fail("island index expected, got '" + it.key() + "'");
             }
             for (const auto& to : it.value()) s.migration_graph.emplace_back(from, island_index(to, c));
           }
         } else {
           c.fail("expected [[from, to], ...] or {from: [to, ...]}");
         }
       }},
      {"explore_fraction", [](auto& s, auto& v, auto& c) { s.explore_fraction = as_double(v, c); }},
      {"explore_patch_type_probs", [](auto& s, auto& v, auto& c) { s.explore.patch_type_probs = as_triple(v, c); }},
      {"explore_temperatures", [](auto& s, auto& v, auto& c) { s.explore.temperatures = as_triple(v, c); }},
      {"exploit_patch_type_probs", [](auto& s, auto& v, auto& c) { s.exploit.patch_type_probs = as_triple(v, c); }},
      {"exploit_temperatures", [](auto& s, auto& v, auto& c) { s.exploit.temperatures = as_triple(v, c); }},
      {"patch_types", [](auto& s, auto& v, auto& c) { s.patch_types = as_strings(v, c); }},
      {"code_embed_sim_threshold", [](auto& s, auto& v, auto& c) { s.code_embed_sim_threshold = as_double(v, c); }},
      {"use_text_feedback", [](auto& s, auto& v, auto& c) { s.use_text_feedback = as_bool(v, c); }},
      {"init_program_paths_per_island",
       [](auto& s, auto& v, auto& c) { s.init_program_paths_per_island = as_strings(v, c); }},
      {"task_sys_msg_per_island", [](auto& s, auto& v, auto& c) { s.task_sys_msg_per_island = as_strings(v, c); }},
      {"island_api_types", [](auto& s, auto& v, auto& c) { s.island_api_types = as_strings(v, c); }},
      {"seed", [](auto& s, auto& v, auto& c) { s.seed = as_seed(v, c); }},
      {"stop_when",
       [](auto& s, auto& v, auto& c) {
         if (v.is_null()) {
           s.stop_when = StopWhen{};
           return;
         }
         if (!v.is_object()) c.fail("expected {metric: NAME, at_most: X} or {metric: NAME, at_least: X}, got " + v.dump());
         StopWhen w;
         for (auto it = v.begin(); it != v.end(); ++it) {
           if (it.key() == "metric") w.metric = as_string(it.value(), c);
           else if (it.key() == "at_most") w.at_most = as_double(it.value(), c);
           else if (it.key() == "at_least") w.at_least = as_double(it.value(), c);
           else if (it.key() == "confirm") {
             std::int64_t n = as_int(it.value(), c);
             if (n < 0 || n > 20) c.fail("confirm must be between 0 and 20 re-runs");
             w.confirm = int(n);
           } else c.fail("unknown field '" + it.key() + "' (metric, at_most, at_least, confirm)");
         }
         if (w.metric.empty()) c.fail("needs a metric name");
         if (w.at_most.has_value() == w.at_least.has_value()) c.fail("needs exactly one of at_most and at_least");
         s.stop_when = w;
       }},
  };
  return table;
}

}  // namespace

void check_int_config_value(const std::string& key, std::int64_t value, const std::string& origin) {
  auto k = int_keys().find(key);
  if (k == int_keys().end()) throw std::logic_error("no integer config key " + key);
  if (value < k->second.lo || value > k->second.hi)
    throw UserError(origin, range_text(k->second) + " (" + key + "), got " + std::to_string(value));
}

void register_extra_config_keys(const std::vector<std::string>& keys) {
  std::lock_guard lock(extra_mutex());
  extra_keys().insert(keys.begin(), keys.end());
}

SearchConfig search_config_from_json(const json& j, const std::string& origin, SearchConfig base) {
  if (j.is_null()) return base;
  if (!j.is_object()) throw UserError(origin, "expected a mapping of config keys");
  const auto& table = setters();
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    Ctx ctx{origin, key};
    if (auto k = int_keys().find(key); k != int_keys().end()) {
      std::int64_t v = as_int(it.value(), ctx);
      if (v < k->second.lo || v > k->second.hi) ctx.fail(range_text(k->second) + ", got " + std::to_string(v));
      k->second.set(base, v);
      continue;
    }
    if (auto s = table.find(key); s != table.end()) {
      s->second(base, it.value(), ctx);
      continue;
    }
    if (key == "llm" && it.value().is_object()) {  // stored form of a run's config
      for (auto l = it.value().begin(); l != it.value().end(); ++l) base.llm[l.key()] = l.value();
      continue;
    }
    bool extra = false;
    {
      std::lock_guard lock(extra_mutex());
      extra = extra_keys().count(key) > 0;
    }
    if (!extra) throw UserError(origin, fmt::format("unknown config key '{}'", key));
    base.llm[key] = it.value();
  }
  validate(base, origin);
  return base;
}

SearchConfig load_search_config(const std::filesystem::path& path, SearchConfig base) {
  auto text = try_read_file(path);
  if (!text) throw UserError(path.string(), "cannot read config file");
  json j;
  try {
    YAML::Node node = YAML::Load(*text);
    j = yaml_to_json(node);
  } catch (const YAML::Exception& e) {
    throw UserError(path.string(), fmt::format("line {}: {}", e.mark.line + 1, e.msg));
  }
  return search_config_from_json(j, path.string(), std::move(base));
}

void validate(const SearchConfig& c, const std::string& origin) {
  auto fail = [&](const std::string& key, const std::string& what) {
    throw UserError(origin, fmt::format("config key '{}': {}", key, what));
  };
  for (const auto& [key, k] : int_keys())
    if (k.get(c) < k.lo || k.get(c) > k.hi) fail(key, range_text(k) + ", got " + std::to_string(k.get(c)));
  static const std::set<std::string> strategies{"power_law", "weighted", "beam"};
  if (!strategies.count(c.parent_selection_strategy))
    fail("parent_selection_strategy", "must be power_law, weighted or beam, got '" + c.parent_selection_strategy + "'");
  if (!(c.exploitation_alpha >= 0 && c.exploitation_alpha <= 1e3)) fail("exploitation_alpha", "must be in [0, 1000]");
  if (!(c.parent_selection_lambda >= 0 && c.parent_selection_lambda <= 1e6))
    fail("parent_selection_lambda", "must be in [0, 1e6]");
  if (c.elite_selection_ratio < 0 || c.elite_selection_ratio > 1) fail("elite_selection_ratio", "must be in [0, 1]");
  if (c.migration_rate < 0 || c.migration_rate > 1) fail("migration_rate", "must be in [0, 1]");
  if (c.migration_strategy != "elitist" && c.migration_strategy != "directional")
    fail("migration_strategy", "must be elitist or directional");
  for (auto [from, to] : c.migration_graph)
    if (from < 0 || to < 0 || from >= c.num_islands || to >= c.num_islands || from == to)
      fail("migration_graph", fmt::format("edge {} -> {} is not between two of the {} islands", from, to, c.num_islands));
  if (c.migration_strategy == "directional" && c.migration_graph.empty())
    fail("migration_graph", "directional migration needs at least one edge");
  if (c.explore_fraction < 0 || c.explore_fraction > 1) fail("explore_fraction", "must be in [0, 1]");
  for (const auto* p : {&c.explore, &c.exploit}) {
    const char* name = p == &c.explore ? "explore" : "exploit";
    double sum = 0;
    for (double x : p->patch_type_probs) {
      if (x < 0) fail(std::string(name) + "_patch_type_probs", "probabilities must be >= 0");
      sum += x;
    }
    if (sum <= 0) fail(std::string(name) + "_patch_type_probs", "at least one probability must be > 0");
    for (double t : p->temperatures)
      if (t < 0 || t > 2) fail(std::string(name) + "_temperatures", "temperatures must be in [0, 2]");
  }
  if (c.patch_types.empty()) fail("patch_types", "needs at least one of full, diff, cross");
  for (const auto& t : c.patch_types)
    if (!patch_type_from(t)) fail("patch_types", "unknown patch type '" + t + "'");
  if (c.code_embed_sim_threshold <= 0 || c.code_embed_sim_threshold > 1)
    fail("code_embed_sim_threshold", "must be in (0, 1]");
  if (!c.init_program_paths_per_island.empty() && int(c.init_program_paths_per_island.size()) != c.num_islands)
    fail("init_program_paths_per_island", fmt::format("needs one path per island ({})", c.num_islands));
  if (!c.task_sys_msg_per_island.empty() && int(c.task_sys_msg_per_island.size()) != c.num_islands)
    fail("task_sys_msg_per_island", fmt::format("needs one message per island ({})", c.num_islands));
  if (!c.island_api_types.empty() && int(c.island_api_types.size()) != c.num_islands)
    fail("island_api_types", fmt::format("needs one API type per island ({})", c.num_islands));
}

json SearchConfig::to_json() const {
  json j;
  j["num_generations"] = num_generations;
  j["max_parallel_jobs"] = max_parallel_jobs;
  j["max_parallel_proposals"] = max_parallel_proposals;
  j["proposal_lag"] = proposal_lag;
  j["confirm_runs"] = confirm_runs;
  j["noise_runs"] = noise_runs;
  j["num_islands"] = num_islands;
  j["parent_selection_strategy"] = parent_selection_strategy;
  j["exploitation_alpha"] = exploitation_alpha;
  j["parent_selection_lambda"] = parent_selection_lambda;
  j["num_beams"] = num_beams;
  j["archive_size"] = archive_size;
  j["elite_selection_ratio"] = elite_selection_ratio;
  j["num_archive_inspirations"] = num_archive_inspirations;
  j["num_top_k_inspirations"] = num_top_k_inspirations;
  j["num_failed_neighbours"] = num_failed_neighbours;
  j["migration_interval"] = migration_interval;
  j["migration_rate"] = migration_rate;
  j["migration_strategy"] = migration_strategy;
  json edges = json::array();
  for (auto [a, b] : migration_graph) edges.push_back({a, b});
  j["migration_graph"] = edges;
  j["explore_fraction"] = explore_fraction;
  j["explore_patch_type_probs"] = explore.patch_type_probs;
  j["explore_temperatures"] = explore.temperatures;
  j["exploit_patch_type_probs"] = exploit.patch_type_probs;
  j["exploit_temperatures"] = exploit.temperatures;
  j["patch_types"] = patch_types;
  j["code_embed_sim_threshold"] = code_embed_sim_threshold;
  j["max_novelty_attempts"] = max_novelty_attempts;
  j["max_patch_attempts"] = max_patch_attempts;
  j["embedding_dims"] = embedding_dims;
  j["meta_rec_interval"] = meta_rec_interval;
  j["use_text_feedback"] = use_text_feedback;
  j["init_program_paths_per_island"] = init_program_paths_per_island;
  j["task_sys_msg_per_island"] = task_sys_msg_per_island;
  j["island_api_types"] = island_api_types;
  j["seed"] = seed;
  if (stop_when.enabled()) {
    json w = {{"metric", stop_when.metric}};
    if (stop_when.at_most) w["at_most"] = *stop_when.at_most;
    if (stop_when.at_least) w["at_least"] = *stop_when.at_least;
    if (stop_when.confirm > 0) w["confirm"] = stop_when.confirm;
    j["stop_when"] = w;
  }
  j["llm"] = llm;
  return j;
}

std::optional<double> StopWhen::value(double combined_score, const json& public_metrics) const {
  if (metric == "combined_score") return combined_score;
  if (!public_metrics.is_object()) return std::nullopt;
  auto it = public_metrics.find(metric);
  if (it == public_metrics.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

bool StopWhen::met(double combined_score, const json& public_metrics) const {
  if (!enabled()) return false;
  auto v = value(combined_score, public_metrics);
  return v && met_value(*v);
}

bool StopWhen::met_value(double v) const {
  if (!enabled()) return false;
  return at_most ? v <= *at_most : v >= *at_least;
}

std::string StopWhen::describe() const {
  if (!enabled()) return "";
  std::string text = at_most ? fmt::format("{} <= {:g}", metric, *at_most) : fmt::format("{} >= {:g}", metric, *at_least);
  if (confirm > 0) text += fmt::format(" (median of {} runs)", confirm + 1);
  return text;
}

std::int64_t effective_proposal_lag(const SearchConfig& c, bool remote) {
  if (!remote) return c.max_parallel_jobs;  // as before the pool: a proposal takes no time
  if (c.proposal_lag > 0) return c.proposal_lag;
  // Room for each proposal to take about two answers (a patch retried) while the evaluations run,
  // and, with text feedback, for as many proposals waiting for a diagnosis still being asked.
  const std::int64_t jobs = std::int64_t(c.max_parallel_jobs) * (c.use_text_feedback ? 2 : 1);
  return jobs + 2 * std::int64_t(c.max_parallel_proposals);
}

}  // namespace braid
