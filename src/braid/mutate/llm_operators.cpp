// make_llm_operators(): assembles the LLM operators of llm_operators.hpp around one runtime.
#include "braid/llm/embeddings.hpp"
#include "braid/llm/secrets.hpp"
#include "braid/mutate/llm_agents.hpp"
#include "braid/mutate/llm_mutator.hpp"
#include "braid/mutate/llm_operators.hpp"
#include "braid/mutate/llm_runtime.hpp"
#include "braid/util/error.hpp"
#include "braid/util/log.hpp"
#include "braid/util/subprocess.hpp"

namespace braid {

LlmOperators make_llm_operators(const LlmSettings& s, const std::string& llm_spec, ProgramDatabase& db,
                                const std::filesystem::path& results_dir, const std::string& task_message,
                                const std::string& language) {
  auto rt = make_llm_runtime(s, llm_spec, &db, results_dir, task_message, language);
  LlmOperators ops;
  ops.mutator = std::make_unique<LlmMutator>(rt);
  ops.feedback = std::make_unique<LlmFeedbackAgent>(rt);
  if (!rt->meta_model.empty()) ops.meta = std::make_unique<LlmMetaSummarizer>(rt);
  if (!rt->novelty_model.empty())
    ops.novelty_judge = [rt](const std::string& code, const std::vector<std::string>& similar) {
      return judge_novelty(*rt, code, similar);
    };
  ops.totals = [rt] {
    json t = rt->ledger->totals();
    t["models"] = rt->selector->stats();
    if (rt->replay) t["replay_diverged"] = rt->replay->diverged();
    return t;
  };
  ops.budget_exhausted = [rt] { return rt->ledger->exhausted(); };
  if (!s.embedding_model.empty() && !rt->replay) {
    llm::ModelSpec spec = llm::parse_model_spec(s.embedding_model, s.api_key_env, "embedding_model");
    register_secret_env_name(spec.key_env);
    auto key = llm::take_api_key(spec.key_env);
    if (!key && !spec.key_optional)
      throw UserError(spec.key_env, "is not set; it must hold the API key for " + s.embedding_model);
    llm::RetryPolicy policy;
    policy.timeout_s = s.request_timeout_s;
    policy.max_retries = s.max_retries;
    policy.backoff_base_s = s.retry_backoff_s;
    policy.backoff_max_s = s.retry_backoff_max_s;
    ops.embed = [spec, key = key.value_or(""), policy, rt](const std::string& code) {
      auto r = llm::embed_text(spec, key, policy, code);
      if (!r.ok()) {
        rt->ledger->count_error("embedding_" + r.error_kind);
        log::warn("embedding {}: {} ({}); the candidate gets no API embedding", spec.text, r.error_kind, r.error);
      }
      return r.vector;
    };
  }
  return ops;
}

}  // namespace braid
