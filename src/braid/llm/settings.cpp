#include <fmt/format.h>

#include "braid/llm/model_spec.hpp"
#include "braid/llm/settings.hpp"
#include "braid/util/error.hpp"

namespace braid {
namespace {

std::string kind_of(const json& v) { return v.type_name(); }

// Every number has a range: a timeout of 1e10 s must not overflow into "at once".
double get_number(const json& config, const char* key, double min, double max, const std::string& file) {
  const json& v = config.at(key);
  if (!v.is_number()) throw UserError(file, std::string(key) + ": expected a number, got " + kind_of(v));
  double d = v.get<double>();
  if (!(d >= min && d <= max))
    throw UserError(file, fmt::format("{}: must be between {:g} and {:g}, got {}", key, min, max, v.dump()));
  return d;
}

int get_int(const json& config, const char* key, int min, int max, const std::string& file) {
  const json& v = config.at(key);
  if (!v.is_number_integer()) throw UserError(file, std::string(key) + ": expected an integer, got " + kind_of(v));
  const bool in_range = v.is_number_unsigned() ? v.get<std::uint64_t>() <= std::uint64_t(max)
                                               : v.get<std::int64_t>() >= min && v.get<std::int64_t>() <= max;
  if (!in_range) throw UserError(file, fmt::format("{}: must be between {} and {}, got {}", key, min, max, v.dump()));
  return int(v.get<std::int64_t>());
}

constexpr int kMaxTokens = 10'000'000;

std::string get_string(const json& config, const char* key, const std::string& file) {
  const json& v = config.at(key);
  if (v.is_null()) return "";
  if (!v.is_string()) throw UserError(file, std::string(key) + ": expected a string, got " + kind_of(v));
  return v.get<std::string>();
}

bool get_bool(const json& config, const char* key, const std::string& file) {
  const json& v = config.at(key);
  if (!v.is_boolean()) throw UserError(file, std::string(key) + ": expected true or false, got " + kind_of(v));
  return v.get<bool>();
}

void check_api_type(const std::string& t, const char* key, const std::string& file) {
  if (t != "lsa" && t != "gin" && t != "hybrid" && t != "host" && t != "cuda")
    throw UserError(file, std::string(key) + ": '" + t + "' is not an API type (lsa, gin, hybrid, host, cuda)");
}

void check_model(const std::string& m, const char* key, const std::string& file, const std::string& key_env) {
  if (m.empty() || m == "none") return;
  try {
    llm::parse_model_spec(m, key_env, "");
  } catch (const UserError& e) {
    throw UserError(file, std::string(key) + ": " + e.what());
  }
}

}  // namespace

const std::string& LlmSettings::api_type_of(int island) const {
  if (island >= 0 && static_cast<std::size_t>(island) < island_api_types.size()) return island_api_types[island];
  return api_type;
}

const std::vector<std::string>& llm_config_keys() {
  static const std::vector<std::string> keys = {
      "llm_models",        "llm_kwargs",         "llm_selection",       "llm_ucb_exploration",
      "meta_llm_model",    "feedback_llm_model", "novelty_llm_model",   "embedding_model",
      "llm_prices",        "api_key_env",        "max_api_cost",        "request_timeout_s",
      "max_retries",       "retry_backoff_s",    "retry_backoff_max_s", "prompts_dir",
      "use_novelty_judge", "api_type",           "island_api_types",    "hardware_facts",
      "feedback_max_tokens", "meta_max_tokens",  "novelty_max_tokens", "max_requests_per_model",
      "backend_context_tokens"};
  return keys;
}

LlmSettings parse_llm_settings(const json& config, const std::string& file) {
  LlmSettings s;
  if (!config.is_object()) return s;
  auto has = [&](const char* k) { return config.contains(k) && !config.at(k).is_null(); };

  if (has("api_key_env")) s.api_key_env = get_string(config, "api_key_env", file);
  if (has("llm_models")) {
    const json& v = config.at("llm_models");
    if (v.is_string()) {
      s.models.push_back(v.get<std::string>());
    } else if (v.is_array()) {
      for (auto& m : v) {
        if (!m.is_string()) throw UserError(file, "llm_models: every entry must be a model string");
        s.models.push_back(m.get<std::string>());
      }
    } else {
      throw UserError(file, "llm_models: expected a model string or a list of them");
    }
    for (auto& m : s.models) check_model(m, "llm_models", file, s.api_key_env);
  }
  if (has("llm_kwargs")) {
    const json& v = config.at("llm_kwargs");
    if (!v.is_object()) throw UserError(file, "llm_kwargs: expected a mapping");
    s.kwargs = v;
    if (s.kwargs.contains("temperature")) {
      // Temperatures come from the phase schedule (explore/exploit); one here would silently lose.
      throw UserError(file, "llm_kwargs: temperature is set per phase by the search (explore/exploit temperatures)");
    }
    if (s.kwargs.contains("max_tokens")) {
      const json& mt = s.kwargs["max_tokens"];
      if (mt.is_number_integer() && mt.get<std::int64_t>() > 0 && mt.get<std::int64_t>() <= kMaxTokens) {
        s.max_tokens_explore = s.max_tokens_exploit = mt.get<int>();
      } else if (mt.is_object()) {
        for (auto& [phase, n] : mt.items()) {
          if (!n.is_number_integer() || n.get<std::int64_t>() <= 0 || n.get<std::int64_t>() > kMaxTokens)
            throw UserError(file, "llm_kwargs.max_tokens." + phase + ": expected an integer between 1 and 10000000");
          if (phase == "explore") s.max_tokens_explore = n.get<int>();
          else if (phase == "exploit") s.max_tokens_exploit = n.get<int>();
          else throw UserError(file, "llm_kwargs.max_tokens: unknown phase '" + phase + "' (explore, exploit)");
        }
      } else {
        throw UserError(file, "llm_kwargs.max_tokens: expected an integer between 1 and 10000000 or {explore: n, exploit: m}");
      }
      s.kwargs.erase("max_tokens");
    }
  }
  if (has("llm_selection")) {
    std::string v = get_string(config, "llm_selection", file);
    if (v == "round_robin") s.selection = llm::Selection::RoundRobin;
    else if (v == "ucb") s.selection = llm::Selection::Ucb;
    else throw UserError(file, "llm_selection: expected round_robin or ucb, got '" + v + "'");
  }
  if (has("llm_ucb_exploration")) s.ucb_exploration = get_number(config, "llm_ucb_exploration", 0.0, 1e3, file);
  if (has("meta_llm_model")) s.meta_model = get_string(config, "meta_llm_model", file);
  if (has("feedback_llm_model")) s.feedback_model = get_string(config, "feedback_llm_model", file);
  if (has("novelty_llm_model")) s.novelty_model = get_string(config, "novelty_llm_model", file);
  if (has("embedding_model")) s.embedding_model = get_string(config, "embedding_model", file);
  check_model(s.meta_model, "meta_llm_model", file, s.api_key_env);
  check_model(s.feedback_model, "feedback_llm_model", file, s.api_key_env);
  check_model(s.novelty_model, "novelty_llm_model", file, s.api_key_env);
  check_model(s.embedding_model, "embedding_model", file, s.api_key_env);
  if (has("llm_prices")) {
    const json& v = config.at("llm_prices");
    if (!v.is_object()) throw UserError(file, "llm_prices: expected a mapping of model -> {input, output}");
    for (auto& [model, p] : v.items()) {
      llm::ModelPrice price;
      if (p.is_object() && p.contains("input") && p.contains("output") && p["input"].is_number() &&
          p["output"].is_number()) {
        price = {p["input"].get<double>(), p["output"].get<double>()};
      } else if (p.is_array() && p.size() == 2 && p[0].is_number() && p[1].is_number()) {
        price = {p[0].get<double>(), p[1].get<double>()};
      } else {
        throw UserError(file, "llm_prices." + model + ": expected {input: USD per Mtok, output: USD per Mtok}");
      }
      if (price.input_per_mtok < 0 || price.output_per_mtok < 0)
        throw UserError(file, "llm_prices." + model + ": prices cannot be negative");
      s.prices[model] = price;
    }
  }
  if (has("max_api_cost")) s.max_api_cost = get_number(config, "max_api_cost", 0.0, 1e9, file);
  if (has("request_timeout_s")) s.request_timeout_s = get_number(config, "request_timeout_s", 0.001, 24 * 3600.0, file);
  if (has("max_retries")) s.max_retries = get_int(config, "max_retries", 0, 20, file);
  if (has("max_requests_per_model")) s.max_requests_per_model = get_int(config, "max_requests_per_model", 0, 1024, file);
  if (has("retry_backoff_s")) s.retry_backoff_s = get_number(config, "retry_backoff_s", 0.0, 3600.0, file);
  if (has("retry_backoff_max_s")) s.retry_backoff_max_s = get_number(config, "retry_backoff_max_s", 0.0, 3600.0, file);
  if (has("prompts_dir")) s.prompts_dir = get_string(config, "prompts_dir", file);
  if (has("use_novelty_judge")) s.use_novelty_judge = get_bool(config, "use_novelty_judge", file);
  if (has("api_type")) {
    s.api_type = get_string(config, "api_type", file);
    check_api_type(s.api_type, "api_type", file);
  }
  if (has("island_api_types")) {
    const json& v = config.at("island_api_types");
    if (!v.is_array()) throw UserError(file, "island_api_types: expected a list (one API type per island)");
    for (auto& t : v) {
      if (!t.is_string()) throw UserError(file, "island_api_types: every entry must be a string");
      check_api_type(t.get<std::string>(), "island_api_types", file);
      s.island_api_types.push_back(t.get<std::string>());
    }
  }
  if (has("hardware_facts")) s.hardware_facts = get_string(config, "hardware_facts", file);
  if (has("feedback_max_tokens")) s.feedback_max_tokens = get_int(config, "feedback_max_tokens", 1, kMaxTokens, file);
  if (has("meta_max_tokens")) s.meta_max_tokens = get_int(config, "meta_max_tokens", 1, kMaxTokens, file);
  if (has("novelty_max_tokens")) s.novelty_max_tokens = get_int(config, "novelty_max_tokens", 1, kMaxTokens, file);
  if (has("backend_context_tokens"))
    s.backend_context_tokens = get_int(config, "backend_context_tokens", 0, 200000, file);
  return s;
}

}  // namespace braid
