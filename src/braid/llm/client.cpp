#include "braid/util/text.hpp"
#include "braid/llm/client.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <ctime>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "braid/llm/http.hpp"
#include "braid/llm/secrets.hpp"
#include "braid/util/log.hpp"

namespace braid::llm {
namespace {

// Never cuts a UTF-8 sequence: messages go into JSON (the exchange log, the database).
std::string shorten(const std::string& s, std::size_t n = 400) {
  return s.size() <= n ? s : std::string(utf8_prefix(s, n)) + "...";
}

bool looks_like_refusal(const std::string& text) {
  // Only short answers without any code: a long answer that happens to begin politely is
  // still read for a patch.
  if (text.size() > 600 || text.find("```") != std::string::npos || text.find("SEARCH") != std::string::npos)
    return false;
  static const char* openings[] = {"I'm sorry", "I am sorry", "I can't help", "I cannot help", "I can't assist",
                                   "I cannot assist", "I won't", "I will not"};
  for (const char* o : openings)
    if (text.rfind(o, 0) == 0) return true;
  return false;
}

double jitter() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return std::uniform_real_distribution<double>(0.5, 1.0)(rng);
}

class HttpLlmClient final : public LlmClient {
 public:
  HttpLlmClient(ModelSpec spec, std::string key, RetryPolicy policy, std::function<void(double)> sleep)
      : spec_(std::move(spec)), key_(std::move(key)), policy_(policy), sleep_(std::move(sleep)) {
    if (!sleep_) sleep_ = cancellable_sleep;  // Ctrl-C does not wait out a back-off
  }

  const std::string& model() const override { return spec_.text; }

  LlmResponse complete(const LlmRequest& request) override {
    LlmResponse out;
    out.model = spec_.text;
    json body = build_request_body(spec_, request, &out.dropped);
    if (!out.dropped.empty() && !warned_dropped_.exchange(true)) {
      // Once per client: the same adjustment applies to every call of this model.
      std::string list;
      for (auto& d : out.dropped) list += (list.empty() ? "" : "; ") + d;
      log::info("llm {}: {}", spec_.text, list);
    }
    const std::string payload = body.dump();
    const std::string url = spec_.endpoint();
    const std::vector<std::string> headers = auth_headers();
    auto t0 = std::chrono::steady_clock::now();
    int timeouts = 0;
    for (int attempt = 0;; ++attempt) {
      out.attempts = attempt + 1;
      HttpResponse http = http_post(url, headers, payload, policy_.timeout_s, policy_.limits);
      std::optional<double> retry_after;
      std::string kind = failure_kind(http), message;
      if (kind.empty()) {
        LlmResponse parsed = out;
        parse_response_body(spec_.protocol, http.body, parsed);
        if (parsed.error_kind.empty() || parsed.error_kind != "malformed") {
          parsed.latency_s = seconds_since(t0);
          parsed.error = redact(parsed.error);
          return parsed;
        }
        kind = parsed.error_kind;
        message = parsed.error;
      } else if (http.status == 0) {
        message = kind == "timeout" && !http.too_large && http.transport_error.find("stopped") == std::string::npos
                      ? "no answer within " + fmt_seconds(policy_.timeout_s)
                      : http.transport_error;
      } else {
        message = "HTTP " + std::to_string(http.status) + ": " + shorten(trimmed(http.body));
        if (auto it = http.headers.find("retry-after"); it != http.headers.end())
          retry_after = parse_retry_after(it->second);
      }
      message = redact(message);
      if (kind == "auth") {
        report_auth_failure({spec_.text, spec_.key_env, message});
      }
      if (kind == "timeout") ++timeouts;
      // A stalled endpoint is asked again only max_timeout_retries times: each try costs a whole
      // request timeout.
      bool retryable = is_retryable(kind) && !(kind == "timeout" && timeouts > policy_.max_timeout_retries);
      if (!retryable || attempt >= policy_.max_retries || requests_cancelled()) {
        out.error_kind = requests_cancelled() && kind != "auth" ? "cancelled" : kind;
        out.error = out.error_kind == "cancelled" && kind != "cancelled" ? "cancelled (" + message + ")" : message;
        out.latency_s = seconds_since(t0);
        if (retry_after) out.retry_after_s = *retry_after;
        return out;
      }
      out.retried_errors.push_back(kind);
      double delay = std::min(policy_.backoff_max_s, policy_.backoff_base_s * std::pow(2.0, attempt)) * jitter();
      if (retry_after) delay = std::min(*retry_after, policy_.retry_after_max_s);
      log::warn("llm {}: {} ({}); retry {}/{} in {:.1f}s", spec_.text, kind, shorten(message, 160), attempt + 1,
                policy_.max_retries, delay);
      sleep_(delay);
    }
  }

 private:
  static double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  static std::string fmt_seconds(double s) { return fmt::format("{:.1f}s", s); }

  std::vector<std::string> auth_headers() const {
    std::vector<std::string> h = {"Content-Type: application/json"};
    if (spec_.protocol == ApiProtocol::AnthropicMessages) {
      h.push_back("anthropic-version: 2023-06-01");
      if (!key_.empty()) h.push_back("x-api-key: " + key_);
    } else if (spec_.provider == "azure") {
      if (!key_.empty()) h.push_back("api-key: " + key_);
    } else if (!key_.empty()) {
      h.push_back("Authorization: Bearer " + key_);
    }
    return h;
  }

  ModelSpec spec_;
  std::string key_;
  RetryPolicy policy_;
  std::function<void(double)> sleep_;
  std::atomic<bool> warned_dropped_{false};
};

}  // namespace

json to_json(const LlmRequest& r) {
  json msgs = json::array();
  for (auto& m : r.messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
  json j = {{"system", r.system},         {"messages", msgs},           {"max_tokens", r.max_tokens},
            {"purpose", r.purpose},       {"replay_key", r.replay_key}, {"generation", r.generation},
            {"extra", r.extra}};
  j["temperature"] = r.temperature ? json(*r.temperature) : json(nullptr);
  return j;
}

json to_json(const LlmResponse& r) {
  return {{"text", r.text},
          {"model", r.model},
          {"tokens_in", r.tokens_in},
          {"tokens_out", r.tokens_out},
          {"finish_reason", r.finish_reason},
          {"error_kind", r.error_kind},
          {"error", r.error},
          {"retried_errors", r.retried_errors},
          {"dropped", r.dropped},
          {"attempts", r.attempts},
          {"latency_s", r.latency_s}};
}

LlmResponse response_from_json(const json& j) {
  LlmResponse r;
  r.text = j.value("text", "");
  r.model = j.value("model", "");
  r.tokens_in = j.value("tokens_in", std::int64_t{0});
  r.tokens_out = j.value("tokens_out", std::int64_t{0});
  r.finish_reason = j.value("finish_reason", "");
  r.error_kind = j.value("error_kind", "");
  r.error = j.value("error", "");
  r.retried_errors = j.value("retried_errors", std::vector<std::string>{});
  r.dropped = j.value("dropped", std::vector<std::string>{});
  r.attempts = j.value("attempts", 0);
  r.latency_s = j.value("latency_s", 0.0);
  return r;
}

json build_request_body(const ModelSpec& spec, const LlmRequest& request, std::vector<std::string>* dropped) {
  auto note = [&](std::string what) {
    if (dropped) dropped->push_back(std::move(what));
  };
  json body = json::object();
  json messages = json::array();
  std::optional<double> temperature = request.temperature;
  int max_tokens = request.max_tokens;
  json extra = request.extra.is_object() ? request.extra : json::object();

  if (spec.protocol == ApiProtocol::AnthropicMessages) {
    for (const char* k : {"reasoning_effort", "max_completion_tokens", "frequency_penalty", "presence_penalty", "seed"})
      if (extra.erase(k)) note(std::string(k) + " dropped (not an Anthropic parameter)");
    if (temperature && *temperature > 1.0) {
      note("temperature " + std::to_string(*temperature).substr(0, 4) + " clamped to 1.0 (Anthropic range)");
      temperature = 1.0;
    }
    if (extra.contains("thinking") && extra["thinking"].is_object() && extra["thinking"].value("type", "") == "enabled") {
      if (temperature) note("temperature dropped (extended thinking fixes it to 1)");
      temperature.reset();
      if (extra.erase("top_p")) note("top_p dropped (extended thinking)");
      int budget = extra["thinking"].value("budget_tokens", 0);
      if (max_tokens <= budget) {
        note("max_tokens raised from " + std::to_string(max_tokens) + " to " + std::to_string(budget + max_tokens) +
             " (must exceed the thinking budget)");
        max_tokens += budget;
      }
    }
    body = extra;
    body["model"] = spec.model;
    if (!request.system.empty()) body["system"] = request.system;
    for (auto& m : request.messages) messages.push_back({{"role", m.role}, {"content", m.content}});
    body["messages"] = messages;
    body["max_tokens"] = max_tokens;
    if (temperature) body["temperature"] = *temperature;
    return body;
  }

  if (extra.erase("thinking")) note("thinking dropped (Anthropic-only parameter)");
  const bool reasoning = spec.is_reasoning_model();
  if (reasoning) {
    if (temperature) note("temperature dropped (reasoning model)");
    temperature.reset();
    for (const char* k : {"top_p", "presence_penalty", "frequency_penalty"})
      if (extra.erase(k)) note(std::string(k) + " dropped (reasoning model)");
    note("max_tokens sent as max_completion_tokens (reasoning model)");
  } else if (extra.erase("reasoning_effort")) {
    note("reasoning_effort dropped (not a reasoning model)");
  }
  body = extra;
  body["model"] = spec.model;
  if (!request.system.empty()) messages.push_back({{"role", "system"}, {"content", request.system}});
  for (auto& m : request.messages) messages.push_back({{"role", m.role}, {"content", m.content}});
  body["messages"] = messages;
  body[reasoning ? "max_completion_tokens" : "max_tokens"] = max_tokens;
  if (temperature) body["temperature"] = *temperature;
  return body;
}

void parse_response_body(ApiProtocol protocol, const std::string& body, LlmResponse& out) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    out.error_kind = "malformed";
    out.error = "answer is not valid JSON (" + std::to_string(body.size()) + " bytes): " + shorten(body, 160);
    return;
  }
  try {
    std::string refusal;
    if (protocol == ApiProtocol::AnthropicMessages) {
      if (!j.contains("content") || !j["content"].is_array()) throw std::runtime_error("no content array");
      for (auto& block : j["content"])
        if (block.value("type", "") == "text") out.text += block.value("text", "");
      out.finish_reason = j.value("stop_reason", "");
      if (j.contains("usage") && j["usage"].is_object()) {
        out.tokens_in = j["usage"].value("input_tokens", std::int64_t{0});
        out.tokens_out = j["usage"].value("output_tokens", std::int64_t{0});
      }
      if (out.finish_reason == "refusal") refusal = "stop_reason refusal";
    } else {
      if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty())
        throw std::runtime_error("no choices");
      auto& choice = j["choices"][0];
      auto& message = choice.at("message");
      if (message.contains("content") && message["content"].is_string()) out.text = message["content"];
      if (message.contains("refusal") && message["refusal"].is_string()) refusal = message["refusal"];
      out.finish_reason = choice.contains("finish_reason") && choice["finish_reason"].is_string()
                              ? choice["finish_reason"].get<std::string>()
                              : "";
      if (out.finish_reason == "content_filter" && refusal.empty()) refusal = "finish_reason content_filter";
      if (j.contains("usage") && j["usage"].is_object()) {
        out.tokens_in = j["usage"].value("prompt_tokens", std::int64_t{0});
        out.tokens_out = j["usage"].value("completion_tokens", std::int64_t{0});
      }
    }
    if (!refusal.empty()) {
      out.error_kind = "refusal";
      out.error = "model refused: " + shorten(refusal, 200);
    } else if (trimmed(out.text).empty()) {
      out.error_kind = "empty";
      out.error = "model returned no text (finish_reason '" + out.finish_reason + "')";
    } else if (looks_like_refusal(trimmed(out.text))) {
      out.error_kind = "refusal";
      out.error = "model refused: " + shorten(trimmed(out.text), 200);
    }
  } catch (const std::exception& e) {
    out.error_kind = "malformed";
    out.error = std::string("answer JSON has an unexpected shape (") + e.what() + "): " + shorten(body, 160);
  }
}

std::optional<double> parse_retry_after(const std::string& value) {
  std::string v = trimmed(value);
  if (v.empty()) return std::nullopt;
  try {
    std::size_t used = 0;
    double s = std::stod(v, &used);
    if (used == v.size() && s >= 0) return s;
  } catch (...) {
  }
  std::tm tm{};
  if (strptime(v.c_str(), "%a, %d %b %Y %H:%M:%S", &tm) != nullptr) {
    double delta = std::difftime(timegm(&tm), std::time(nullptr));
    return std::max(0.0, delta);
  }
  return std::nullopt;
}

std::unique_ptr<LlmClient> make_http_client(const ModelSpec& spec, std::string api_key, RetryPolicy policy,
                                            std::function<void(double)> sleep) {
  return std::make_unique<HttpLlmClient>(spec, std::move(api_key), policy, std::move(sleep));
}

}  // namespace braid::llm
