// A real HTTP server on 127.0.0.1 that speaks the OpenAI chat-completions protocol (also under
// Azure's deployment path), Anthropic's Messages API (also under Bedrock's /model/<id>/invoke),
// Gemini's /v1beta/models/<model>:generateContent and /embeddings, for tests. It answers from
// the prompt it receives, like a model would: it reads the parent program shown in a mutation
// prompt and edits one of its knobs (diff, full or cross, as asked; keeping to the prompt's lists
// of one-knob changes already taken and to choose from, as a model would), writes feedback from the
// outcome it is shown, returns meta-summary JSON and novelty verdicts. Faults are injected on
// request: 429 (with Retry-After), 500, stalls, truncated or malformed JSON, empty answers,
// answers without a patch, refusals and dropped connections.
//
// A share of mutation answers first carry a line that does not compile (it uses the undeclared
// identifier braid_probe_undeclared); once a later prompt shows the real compiler error about
// that identifier, the server answers with the corrected edit instead.
#pragma once
#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace braid::testing {

// Hostile answers (issue #18): InvalidUtf8 (a 200 whose answer text holds bytes that are not
// UTF-8), Latin1BadGateway (a 502 error page in ISO-8859-1), GzipBomb (a small gzip body that
// inflates to gzip_bomb_bytes), Huge (a 200 of huge_bytes), Unauthorized (401 whatever the key).
enum class Fault {
  None, RateLimit, ServerError, Stall, Truncated, Malformed, Empty, NoPatch, Refusal, Drop,
  InvalidUtf8, Latin1BadGateway, GzipBomb, Huge, Unauthorized
};

struct ReceivedRequest {
  std::string path;    // decoded
  std::string target;  // as sent, percent-encoding kept (SigV4 signs this form)
  std::map<std::string, std::string> headers;  // names lower-cased
  nlohmann::json body;
  std::string raw_body;
};

class LoopbackLlmServer {
 public:
  LoopbackLlmServer();
  ~LoopbackLlmServer();
  LoopbackLlmServer(const LoopbackLlmServer&) = delete;
  LoopbackLlmServer& operator=(const LoopbackLlmServer&) = delete;

  int port() const { return port_; }
  std::string base_url() const;  // http://127.0.0.1:<port>/v1

  // Faults consumed one per request, in order, before `fault_plan` is asked.
  void push_faults(const std::vector<Fault>& faults);
  // Fault for the n-th request (0-based, all paths); used for fault storms in the e2e test.
  void set_fault_plan(std::function<Fault(std::size_t n)> plan);
  void set_retry_after(std::string value) { retry_after_ = std::move(value); }
  void set_stall_seconds(double s) { stall_s_ = s; }
  void set_gzip_bomb_bytes(std::size_t n) { gzip_bomb_bytes_ = n; }
  void set_huge_bytes(std::size_t n) { huge_bytes_ = n; }
  // Required key: requests without it (Authorization: Bearer, x-api-key, api-key or
  // x-goog-api-key) get 401 (Gemini: 400 API_KEY_INVALID, as Gemini answers). Bedrock requests
  // are not checked here: tests verify their SigV4 signature from requests().
  void require_key(std::string key) { key_ = std::move(key); }
  // Every n-th mutation answer (n > 0) first breaks the build; 0 = never.
  void set_break_every(int n) { break_every_ = n; }
  // Sampling, as a model at a temperature above 0: the n-th mutation answer mixes `sample(n)`
  // into its choice of knob and value, so the same prompt asked twice may get another edit (by
  // default the choice is a function of the prompt alone: the same prompt, the same edit).
  void set_sampling(std::function<std::uint64_t()> sample) { sample_ = std::move(sample); }
  // The share of mutation answers (0..1, by the prompt's hash and the sampling) that follow a
  // prompt's "Changes of one knob for you to choose from" list (or its list of two-knob changes);
  // the others choose as if it were not there. Default 1: followed as the list of taken changes is.
  void set_focus_follow(double share) { focus_follow_ = share; }
  // Fixed answer text for every chat request (overrides the prompt-driven answer).
  void set_fixed_answer(std::string text) { fixed_answer_ = std::move(text); }
  // Scripted answers (the convert rewrite loop's tests): asked first for every chat request with
  // its system text and messages; an empty optional falls back to the behaviour above. Set it
  // before the first request.
  using Responder = std::function<std::optional<std::string>(const std::string& system,
                                                             const std::vector<std::pair<std::string, std::string>>& messages)>;
  void set_responder(Responder r) { responder_ = std::move(r); }

  std::vector<ReceivedRequest> requests() const;
  std::size_t request_count() const;
  int broken_answers() const { return broken_; }
  int fixes_after_error() const { return fixes_; }
  std::map<std::string, int> answers_by_kind() const;  // "diff", "full", "cross", "feedback", ...
  std::map<std::string, int> faults_injected() const;

  // The answer the server would give to these chat messages (exposed for unit tests).
  std::string answer_for(const std::string& system, const std::vector<std::pair<std::string, std::string>>& messages);

 private:
  Fault next_fault();
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
  std::thread thread_;
  mutable std::mutex mu_;
  std::vector<ReceivedRequest> requests_;
  std::deque<Fault> faults_;
  std::function<Fault(std::size_t)> plan_;
  std::size_t served_ = 0;
  std::string retry_after_ = "0";
  double stall_s_ = 2.0;
  std::size_t gzip_bomb_bytes_ = std::size_t(64) << 20;
  std::size_t huge_bytes_ = std::size_t(24) << 20;
  std::atomic<bool> stopping_{false};  // ends stalls early so the destructor does not wait them out
  std::string key_;
  int break_every_ = 0;
  double focus_follow_ = 1.0;
  int mutations_ = 0;
  std::atomic<int> broken_{0}, fixes_{0};
  std::string fixed_answer_;
  std::function<std::uint64_t()> sample_;
  Responder responder_;
  std::map<std::string, int> answers_;
  std::map<std::string, int> injected_;
};

}  // namespace braid::testing
