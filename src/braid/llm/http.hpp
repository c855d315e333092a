// One HTTP POST over libcurl with a whole-request timeout. Transport failures are values.
//
// Limits against a hostile or broken endpoint (docs/search-config.md, "Reliability"):
//   - the answer is capped: a Content-Length above max_body_bytes is refused before the body is
//     read (CURLOPT_MAXFILESIZE), and the decoded body (after gzip/deflate) is cut off at
//     max_body_bytes in the write callback, so a compression bomb never grows past the cap;
//   - the body is made valid UTF-8 (bad bytes become U+FFFD) before anyone parses or logs it;
//   - connect_timeout_s to establish the connection; once the answer has begun, a body that
//     stops flowing for stall_timeout_s ends the request (the model's thinking time before the
//     first byte is bounded by the whole-request timeout only);
//   - cancel_requests() ends every request in flight within ~100 ms (Ctrl-C, a rejected key).
#pragma once
#include <atomic>
#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace braid::llm {

struct HttpLimits {
  std::size_t max_body_bytes = std::size_t(8) << 20;  // 8 MiB: ~2M tokens of text
  std::size_t max_header_bytes = std::size_t(256) << 10;
  double connect_timeout_s = 10.0;
  double stall_timeout_s = 60.0;
};

struct HttpResponse {
  long status = 0;                             // 0 when no HTTP response arrived
  std::string body;                            // valid UTF-8
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string transport_error;                 // curl's message when status == 0
  bool timed_out = false;
  bool too_large = false;                      // body or headers over the limits: cut off
  bool cancelled = false;                      // cancel_requests() ended it
};

// `headers` are "Name: value" lines; they may hold keys and are never logged.
HttpResponse http_post(const std::string& url, const std::vector<std::string>& headers,
                       const std::string& body, double timeout_s, const HttpLimits& limits = {});

// Ends every request in flight and makes new ones return at once (cancelled), until
// reset_cancel(). Async-signal-safe: a SIGINT handler may call it.
void cancel_requests();
bool requests_cancelled();
const std::atomic<bool>& cancel_flag();  // for SubprocessOptions::stop (the command: provider)
void reset_cancel();
// Sleeps `seconds`, waking early when requests are cancelled (retry back-off).
void cancellable_sleep(double seconds);

// The failure kind of a response (client.hpp lists them); "" for a 200 whose body is to be read.
std::string failure_kind(const HttpResponse& r);
// Whether a request that failed with `kind` may succeed when sent again.
bool is_retryable(const std::string& kind);

// A key the endpoint refuses (HTTP 401/403) ends the whole run: no later request can succeed.
// The first refusal of the process is kept, every request is cancelled, and the hook set by the
// CLI (which stops the search and names the key's variable) is called once.
struct AuthFailure {
  std::string model;
  std::string key_env;  // "" when the model needs no key
  std::string detail;   // "HTTP 401: ..." with keys redacted
};
void report_auth_failure(AuthFailure failure);
std::optional<AuthFailure> auth_failure();
void set_auth_failure_hook(std::function<void()> hook);
void clear_auth_failure();  // tests, and a fresh run in one process

}  // namespace braid::llm
