// CostLedger: tokens, cost and failures of every LLM call of a run, with the budget check.
// Prices come from the config (USD per million tokens); a model without a price costs 0 and
// is named once in the log. Thread-safe.
#pragma once
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "braid/llm/client.hpp"
#include "braid/util/json.hpp"

namespace braid::llm {

struct ModelPrice {
  double input_per_mtok = 0.0;
  double output_per_mtok = 0.0;
};

// One finished call, as stored in the database's llm_calls table.
struct CallRecord {
  std::int64_t seq = 0;
  std::string replay_key;
  std::string purpose;
  std::string model;
  std::int64_t generation = -1;
  std::int64_t tokens_in = 0;
  std::int64_t tokens_out = 0;
  double cost_usd = 0.0;
  double latency_s = 0.0;
  int attempts = 0;
  std::string error_kind;
  std::string error;
  std::vector<std::string> retried_errors;
  double created_at = 0.0;
};

class CostLedger {
 public:
  // `max_cost_usd` <= 0: no budget.
  CostLedger(std::map<std::string, ModelPrice> prices, double max_cost_usd);

  // Adds the call; returns its cost. `sink` (if set) receives the finished record.
  double record(const LlmRequest& request, const LlmResponse& response, std::int64_t seq);
  // Failures that happen outside a call (the mutator's no_patch).
  void count_error(const std::string& kind);

  json totals() const;  // {"calls","tokens_in","tokens_out","cost_usd","errors":{kind:count}}
  double cost_usd() const;
  bool exhausted() const;
  double price(const std::string& model, std::int64_t tokens_in, std::int64_t tokens_out) const;

  std::function<void(const CallRecord&)> sink;

 private:
  const ModelPrice* find_price(const std::string& model) const;

  std::map<std::string, ModelPrice> prices_;
  double max_cost_usd_;
  mutable std::mutex mu_;
  std::int64_t calls_ = 0, tokens_in_ = 0, tokens_out_ = 0;
  double cost_usd_ = 0.0;
  std::map<std::string, std::int64_t> errors_;
  mutable std::map<std::string, bool> unpriced_warned_;
};

}  // namespace braid::llm
