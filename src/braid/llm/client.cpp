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

#include "braid/llm/gemini.hpp"
#include "braid/llm/http.hpp"
#include "braid/llm/secrets.hpp"
#include "braid/llm/sigv4.hpp"
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
  HttpLlmClient(ModelSpec spec, std::string key, RetryPolicy policy, std::function<void(double)> sleep,
                AwsCredentials aws)
      : spec_(std::move(spec)), key_(std::move(key)), aws_(std::move(aws)), policy_(policy), sleep_(std::move(sleep)) {}

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
    const std::string key_name = spec_.provider == "bedrock" ? "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY" : spec_.key_env;
    return complete_with_retries(spec_.text, key_name, policy_, sleep_, out, [&](const LlmResponse& base) {
      // Headers per attempt: a SigV4 signature holds the time and expires after 5 minutes.
      HttpResponse http = http_post(url, request_headers(url, payload), payload, policy_.timeout_s, policy_.limits);
      return read_attempt(http, base);
    });
  }

 private:
  Attempt read_attempt(const HttpResponse& http, const LlmResponse& base) const {
    Attempt a;
    a.kind = failure_kind(http);
    if (spec_.protocol == ApiProtocol::Gemini && gemini_key_rejected(http.status, http.body)) a.kind = "auth";
    if (a.kind.empty()) {
      a.response = base;
      parse_response_body(spec_.protocol, http.body, a.response);
      if (a.response.error_kind != "malformed") return a;
      a.kind = a.response.error_kind;
      a.message = a.response.error;
    } else if (http.status == 0) {
      a.message = a.kind == "timeout" && !http.too_large && http.transport_error.find("stopped") == std::string::npos
                      ? fmt::format("no answer within {:.1f}s", policy_.timeout_s)
                      : http.transport_error;
    } else {
      a.message = "HTTP " + std::to_string(http.status) + ": " + shorten(trimmed(http.body));
      if (auto it = http.headers.find("retry-after"); it != http.headers.end())
        a.retry_after = parse_retry_after(it->second);
      if (!a.retry_after && spec_.protocol == ApiProtocol::Gemini) a.retry_after = gemini_retry_delay(http.body);
    }
    return a;
  }

  std::vector<std::string> request_headers(const std::string& url, const std::string& payload) const {
    std::vector<std::string> h = {"Content-Type: application/json"};
    if (spec_.provider == "bedrock") {
      for (auto& [name, value] : sigv4_headers(url, payload)) h.push_back(name + ": " + value);
    } else if (spec_.protocol == ApiProtocol::AnthropicMessages) {
      h.push_back("anthropic-version: 2023-06-01");
      if (!key_.empty()) h.push_back("x-api-key: " + key_);
    } else if (spec_.protocol == ApiProtocol::Gemini) {
      if (!key_.empty()) h.push_back("x-goog-api-key: " + key_);
    } else if (spec_.provider == "azure") {
      if (!key_.empty()) h.push_back("api-key: " + key_);
    } else if (!key_.empty()) {
      h.push_back("Authorization: Bearer " + key_);
    }
    return h;
  }

  // Host, x-amz-date, x-amz-security-token and Authorization for a Bedrock request. The Host
  // header is set here so the value signed is the value sent.
  std::vector<std::pair<std::string, std::string>> sigv4_headers(const std::string& url, const std::string& payload) const {
    SigV4Request r;
    r.path = url_path(url);
    r.payload = payload;
    r.region = spec_.region;
    r.service = "bedrock";
    r.amz_date = amz_date_now();
    r.headers = {{"Content-Type", "application/json"}, {"Host", url_host(url)}, {"X-Amz-Date", r.amz_date}};
    if (!aws_.session_token.empty()) r.headers.emplace_back("X-Amz-Security-Token", aws_.session_token);
    std::vector<std::pair<std::string, std::string>> out(r.headers.begin() + 1, r.headers.end());
    out.emplace_back("Authorization", sigv4_authorization(r, aws_));
    return out;
  }

  // "http://host:port/a/b" -> "host:port" and "/a/b" (the URL was checked when parsed).
  static std::string url_host(const std::string& url) {
    std::size_t start = url.find("://") + 3;
    return url.substr(start, url.find('/', start) - start);
  }
  static std::string url_path(const std::string& url) {
    std::size_t slash = url.find('/', url.find("://") + 3);
    return slash == std::string::npos ? "/" : url.substr(slash, url.find('?', slash) - slash);
  }

  ModelSpec spec_;
  std::string key_;
  AwsCredentials aws_;
  RetryPolicy policy_;
  std::function<void(double)> sleep_;
  std::atomic<bool> warned_dropped_{false};
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

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

  if (spec.protocol == ApiProtocol::Gemini) return gemini_request_body(request, dropped);
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
    // Bedrock names the model in the URL and the API version in the body.
    if (spec.provider == "bedrock") body["anthropic_version"] = "bedrock-2023-05-31";
    else body["model"] = spec.model;
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
    if (protocol == ApiProtocol::Gemini) {
      refusal = parse_gemini_answer(j, out);
    } else if (protocol == ApiProtocol::AnthropicMessages) {
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
    } else {
      classify_answer_text(out);
    }
  } catch (const std::exception& e) {
    out.error_kind = "malformed";
    out.error = std::string("answer JSON has an unexpected shape (") + e.what() + "): " + shorten(body, 160);
  }
}

void classify_answer_text(LlmResponse& out) {
  if (trimmed(out.text).empty()) {
    out.error_kind = "empty";
    out.error = "model returned no text (finish_reason '" + out.finish_reason + "')";
  } else if (looks_like_refusal(trimmed(out.text))) {
    out.error_kind = "refusal";
    out.error = "model refused: " + shorten(trimmed(out.text), 200);
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

LlmResponse complete_with_retries(const std::string& model, const std::string& key_name, const RetryPolicy& policy,
                                  std::function<void(double)> sleep, LlmResponse out,
                                  const std::function<Attempt(const LlmResponse& base)>& attempt_once) {
  if (!sleep) sleep = cancellable_sleep;  // Ctrl-C does not wait out a back-off
  const auto t0 = std::chrono::steady_clock::now();
  int timeouts = 0;
  for (int attempt = 0;; ++attempt) {
    out.attempts = attempt + 1;
    Attempt a = attempt_once(out);
    if (a.kind.empty()) {
      a.response.attempts = out.attempts;
      a.response.retried_errors = out.retried_errors;
      a.response.latency_s = seconds_since(t0);
      a.response.error = redact(a.response.error);
      return a.response;
    }
    const std::string kind = a.kind, message = redact(a.message);
    if (kind == "auth") report_auth_failure({model, key_name, message});
    if (kind == "timeout") ++timeouts;
    // A stalled endpoint is asked again only max_timeout_retries times: each try costs a whole
    // request timeout.
    bool retryable = is_retryable(kind) && !(kind == "timeout" && timeouts > policy.max_timeout_retries);
    if (!retryable || attempt >= policy.max_retries || requests_cancelled()) {
      out.error_kind = requests_cancelled() && kind != "auth" ? "cancelled" : kind;
      out.error = out.error_kind == "cancelled" && kind != "cancelled" ? "cancelled (" + message + ")" : message;
      out.latency_s = seconds_since(t0);
      if (a.retry_after) out.retry_after_s = *a.retry_after;  // the proposal pool waits it out
      return out;
    }
    out.retried_errors.push_back(kind);
    double delay = std::min(policy.backoff_max_s, policy.backoff_base_s * std::pow(2.0, attempt)) * jitter();
    if (a.retry_after) delay = std::min(*a.retry_after, policy.retry_after_max_s);
    log::warn("llm {}: {} ({}); retry {}/{} in {:.1f}s", model, kind, shorten(message, 160), attempt + 1,
              policy.max_retries, delay);
    sleep(delay);
  }
}

std::unique_ptr<LlmClient> make_http_client(const ModelSpec& spec, std::string api_key, RetryPolicy policy,
                                            std::function<void(double)> sleep, AwsCredentials aws) {
  return std::make_unique<HttpLlmClient>(spec, std::move(api_key), policy, std::move(sleep), std::move(aws));
}

}  // namespace braid::llm
