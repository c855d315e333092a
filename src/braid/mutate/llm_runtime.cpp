#include "braid/mutate/llm_runtime.hpp"

#include <sqlite3.h>

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

std::shared_ptr<LlmRuntime> make_llm_runtime(const LlmSettings& s, const std::string& llm_spec, sqlite3* db,
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
    ensure_llm_calls_table(db);
    rt->ledger->sink = [db](const llm::CallRecord& rec) { insert_llm_call(db, rec); };
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

  std::filesystem::path hw_cache = options.hardware_cache.empty() ? results_dir / "hardware.json" : options.hardware_cache;
  if (!s.hardware_facts.empty()) {
    rt->hardware = llm::probe_hardware(s.hardware_facts);
  } else if (!replay_dir.empty() && std::filesystem::exists(replay_dir / "hardware.json")) {
    // Same facts as the recorded run, so replayed prompts match.
    rt->hardware = llm::probe_hardware(replay_dir / "hardware.json");
    write_file_atomic(hw_cache, rt->hardware.to_json().dump(2) + "\n");
  } else {
    rt->hardware = llm::probe_hardware(hw_cache);
  }

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

void ensure_llm_calls_table(sqlite3* db) {
  const char* sql =
      "CREATE TABLE IF NOT EXISTS llm_calls ("
      " seq INTEGER, replay_key TEXT, purpose TEXT, model TEXT, generation INTEGER,"
      " tokens_in INTEGER, tokens_out INTEGER, cost_usd REAL, latency_s REAL, attempts INTEGER,"
      " error_kind TEXT, error TEXT, retried_errors TEXT, created_at REAL)";
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    throw SystemError("cannot create table llm_calls: " + msg);
  }
}

void insert_llm_call(sqlite3* db, const llm::CallRecord& rec) {
  sqlite3_stmt* st = nullptr;
  const char* sql =
      "INSERT INTO llm_calls (seq, replay_key, purpose, model, generation, tokens_in, tokens_out, cost_usd,"
      " latency_s, attempts, error_kind, error, retried_errors, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)";
  if (sqlite3_prepare_v2(db, sql, -1, &st, nullptr) != SQLITE_OK) {
    log::warn("llm_calls: cannot record call {}: {}", rec.seq, sqlite3_errmsg(db));
    return;
  }
  std::string retried = json(rec.retried_errors).dump();
  sqlite3_bind_int64(st, 1, rec.seq);
  sqlite3_bind_text(st, 2, rec.replay_key.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, 3, rec.purpose.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, 4, rec.model.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(st, 5, rec.generation);
  sqlite3_bind_int64(st, 6, rec.tokens_in);
  sqlite3_bind_int64(st, 7, rec.tokens_out);
  sqlite3_bind_double(st, 8, rec.cost_usd);
  sqlite3_bind_double(st, 9, rec.latency_s);
  sqlite3_bind_int(st, 10, rec.attempts);
  sqlite3_bind_text(st, 11, rec.error_kind.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, 12, rec.error.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, 13, retried.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_double(st, 14, rec.created_at);
  // The call already happened; losing its row (disk full) must not end the search.
  if (sqlite3_step(st) != SQLITE_DONE) log::warn("llm_calls: cannot record call {}: {}", rec.seq, sqlite3_errmsg(db));
  sqlite3_finalize(st);
}

void mark_llm_call_error(sqlite3* db, const std::string& replay_key, const std::string& kind, const std::string& error) {
  if (db == nullptr || replay_key.empty()) return;
  sqlite3_stmt* st = nullptr;
  const char* sql =
      "UPDATE llm_calls SET error_kind = ?, error = ? WHERE rowid = (SELECT MAX(rowid) FROM llm_calls WHERE replay_key = ?)";
  if (sqlite3_prepare_v2(db, sql, -1, &st, nullptr) != SQLITE_OK) return;
  sqlite3_bind_text(st, 1, kind.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, 2, error.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, 3, replay_key.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_step(st);
  sqlite3_finalize(st);
}

json llm_totals_from_handle(sqlite3* db) {
  json out = {{"calls", 0}, {"tokens_in", 0}, {"tokens_out", 0}, {"cost_usd", 0.0}, {"errors", json::object()},
              {"errors_total", 0}};
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db,
                         "SELECT COUNT(*), COALESCE(SUM(tokens_in),0), COALESCE(SUM(tokens_out),0),"
                         " COALESCE(SUM(cost_usd),0) FROM llm_calls",
                         -1, &st, nullptr) != SQLITE_OK)
    return out;  // no table: the run made no LLM call
  if (sqlite3_step(st) == SQLITE_ROW) {
    out["calls"] = sqlite3_column_int64(st, 0);
    out["tokens_in"] = sqlite3_column_int64(st, 1);
    out["tokens_out"] = sqlite3_column_int64(st, 2);
    out["cost_usd"] = sqlite3_column_double(st, 3);
  }
  sqlite3_finalize(st);
  std::int64_t total = 0;
  if (sqlite3_prepare_v2(db, "SELECT error_kind, retried_errors FROM llm_calls", -1, &st, nullptr) == SQLITE_OK) {
    while (sqlite3_step(st) == SQLITE_ROW) {
      auto text = [&](int c) {
        auto* p = sqlite3_column_text(st, c);
        return p ? std::string(reinterpret_cast<const char*>(p)) : std::string();
      };
      std::string kind = text(0);
      if (!kind.empty()) {
        out["errors"][kind] = out["errors"].value(kind, 0) + 1;
        ++total;
      }
      json retried = json::parse(text(1), nullptr, false);
      if (retried.is_array())
        for (auto& k : retried) {
          out["errors"][k.get<std::string>()] = out["errors"].value(k.get<std::string>(), 0) + 1;
          ++total;
        }
    }
    sqlite3_finalize(st);
  }
  out["errors_total"] = total;
  return out;
}

json llm_totals_from_db(const ProgramDatabase& db) { return llm_totals_from_handle(db.handle()); }

}  // namespace braid
