#include "braid/mutate/llm_runtime.hpp"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/ranges.h>

#include "braid/llm/secrets.hpp"
#include "braid/mutate/llm_operators.hpp"
#include "braid/platform/device_headers.hpp"
#include "braid/mutate/backend_reference.hpp"
#include "braid/platform/toolchain.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/log.hpp"
#include "braid/util/subprocess.hpp"
#include "braid/util/text.hpp"

namespace braid {
namespace {

// At most `limit` requests of one model in flight; the others wait their turn here.
class LimitedClient final : public llm::LlmClient {
 public:
  LimitedClient(std::unique_ptr<llm::LlmClient> inner, int limit) : inner_(std::move(inner)), limit_(limit) {}
  llm::LlmResponse complete(const llm::LlmRequest& request) override {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return running_ < limit_; });
      ++running_;
    }
    llm::LlmResponse r = inner_->complete(request);
    {
      std::lock_guard lock(mu_);
      --running_;
    }
    cv_.notify_one();
    return r;
  }
  const std::string& model() const override { return inner_->model(); }

 private:
  std::unique_ptr<llm::LlmClient> inner_;
  const int limit_;
  std::mutex mu_;
  std::condition_variable cv_;
  int running_ = 0;
};

constexpr const char* kModelsFile = "llm_models.json";

std::vector<std::string> split_models(const std::string& spec) {
  std::vector<std::string> out;
  std::stringstream ss(spec);
  for (std::string item; std::getline(ss, item, ',');) {
    auto b = item.find_first_not_of(" \t");
    auto e = item.find_last_not_of(" \t");
    if (b != std::string::npos) out.push_back(item.substr(b, e - b + 1));
  }
  return out;
}

std::string agent_model(const std::string& configured, const std::vector<std::string>& models) {
  if (configured == "none") return "";
  if (!configured.empty()) return configured;
  return models.empty() ? "" : models.front();
}

}  // namespace

llm::LlmClient& LlmRuntime::client(const std::string& model) {
  auto it = clients.find(model);
  if (it == clients.end()) throw SystemError("no LLM client for model '" + model + "'");
  return *it->second;
}

std::string LlmRuntime::backend_context(const std::string& api_type) {
  std::lock_guard lock(context_mu_);
  if (auto it = context_cache_.find(api_type); it != context_cache_.end()) return it->second;
  if (!reference_inputs_) reference_inputs_ = reference_inputs(prompts.get());
  const auto sections = reference_sections(api_type, *reference_inputs_);
  const auto fitted = fit_reference(sections, static_cast<std::size_t>(std::max(0, settings.backend_context_tokens)));
  if (!fitted.cut.empty() || !fitted.left_out.empty())
    log::info("backend context for {}: {} characters (~{} tokens); cut: {}; left out: {} (backend_context_tokens {})",
              api_type, fitted.text.size(), approx_tokens(fitted.text.size()), fitted.cut.empty() ? "-" : fitted.cut,
              fitted.left_out.empty() ? "-" : fmt::format("{}", fmt::join(fitted.left_out, ", ")),
              settings.backend_context_tokens);
  std::string out = fitted.text.empty() ? "(no backend documentation found)\n" : fitted.text;
  context_cache_[api_type] = out;
  return out;
}

std::shared_ptr<LlmRuntime> make_llm_runtime(const LlmSettings& s, const std::string& llm_spec, ProgramDatabase* db,
                                             const std::filesystem::path& results_dir,
                                             const std::string& task_message, const std::string& language,
                                             LlmRuntimeOptions options) {
  auto rt = std::make_shared<LlmRuntime>();
  rt->settings = s;
  rt->task_message = task_message;
  rt->language = language.empty() ? "cpp" : language;

  std::filesystem::path replay_dir;
  const std::string origin = llm_spec.empty() ? "config" : "--llm";
  if (llm_spec.rfind("replay:", 0) == 0) {
    replay_dir = llm_spec.substr(7);
    rt->replay = std::make_shared<llm::ReplayLog>(replay_dir);
    // The recorded run's model roles, so the same agents ask the same (recorded) models.
    if (auto text = try_read_file(replay_dir / kModelsFile)) {
      json j = json::parse(*text, nullptr, false);
      if (!j.is_discarded()) {
        rt->mutation_models = j.value("mutation", std::vector<std::string>{});
        rt->feedback_model = j.value("feedback", "");
        rt->meta_model = j.value("meta", "");
        rt->novelty_model = j.value("novelty", "");
      }
    }
    if (rt->mutation_models.empty()) {
      rt->mutation_models = !s.models.empty() ? s.models : rt->replay->models();
      rt->feedback_model = agent_model(s.feedback_model, rt->mutation_models);
      rt->meta_model = agent_model(s.meta_model, rt->mutation_models);
      rt->novelty_model = s.use_novelty_judge ? agent_model(s.novelty_model, rt->mutation_models) : "";
    }
    if (rt->mutation_models.empty())
      throw UserError((replay_dir / llm::kExchangeFile).string(), "holds no recorded exchange to replay");
  } else {
    rt->mutation_models = llm_spec.empty() ? s.models : split_models(llm_spec);
    if (rt->mutation_models.empty())
      throw UserError(origin, "no LLM model: set llm_models in the config or pass --llm MODEL");
    rt->feedback_model = agent_model(s.feedback_model, rt->mutation_models);
    rt->meta_model = agent_model(s.meta_model, rt->mutation_models);
    rt->novelty_model = s.use_novelty_judge ? agent_model(s.novelty_model, rt->mutation_models) : "";
  }

  rt->ledger = std::make_shared<llm::CostLedger>(s.prices, s.max_api_cost);
  rt->db = db;
  if (db != nullptr) {
    db->ensure_llm_calls_table();
    rt->ledger->sink = [db](const llm::CallRecord& rec) {
      // The call already happened; losing its row (disk full) must not end the search.
      if (auto error = db->insert_llm_call(llm_call_row(rec))) log::warn("llm_calls: cannot record call {}: {}", rec.seq, *error);
    };
  }
  if (options.record) {
    std::filesystem::create_directories(results_dir);
    rt->recorder = std::make_shared<llm::ExchangeRecorder>(results_dir / llm::kExchangeFile);
  }

  llm::RetryPolicy policy;
  policy.timeout_s = s.request_timeout_s;
  policy.max_retries = s.max_retries;
  policy.backoff_base_s = s.retry_backoff_s;
  policy.backoff_max_s = s.retry_backoff_max_s;
  std::set<std::string> all(rt->mutation_models.begin(), rt->mutation_models.end());
  for (auto* m : {&rt->feedback_model, &rt->meta_model, &rt->novelty_model})
    if (!m->empty()) all.insert(*m);
  for (const auto& model : all) {
    llm::ModelSpec spec = llm::parse_model_spec(model, s.api_key_env, origin);
    std::unique_ptr<llm::LlmClient> inner;
    if (!rt->replay) {
      inner = llm::make_client(spec, policy, options.sleep);
      if (s.max_requests_per_model > 0) inner = std::make_unique<LimitedClient>(std::move(inner), s.max_requests_per_model);
    }
    rt->clients[model] =
        std::make_unique<llm::TrackedClient>(std::move(inner), rt->replay, model, rt->recorder, rt->ledger);
  }
  rt->selector = std::make_unique<llm::ModelSelector>(rt->mutation_models, s.selection, s.ucb_exploration);
  rt->prompts = std::make_unique<llm::PromptLibrary>(s.prompts_dir);

  rt->hardware = llm::run_hardware_facts(
      s.hardware_facts, replay_dir, options.hardware_cache.empty() ? results_dir / "hardware.json" : options.hardware_cache);

  if (options.record) {
    json roles = {{"mutation", rt->mutation_models},
                  {"feedback", rt->feedback_model},
                  {"meta", rt->meta_model},
                  {"novelty", rt->novelty_model}};
    write_file_atomic(results_dir / kModelsFile, roles.dump(2) + "\n");
  }
  log::info("llm: mutation {} ({}), feedback {}, meta {}{}", fmt::join(rt->mutation_models, ", "),
            s.selection == llm::Selection::Ucb ? "ucb" : "round robin",
            rt->feedback_model.empty() ? "off" : rt->feedback_model, rt->meta_model.empty() ? "off" : rt->meta_model,
            rt->replay ? ", replaying " + replay_dir.string() : "");
  return rt;
}

LlmCallRecord llm_call_row(const llm::CallRecord& rec) {
  return {rec.seq,       rec.replay_key, rec.purpose,  rec.model,    rec.generation, rec.tokens_in,      rec.tokens_out,
          rec.cost_usd,  rec.latency_s,  rec.attempts, rec.error_kind, rec.error,    rec.retried_errors, rec.created_at};
}

void mark_llm_call_error(ProgramDatabase* db, const std::string& replay_key, const std::string& kind, const std::string& error) {
  if (db != nullptr) db->mark_llm_call_error(replay_key, kind, error);
}

json llm_totals_from_db(const ProgramDatabase& db) {
  const LlmCallTotals t = db.llm_call_totals();
  json errors = json::object();
  for (const auto& [kind, n] : t.errors) errors[kind] = n;
  return {{"calls", t.calls},       {"tokens_in", t.tokens_in}, {"tokens_out", t.tokens_out},
          {"cost_usd", t.cost_usd}, {"errors", errors},         {"errors_total", t.errors_total}};
}

}  // namespace braid
