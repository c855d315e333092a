#include "braid/llm/gemini.hpp"

#include <map>
#include <stdexcept>

namespace braid::llm {

json gemini_request_body(const LlmRequest& request, std::vector<std::string>* dropped) {
  auto note = [&](std::string what) {
    if (dropped) dropped->push_back(std::move(what));
  };
  static const std::map<std::string, std::string> renamed = {
      {"top_p", "topP"}, {"top_k", "topK"}, {"seed", "seed"}, {"stop", "stopSequences"},
      {"presence_penalty", "presencePenalty"}, {"frequency_penalty", "frequencyPenalty"},
      {"max_completion_tokens", "maxOutputTokens"}};
  json config = json::object();
  if (request.extra.is_object()) {
    for (auto& [key, value] : request.extra.items()) {
      if (key == "thinking" || key == "reasoning_effort") {
        note(key + " dropped (not a Gemini parameter; use thinking_budget)");
      } else if (key == "thinking_budget") {
        config["thinkingConfig"]["thinkingBudget"] = value;
      } else if (auto it = renamed.find(key); it != renamed.end()) {
        config[it->second] = key == "stop" && value.is_string() ? json::array({value}) : value;
      } else {
        config[key] = value;
      }
    }
  }
  if (request.temperature) config["temperature"] = *request.temperature;
  if (!config.contains("maxOutputTokens")) config["maxOutputTokens"] = request.max_tokens;

  json contents = json::array();
  for (auto& m : request.messages)
    contents.push_back({{"role", m.role == "assistant" ? "model" : "user"}, {"parts", {{{"text", m.content}}}}});
  json body = {{"contents", contents}, {"generationConfig", config}};
  if (!request.system.empty()) body["systemInstruction"] = {{"parts", {{{"text", request.system}}}}};
  return body;
}

std::string parse_gemini_answer(const json& j, LlmResponse& out) {
  if (j.contains("usageMetadata") && j["usageMetadata"].is_object()) {
    auto& u = j["usageMetadata"];
    out.tokens_in = u.value("promptTokenCount", std::int64_t{0});
    // Thinking tokens are billed as output.
    out.tokens_out = u.value("candidatesTokenCount", std::int64_t{0}) + u.value("thoughtsTokenCount", std::int64_t{0});
  }
  const bool has_candidates = j.contains("candidates") && j["candidates"].is_array() && !j["candidates"].empty();
  if (!has_candidates) {
    if (j.contains("promptFeedback") && j["promptFeedback"].is_object() && j["promptFeedback"].contains("blockReason"))
      return "prompt blocked (" + j["promptFeedback"]["blockReason"].dump() + ")";
    throw std::runtime_error("no candidates");
  }
  auto& candidate = j["candidates"][0];
  out.finish_reason = candidate.value("finishReason", "");
  if (candidate.contains("content") && candidate["content"].contains("parts")) {
    for (auto& part : candidate["content"].at("parts"))
      if (part.contains("text") && !part.value("thought", false)) out.text += part["text"].get<std::string>();
  }
  for (const char* blocked : {"SAFETY", "PROHIBITED_CONTENT", "BLOCKLIST", "SPII", "RECITATION"})
    if (out.finish_reason == blocked) return "finishReason " + out.finish_reason;
  return "";
}

bool gemini_key_rejected(long status, const std::string& body) {
  return status == 400 && body.find("API_KEY_INVALID") != std::string::npos;
}

std::optional<double> gemini_retry_delay(const std::string& body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("error") || !j["error"].is_object() || !j["error"].contains("details") ||
      !j["error"]["details"].is_array())
    return std::nullopt;
  for (auto& d : j["error"]["details"]) {
    if (!d.is_object() || !d.contains("retryDelay") || !d["retryDelay"].is_string()) continue;
    std::string v = d["retryDelay"];
    if (v.empty() || v.back() != 's') continue;
    try {
      double s = std::stod(v.substr(0, v.size() - 1));
      if (s >= 0) return s;
    } catch (...) {
    }
  }
  return std::nullopt;
}

}  // namespace braid::llm
