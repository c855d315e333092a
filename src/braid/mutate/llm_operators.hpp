// LLM variation operators for the search: the contract between llm/ + mutate/ and the
// EvolutionRunner / `braid evolve`. Implemented in llm_operators.cpp: it needs the database and
// the Mutator interface, so it lives in mutate/; the settings it reads are llm/settings.hpp.
#pragma once
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "braid/db/database.hpp"
#include "braid/llm/settings.hpp"
#include "braid/mutate/agents.hpp"
#include "braid/mutate/mutator.hpp"
#include "braid/util/json.hpp"

namespace braid {

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
