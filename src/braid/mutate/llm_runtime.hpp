// Shared state of a run's LLM operators: clients (one per model string), the cost ledger,
// exchange recording or replay, the model bandit, prompt templates and hardware facts. The
// mutator, the feedback agent, the meta-summarizer and the novelty judge hold one of these.
#pragma once
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "braid/db/database.hpp"
#include "braid/llm/client.hpp"
#include "braid/llm/exchange_log.hpp"
#include "braid/llm/hardware.hpp"
#include "braid/llm/ledger.hpp"
#include "braid/llm/model_selector.hpp"
#include "braid/llm/prompt_template.hpp"
#include "braid/llm/settings.hpp"
#include "braid/mutate/backend_reference.hpp"

namespace braid {

struct LlmRuntime {
  LlmSettings settings;
  std::string task_message;
  std::string language;
  std::vector<std::string> mutation_models;
  std::string feedback_model, meta_model, novelty_model;  // "" = disabled
  std::shared_ptr<llm::CostLedger> ledger;
  std::shared_ptr<llm::ExchangeRecorder> recorder;  // null: nothing recorded
  std::shared_ptr<llm::ReplayLog> replay;           // non-null: answers come from a recording
  std::map<std::string, std::unique_ptr<llm::LlmClient>> clients;
  std::unique_ptr<llm::ModelSelector> selector;     // over mutation_models
  std::unique_ptr<llm::PromptLibrary> prompts;
  llm::HardwareFacts hardware;
  ProgramDatabase* db = nullptr;                    // llm_calls rows; may be null

  llm::LlmClient& client(const std::string& model);  // throws SystemError for an unknown model
  // Backend context for the system message (mutate/backend_reference.hpp): orientation, braid's
  // device header contracts, strategies and NCCL's device API for the API type, within
  // settings.backend_context_tokens. Cached per API type.
  std::string backend_context(const std::string& api_type);

 private:
  std::mutex context_mu_;
  std::optional<ReferenceInputs> reference_inputs_;  // read once, on first use
  std::map<std::string, std::string> context_cache_;
};

struct LlmRuntimeOptions {
  std::function<void(double)> sleep;   // back-off sleeps (tests observe them)
  bool record = true;                  // write <results>/llm_exchanges.jsonl
  std::filesystem::path hardware_cache;  // default <results>/hardware.json
};

// See make_llm_operators() for `llm_spec`. `db` may be null (no llm_calls rows).
std::shared_ptr<LlmRuntime> make_llm_runtime(const LlmSettings& s, const std::string& llm_spec, ProgramDatabase* db,
                                             const std::filesystem::path& results_dir,
                                             const std::string& task_message, const std::string& language,
                                             LlmRuntimeOptions options = {});

// The llm_calls row of a finished call (the cost ledger's sink).
LlmCallRecord llm_call_row(const llm::CallRecord& rec);
// A call whose answer proved unusable afterwards (no patch in it): its row gets that kind.
// Nothing happens without a database.
void mark_llm_call_error(ProgramDatabase* db, const std::string& replay_key, const std::string& kind, const std::string& error);

}  // namespace braid
