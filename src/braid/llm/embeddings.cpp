#include "braid/llm/embeddings.hpp"

#include "braid/util/text.hpp"

#include <chrono>
#include <cmath>
#include <thread>

#include "braid/llm/http.hpp"
#include "braid/llm/secrets.hpp"

namespace braid::llm {

std::string embeddings_endpoint(const ModelSpec& spec) {
  if (spec.provider == "azure") {
    std::string url = spec.base_url + "/openai/deployments/" + spec.model + "/embeddings";
    if (!spec.api_version.empty()) url += "?api-version=" + spec.api_version;
    return url;
  }
  return spec.base_url + "/embeddings";
}

EmbeddingResult embed_text(const ModelSpec& spec, const std::string& api_key, const RetryPolicy& policy,
                           const std::string& text) {
  EmbeddingResult out;
  if (spec.protocol != ApiProtocol::OpenAiChat) {
    out.error_kind = "http_error";
    out.error = spec.text + ": embeddings need an OpenAI-compatible provider";
    return out;
  }
  std::vector<std::string> headers = {"Content-Type: application/json"};
  if (!api_key.empty())
    headers.push_back(spec.provider == "azure" ? "api-key: " + api_key : "Authorization: Bearer " + api_key);
  const std::string body = json{{"model", spec.model}, {"input", text}}.dump();
  for (int attempt = 0;; ++attempt) {
    HttpResponse http = http_post(embeddings_endpoint(spec), headers, body, policy.timeout_s, policy.limits);
    std::string kind = failure_kind(http), message;
    if (kind.empty()) {
      json j = json::parse(http.body, nullptr, false);
      if (!j.is_discarded() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
          j["data"][0].contains("embedding") && j["data"][0]["embedding"].is_array()) {
        double norm = 0;
        for (auto& v : j["data"][0]["embedding"]) {
          float f = v.is_number() ? v.get<float>() : 0.0f;
          out.vector.push_back(f);
          norm += double(f) * f;
        }
        norm = std::sqrt(norm);
        if (norm > 0)
          for (auto& f : out.vector) f = static_cast<float>(f / norm);
        if (j.contains("usage") && j["usage"].is_object()) out.tokens = j["usage"].value("prompt_tokens", std::int64_t{0});
        return out;
      }
      kind = "malformed";
      message = "embedding answer has no data[0].embedding";
    } else if (http.status == 0) {
      message = http.transport_error;
    } else {
      message = "HTTP " + std::to_string(http.status) + ": " + std::string(utf8_prefix(http.body, 300));
    }
    if (kind == "auth") report_auth_failure({spec.text, spec.key_env, redact(message)});
    if (!is_retryable(kind) || attempt >= policy.max_retries || requests_cancelled()) {
      out.error_kind = kind;
      out.error = redact(message);
      return out;
    }
    double delay = std::min(policy.backoff_max_s, policy.backoff_base_s * std::pow(2.0, attempt));
    if (auto it = http.headers.find("retry-after"); it != http.headers.end())
      if (auto ra = parse_retry_after(it->second)) delay = std::min(*ra, policy.retry_after_max_s);
    cancellable_sleep(delay);
  }
}

}  // namespace braid::llm
