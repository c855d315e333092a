// Google Gemini's native API (generateContent): the request body, the answer, and the errors
// that Gemini words its own way. The transport, retries and key handling are client.cpp's.
//
// Request: contents[{role user|model, parts[{text}]}], systemInstruction{parts[{text}]},
// generationConfig{temperature, maxOutputTokens, ...}. Answer: candidates[0].content.parts[].text
// (parts marked "thought" are the model's reasoning, not its answer), usage from usageMetadata.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "braid/llm/client.hpp"

namespace braid::llm {

// llm_kwargs in OpenAI's words (top_p, top_k, seed, stop, presence_penalty, frequency_penalty,
// thinking_budget) are renamed to Gemini's; other keys go into generationConfig as written, so
// Gemini's own names (candidateCount, thinkingConfig, ...) pass through. `thinking` (Anthropic)
// and `reasoning_effort` are dropped and named in `dropped`.
json gemini_request_body(const LlmRequest& request, std::vector<std::string>* dropped);

// Fills text, finish_reason and tokens of `out` from a 200 answer; returns a refusal reason
// ("" when none): a blocked prompt or a candidate stopped for safety. Throws std::exception on
// an unexpected shape.
std::string parse_gemini_answer(const json& answer, LlmResponse& out);

// Gemini answers a key it does not know with 400 INVALID_ARGUMENT, reason API_KEY_INVALID.
bool gemini_key_rejected(long status, const std::string& body);

// The delay of a RetryInfo detail ("retryDelay": "13s") in an error body; Gemini's 429 carries
// it there instead of a Retry-After header.
std::optional<double> gemini_retry_delay(const std::string& body);

}  // namespace braid::llm
