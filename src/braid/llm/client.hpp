// LlmClient: one chat exchange with a model. Every failure is a value with a kind, so the
// search counts it and goes on; nothing here throws once the client exists.
//
// Error kinds (also the keys of the "errors" totals): rate_limited (429), server_error (5xx),
// timeout, connection (reset, refused, empty reply), malformed (unparsable or truncated JSON),
// too_large (answer over the size cap: not retried), auth (401/403: not retried, ends the run,
// see http.hpp), cancelled (Ctrl-C or a rejected key), http_error (other 4xx: not retried),
// empty (no text), refusal, replay_missing, budget, command_failed (a command: provider's program
// exited non-zero or was killed: not retried).
// The mutator adds no_patch (an answer without a patch).
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "braid/llm/http.hpp"
#include "braid/llm/model_spec.hpp"
#include "braid/llm/sigv4.hpp"
#include "braid/util/json.hpp"

namespace braid::llm {

struct ChatMessage {
  std::string role;  // "user" | "assistant"
  std::string content;
};

struct LlmRequest {
  std::string system;
  std::vector<ChatMessage> messages;
  std::optional<double> temperature;
  int max_tokens = 4096;
  json extra = json::object();  // llm_kwargs passed through (top_p, reasoning_effort, thinking, ...)
  std::string purpose;          // mutate | feedback | meta | novelty: recorded with the call
  std::string replay_key;       // stable name of this request within a run ("mutate/g12/a0")
  std::int64_t generation = -1;
};

struct LlmResponse {
  std::string text;
  std::string model;               // model string of the client that answered
  std::int64_t tokens_in = 0;
  std::int64_t tokens_out = 0;
  std::string finish_reason;
  std::string error_kind;          // "" when ok
  std::string error;               // readable, keys redacted
  std::vector<std::string> retried_errors;  // kinds of attempts that failed and were retried
  std::vector<std::string> dropped;         // parameters changed to suit the model
  int attempts = 0;
  double latency_s = 0.0;
  double retry_after_s = -1.0;              // the server's Retry-After on the last failed attempt; < 0: none
  bool ok() const { return error_kind.empty(); }
};

json to_json(const LlmRequest& r);
json to_json(const LlmResponse& r);
LlmResponse response_from_json(const json& j);

class LlmClient {
 public:
  virtual ~LlmClient() = default;
  virtual LlmResponse complete(const LlmRequest& request) = 0;
  virtual const std::string& model() const = 0;
};

struct RetryPolicy {
  int max_retries = 4;            // further attempts after the first
  int max_timeout_retries = 1;    // of those, after a timeout (each costs a whole timeout_s)
  double timeout_s = 120.0;       // per request
  double backoff_base_s = 1.0;    // delay before retry i: base * 2^i, scaled by jitter in [0.5, 1]
  double backoff_max_s = 60.0;
  double retry_after_max_s = 300.0;  // a server's Retry-After is honoured up to this
  HttpLimits limits;                 // answer size cap, connect and stall timeouts
};

// Client for the model's HTTP protocol (OpenAI chat completions, Anthropic Messages, Gemini,
// Bedrock) with retries on 429, 5xx, resets, timeouts and malformed bodies. `api_key` may be
// empty for servers that need none; Bedrock signs with `aws` instead. `sleep` is replaceable so
// tests can observe back-off delays.
std::unique_ptr<LlmClient> make_http_client(const ModelSpec& spec, std::string api_key, RetryPolicy policy,
                                            std::function<void(double)> sleep = {}, AwsCredentials aws = {});

// The client for any model string (HTTP providers and command:), with its credentials taken
// from the environment (secrets.hpp; each variable is registered as a secret so no child
// process inherits it). Throws UserError naming the variable when a needed key is not set.
std::unique_ptr<LlmClient> make_client(const ModelSpec& spec, RetryPolicy policy, std::function<void(double)> sleep = {});

// One try of a request, for complete_with_retries: `kind` "" means `response` holds the read
// answer (ok, or an answer-level failure such as refusal or empty, which are not retried).
struct Attempt {
  LlmResponse response;
  std::string kind;
  std::string message;
  std::optional<double> retry_after;
};

// The retry loop every client shares: calls `attempt_once` (given `out` with attempts and
// retried kinds so far) until it succeeds, fails in a way not retried, or retries run out;
// back-off with jitter, Retry-After honoured, messages redacted, a rejected key reported
// (report_auth_failure with `key_name`).
LlmResponse complete_with_retries(const std::string& model, const std::string& key_name, const RetryPolicy& policy,
                                  std::function<void(double)> sleep, LlmResponse out,
                                  const std::function<Attempt(const LlmResponse& base)>& attempt_once);

// Sets error_kind empty / refusal on answer text that is blank or a short refusal.
void classify_answer_text(LlmResponse& out);

// The request body as sent to `spec`'s protocol, and the list of parameters dropped or
// changed on the way (reasoning models: temperature dropped, max_completion_tokens; extended
// thinking: temperature fixed to 1). Exposed for tests.
json build_request_body(const ModelSpec& spec, const LlmRequest& request, std::vector<std::string>* dropped);

// Parses a 200 body of `protocol` into `out` (text, tokens, finish reason, refusal, empty).
void parse_response_body(ApiProtocol protocol, const std::string& body, LlmResponse& out);

// Delay in seconds named by a Retry-After header (delta seconds or HTTP date); nullopt if unreadable.
std::optional<double> parse_retry_after(const std::string& value);

}  // namespace braid::llm
