// LLM variation operators for the search: the contract between llm/ + mutate/ and the
// EvolutionRunner / `braid evolve`. Implemented in mutate/llm_operators.cpp (it needs the
// database and the Mutator interface; llm/ itself depends on util only).
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
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "braid/db/database.hpp"
#include "braid/llm/ledger.hpp"
#include "braid/llm/model_selector.hpp"
#include "braid/mutate/agents.hpp"
#include "braid/mutate/mutator.hpp"
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

struct LlmOperators {
  std::unique_ptr<Mutator> mutator;          // LlmMutator
  std::unique_ptr<FeedbackAgent> feedback;   // never null: it also rewards the model bandit;
                                             // without a feedback model it returns ""
  std::unique_ptr<MetaSummarizer> meta;      // null when meta_llm_model is "none"
  std::function<bool(const std::string& candidate_code, const std::vector<std::string>& similar_codes)>
      novelty_judge;                         // empty unless use_novelty_judge; true = novel
  std::function<json()> totals;              // {"calls","tokens_in","tokens_out","cost_usd","errors":{..},
                                             //  "models":[bandit stats]}
  std::function<bool()> budget_exhausted;    // max_api_cost reached
  // Whether `island` can run on this machine (its API type); `why` says why not.
  std::function<bool(int island, std::string* why)> island_runnable;
  // API embeddings (embedding_model); empty when the offline embedder is to be used.
  std::function<std::vector<float>(const std::string& code)> embed;
};

// `llm_spec`: the CLI's --llm value: one model string or several separated by commas,
// "replay:<results_dir>", or "" to use settings.models. Keys are read (and removed from the
// environment) here: a missing key is a UserError before anything runs. Calls are recorded in
// <results_dir>/llm_exchanges.jsonl and in the database's llm_calls table.
LlmOperators make_llm_operators(const LlmSettings& s, const std::string& llm_spec, ProgramDatabase& db,
                                const std::filesystem::path& results_dir, const std::string& task_message,
                                const std::string& language);

// Totals of a finished or running run read from its database (for `braid top`/`status`):
// same shape as LlmOperators::totals(); zeros when the run made no LLM call.
json llm_totals_from_db(const ProgramDatabase& db);

}  // namespace braid
