#include "braid/llm/http.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <mutex>
#include <thread>

#include "braid/util/text.hpp"

namespace braid::llm {
namespace {

std::atomic<bool> g_cancel{false};
static_assert(std::atomic<bool>::is_always_lock_free, "cancel_requests() is called from a signal handler");

struct Transfer {
  HttpResponse* out;
  const HttpLimits* limits;
  std::size_t header_bytes = 0;
  curl_off_t last_bytes = 0;
  std::chrono::steady_clock::time_point last_progress = std::chrono::steady_clock::now();
  bool stalled = false;
};

std::size_t on_body(char* data, std::size_t size, std::size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::size_t bytes = size * n;
  // Decoded bytes: a small gzip answer that inflates without end stops here.
  if (t->out->body.size() + bytes > t->limits->max_body_bytes) {
    t->out->too_large = true;
    return 0;  // curl ends the transfer with CURLE_WRITE_ERROR
  }
  t->out->body.append(data, bytes);
  return bytes;
}

std::size_t on_header(char* data, std::size_t size, std::size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  t->header_bytes += size * n;
  if (t->header_bytes > t->limits->max_header_bytes) {
    t->out->too_large = true;
    return 0;
  }
  std::string line(data, size * n);
  auto colon = line.find(':');
  if (colon != std::string::npos) {
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    std::string value = line.substr(colon + 1);
    auto first = value.find_first_not_of(" \t");
    auto last = value.find_last_not_of(" \t\r\n");
    value = first == std::string::npos ? "" : value.substr(first, last - first + 1);
    t->out->headers[name] = valid_utf8(value);
  }
  return size * n;
}

// Called by curl about every second and on every chunk: cancels, and ends a body that stalls.
int on_progress(void* user, curl_off_t, curl_off_t dlnow, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  if (g_cancel.load()) return 1;
  auto now = std::chrono::steady_clock::now();
  if (dlnow != t->last_bytes) {
    t->last_bytes = dlnow;
    t->last_progress = now;
  } else if (dlnow > 0 && std::chrono::duration<double>(now - t->last_progress).count() > t->limits->stall_timeout_s) {
    t->stalled = true;
    return 1;
  }
  return 0;
}

long millis(double seconds) {
  // Settings are range-checked (at most hours); clamp anyway so no product overflows a long.
  return static_cast<long>(std::clamp(seconds, 0.001, 1e6) * 1000.0);
}

std::mutex& auth_mutex() {
  static std::mutex m;
  return m;
}
std::optional<AuthFailure>& auth_slot() {
  static std::optional<AuthFailure> f;
  return f;
}
std::function<void()>& auth_hook() {
  static std::function<void()> h;
  return h;
}

}  // namespace

HttpResponse http_post(const std::string& url, const std::vector<std::string>& headers,
                       const std::string& body, double timeout_s, const HttpLimits& limits) {
  static std::once_flag init;
  std::call_once(init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });

  HttpResponse out;
  if (g_cancel.load()) {
    out.cancelled = true;
    out.transport_error = "cancelled";
    return out;
  }
  CURL* curl = curl_easy_init();
  if (curl == nullptr) {
    out.transport_error = "curl_easy_init failed";
    return out;
  }
  Transfer transfer{&out, &limits};
  curl_slist* list = nullptr;
  for (auto& h : headers) list = curl_slist_append(list, h.c_str());
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, list);
  curl_easy_setopt(curl, CURLOPT_POST, 1L);
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &transfer);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &transfer);
  curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &transfer);
  curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
  // Compressed size, when the server announces it: refused before the body is read.
  curl_easy_setopt(curl, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(limits.max_body_bytes));
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, millis(timeout_s));
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, millis(std::min(timeout_s, limits.connect_timeout_s)));
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // timeouts without SIGALRM: safe in threads
  curl_easy_setopt(curl, CURLOPT_ACCEPT_ENCODING, "");
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  CURLcode rc = curl_easy_perform(curl);
  if (rc == CURLE_OK) {
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &out.status);
  } else {
    out.status = 0;
    if (rc == CURLE_FILESIZE_EXCEEDED) out.too_large = true;
    out.cancelled = rc == CURLE_ABORTED_BY_CALLBACK && !transfer.stalled;
    out.timed_out = rc == CURLE_OPERATION_TIMEDOUT || transfer.stalled;
    out.transport_error = out.too_large   ? "answer larger than " + std::to_string(limits.max_body_bytes >> 20) + " MiB (cut off)"
                          : transfer.stalled ? "answer stopped arriving for " + std::to_string(int(limits.stall_timeout_s)) + " s"
                          : out.cancelled    ? "cancelled"
                                             : curl_easy_strerror(rc);
    out.body.clear();
  }
  curl_slist_free_all(list);
  curl_easy_cleanup(curl);
  out.body = valid_utf8(out.body);  // Latin-1 error pages, stray bytes: JSON-safe from here on
  return out;
}

void cancel_requests() { g_cancel.store(true); }
bool requests_cancelled() { return g_cancel.load(); }
const std::atomic<bool>& cancel_flag() { return g_cancel; }
void reset_cancel() { g_cancel.store(false); }

void cancellable_sleep(double seconds) {
  using clock = std::chrono::steady_clock;
  const auto until = clock::now() + std::chrono::duration_cast<clock::duration>(
                                        std::chrono::duration<double>(std::clamp(seconds, 0.0, 1e6)));
  while (!g_cancel.load() && clock::now() < until)
    std::this_thread::sleep_for(std::min<clock::duration>(std::chrono::milliseconds(50), until - clock::now()));
}

std::string failure_kind(const HttpResponse& r) {
  if (r.cancelled) return "cancelled";
  if (r.too_large) return "too_large";
  if (r.status == 0) return r.timed_out ? "timeout" : "connection";
  if (r.status == 200) return "";
  if (r.status == 401 || r.status == 403) return "auth";
  if (r.status == 429) return "rate_limited";
  if (r.status == 408) return "timeout";
  if (r.status >= 500) return "server_error";
  return "http_error";
}

bool is_retryable(const std::string& kind) {
  return kind == "rate_limited" || kind == "server_error" || kind == "timeout" || kind == "connection" ||
         kind == "malformed";
}

void report_auth_failure(AuthFailure failure) {
  std::function<void()> hook;
  {
    std::lock_guard lock(auth_mutex());
    if (auth_slot()) return;
    auth_slot() = std::move(failure);
    hook = auth_hook();
  }
  cancel_requests();
  if (hook) hook();
}

std::optional<AuthFailure> auth_failure() {
  std::lock_guard lock(auth_mutex());
  return auth_slot();
}

void set_auth_failure_hook(std::function<void()> hook) {
  std::lock_guard lock(auth_mutex());
  auth_hook() = std::move(hook);
}

void clear_auth_failure() {
  std::lock_guard lock(auth_mutex());
  auth_slot().reset();
}

}  // namespace braid::llm
