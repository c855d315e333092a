#include "braid/llm/ledger.hpp"

#include <chrono>

#include "braid/util/log.hpp"

namespace braid::llm {

CostLedger::CostLedger(std::map<std::string, ModelPrice> prices, double max_cost_usd)
    : prices_(std::move(prices)), max_cost_usd_(max_cost_usd) {}

const ModelPrice* CostLedger::find_price(const std::string& model) const {
  if (auto it = prices_.find(model); it != prices_.end()) return &it->second;
  // Prices may be keyed by the bare model id ("gpt-4.1-mini") or by the full model string.
  std::string bare = model;
  if (auto colon = bare.find(':'); colon != std::string::npos) bare = bare.substr(colon + 1);
  if (auto at = bare.find('@'); at != std::string::npos) bare = bare.substr(0, at);
  if (auto it = prices_.find(bare); it != prices_.end()) return &it->second;
  return nullptr;
}

double CostLedger::price(const std::string& model, std::int64_t tokens_in, std::int64_t tokens_out) const {
  const ModelPrice* p = find_price(model);
  if (p == nullptr) {
    if (!unpriced_warned_[model]) {
      unpriced_warned_[model] = true;
      log::info("llm {}: no price in llm_prices; its calls are counted at $0", model);
    }
    return 0.0;
  }
  return (static_cast<double>(tokens_in) * p->input_per_mtok + static_cast<double>(tokens_out) * p->output_per_mtok) / 1e6;
}

double CostLedger::record(const LlmRequest& request, const LlmResponse& response, std::int64_t seq) {
  CallRecord rec;
  {
    std::lock_guard lock(mu_);
    rec.seq = seq;
    rec.replay_key = request.replay_key;
    rec.purpose = request.purpose;
    rec.model = response.model;
    rec.generation = request.generation;
    rec.tokens_in = response.tokens_in;
    rec.tokens_out = response.tokens_out;
    rec.cost_usd = price(response.model, response.tokens_in, response.tokens_out);
    rec.latency_s = response.latency_s;
    rec.attempts = response.attempts;
    rec.error_kind = response.error_kind;
    rec.error = response.error;
    rec.retried_errors = response.retried_errors;
    rec.created_at = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    ++calls_;
    tokens_in_ += rec.tokens_in;
    tokens_out_ += rec.tokens_out;
    cost_usd_ += rec.cost_usd;
    for (auto& k : response.retried_errors) ++errors_[k];
    if (!response.error_kind.empty()) ++errors_[response.error_kind];
  }
  if (sink) sink(rec);
  return rec.cost_usd;
}

void CostLedger::count_error(const std::string& kind) {
  std::lock_guard lock(mu_);
  ++errors_[kind];
}

json CostLedger::totals() const {
  std::lock_guard lock(mu_);
  json errors = json::object();
  std::int64_t errors_total = 0;
  for (auto& [k, n] : errors_) {
    errors[k] = n;
    errors_total += n;
  }
  return {{"calls", calls_}, {"errors_total", errors_total}, {"tokens_in", tokens_in_}, {"tokens_out", tokens_out_}, {"cost_usd", cost_usd_},
          {"errors", errors}, {"max_api_cost", max_cost_usd_ > 0 ? json(max_cost_usd_) : json(nullptr)}};
}

double CostLedger::cost_usd() const {
  std::lock_guard lock(mu_);
  return cost_usd_;
}

bool CostLedger::exhausted() const {
  std::lock_guard lock(mu_);
  return max_cost_usd_ > 0 && cost_usd_ >= max_cost_usd_;
}

}  // namespace braid::llm
