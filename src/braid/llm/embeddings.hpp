// API embeddings (OpenAI-compatible /embeddings endpoint: OpenAI, Azure, local servers), for
// the optional embedding_model. The offline hashed n-gram embedder stays the default.
#pragma once
#include <string>
#include <vector>

#include "braid/llm/client.hpp"
#include "braid/llm/model_spec.hpp"

namespace braid::llm {

struct EmbeddingResult {
  std::vector<float> vector;  // L2-normalized; empty on failure
  std::string error_kind;     // as LlmResponse
  std::string error;
  std::int64_t tokens = 0;
  bool ok() const { return error_kind.empty(); }
};

// Retries like the chat clients (429, 5xx, timeouts, resets, malformed answers).
EmbeddingResult embed_text(const ModelSpec& spec, const std::string& api_key, const RetryPolicy& policy,
                           const std::string& text);

std::string embeddings_endpoint(const ModelSpec& spec);

}  // namespace braid::llm
