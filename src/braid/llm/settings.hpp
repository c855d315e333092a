// The settings of a run's LLM operators (mutate/llm_operators.hpp), read from the config's
// LLM keys; parsed here so that a bad value fails before anything runs.
//
// Config keys (all optional except that some model must come from llm_models or --llm):
//   llm_models          string or list of model strings (see model_spec.hpp)
//   llm_kwargs          object passed to every request (top_p, reasoning_effort, thinking, ...);
//                       max_tokens: int, or {"explore": n, "exploit": m} for the mutation calls
//   llm_selection       "round_robin" (default) | "ucb" (bandit rewarded by improvement)
//   llm_ucb_exploration UCB exploration constant (default 1.0)
//   meta_llm_model, feedback_llm_model, novelty_llm_model
//                       model for that agent; default the first of llm_models; "none" disables
//                       (feedback: no LLM diagnosis; meta: statistics only is then the runner's)
//   embedding_model     API embeddings model string; "" (default) keeps the offline embedder
//   llm_prices          {"<model string or id>": {"input": USD/Mtok, "output": USD/Mtok}}
//   api_key_env         environment variable holding the key for every model (overrides defaults)
//   max_api_cost        USD; when reached, budget_exhausted() turns true (0 = no limit)
//   request_timeout_s   per request (default 120, at most 86400)
//   max_retries         per request, on 429/5xx/timeouts/resets/malformed answers (default 4,
//                       at most 20; a timeout is retried once); 401/403 stop the run
//   retry_backoff_s, retry_backoff_max_s   exponential back-off base and cap (1, 60; at most 3600)
//   max_requests_per_model  requests in flight to one model at once, whatever asks (0 = no
//                       limit; providers cap concurrency); at most 1024
//   prompts_dir         folder whose *.md files override the shipped prompts/ by name
//   use_novelty_judge   ask novelty_llm_model after the embedding filter (default false)
//   api_type            backend shown to the model: "lsa" | "gin" | "hybrid" | "host" | "cuda"
//                       (default "lsa"; a one-rank workload always gets "cuda": no communication)
//   island_api_types    per-island list overriding api_type
//   backend_context_tokens  budget of the backend context (braid and NCCL device API reference) in
//                       the system message, ~4 characters a token (default 8000; see
//                       docs/prompt-reference.md)
//   hardware_facts      JSON file of measured hardware facts (see hardware.hpp); default: probe
//                       once and cache in <results>/hardware.json
//   feedback_max_tokens, meta_max_tokens, novelty_max_tokens   (600, 2000, 200)
#pragma once
#include <map>
#include <string>
#include <vector>

#include "braid/llm/ledger.hpp"
#include "braid/llm/model_selector.hpp"
#include "braid/util/json.hpp"

namespace braid {

struct LlmSettings {
  std::vector<std::string> models;
  json kwargs = json::object();  // without max_tokens
  int max_tokens_explore = 8192;
  int max_tokens_exploit = 8192;
  llm::Selection selection = llm::Selection::RoundRobin;
  double ucb_exploration = 1.0;
  std::string meta_model, feedback_model, novelty_model;  // "" = first of models, "none" = off
  std::string embedding_model;
  std::map<std::string, llm::ModelPrice> prices;
  std::string api_key_env;
  double max_api_cost = 0.0;
  double request_timeout_s = 120.0;
  int max_retries = 4;
  int max_requests_per_model = 0;
  double retry_backoff_s = 1.0;
  double retry_backoff_max_s = 60.0;
  std::string prompts_dir;
  bool use_novelty_judge = false;
  std::string api_type = "lsa";
  std::vector<std::string> island_api_types;
  std::string hardware_facts;
  int feedback_max_tokens = 600;
  int meta_max_tokens = 2000;
  int novelty_max_tokens = 200;
  int backend_context_tokens = 8000;

  const std::string& api_type_of(int island) const;
};

const std::vector<std::string>& llm_config_keys();
// Reads the keys above from `config` (others are ignored); UserError(file, ...) on bad values.
LlmSettings parse_llm_settings(const json& config, const std::string& file);

}  // namespace braid
