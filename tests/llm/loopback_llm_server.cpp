#include "loopback_llm_server.hpp"

#include <httplib.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <regex>
#include <sstream>

namespace braid::testing {
namespace {

using nlohmann::json;

// Long enough that the candidate is not rejected as a near-duplicate of its parent.
// The mutation prompt's line when every one-knob change of the program is taken (prompts/mutate.md).
constexpr const char* kOneKnobChangesSpent = "Every change of one knob of this program has been evaluated or proposed";
constexpr const char* kProbe =
    "constexpr int kProbeStage = braid_probe_undeclared * 3 + 17 - (kProbeBias << 2) + sizeof(float) * 5 - 1;";

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

std::string trim(const std::string& s) {
  auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::uint64_t fnv(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// The first ```<language> fence after `heading` in `text`: the code a prompt shows.
std::string code_after(const std::string& text, const std::string& heading) {
  auto at = text.find(heading);
  if (at == std::string::npos) return "";
  auto lines = split_lines(text.substr(at));
  std::string code;
  bool in = false;
  for (auto& l : lines) {
    if (!in) {
      if (l.size() > 3 && l.rfind("```", 0) == 0 && std::isalpha(static_cast<unsigned char>(l[3]))) in = true;
      continue;
    }
    if (l.rfind("```", 0) == 0) break;
    code += l + "\n";
  }
  return code;
}

struct Knob {
  std::size_t line = 0;
  std::string name, value;
  std::vector<std::string> domain;
};

std::vector<Knob> knobs_of(const std::vector<std::string>& lines) {
  static const std::regex re(R"(^\s*constexpr\s+[\w:<>]+\s+(\w+)\s*=\s*([^;]+);\s*//\s*braid:knob\s*(.*)$)");
  std::vector<Knob> out;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    std::smatch m;
    if (!std::regex_match(lines[i], m, re)) continue;
    Knob k{i, m[1], trim(m[2]), {}};
    std::stringstream d(trim(m[3]));
    for (std::string v; std::getline(d, v, '|');)
      if (!trim(v).empty()) k.domain.push_back(trim(v));
    if (k.domain.empty()) k.domain = {"true", "false"};
    out.push_back(k);
  }
  return out;
}

std::string with_value(const std::string& line, const std::string& old_value, const std::string& new_value) {
  std::string out = line;
  auto p = out.find("= " + old_value + ";");
  if (p != std::string::npos) out.replace(p + 2, old_value.size(), new_value);
  return out;
}

std::string first_error_line(const std::string& text) {
  for (auto& l : split_lines(text))
    if (l.find("error") != std::string::npos) return trim(l);
  auto lines = split_lines(trim(text));
  return lines.empty() ? "" : lines.front();
}

std::string section(const std::string& text, const std::string& heading) {
  auto at = text.find(heading);
  if (at == std::string::npos) return "";
  auto rest = text.substr(at + heading.size());
  auto fence = rest.find("```");
  if (fence == std::string::npos) return "";
  auto start = rest.find('\n', fence);
  auto end = rest.find("\n```", start);
  if (start == std::string::npos || end == std::string::npos) return "";
  return rest.substr(start + 1, end - start - 1);
}

// `n` zero bytes gzip-compressed (about n / 1000 bytes): a decompression bomb.
std::string gzip_of_zeros(std::size_t n) {
  z_stream z{};
  deflateInit2(&z, Z_BEST_COMPRESSION, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY);
  std::string out;
  std::vector<unsigned char> in(1 << 20, 0), buf(1 << 16);
  std::size_t left = n;
  int flush = Z_NO_FLUSH;
  do {
    std::size_t take = std::min(left, in.size());
    left -= take;
    flush = left == 0 ? Z_FINISH : Z_NO_FLUSH;
    z.next_in = in.data();
    z.avail_in = static_cast<uInt>(take);
    do {
      z.next_out = buf.data();
      z.avail_out = static_cast<uInt>(buf.size());
      deflate(&z, flush);
      out.append(reinterpret_cast<char*>(buf.data()), buf.size() - z.avail_out);
    } while (z.avail_out == 0);
  } while (flush != Z_FINISH);
  deflateEnd(&z);
  return out;
}

}  // namespace

struct LoopbackLlmServer::Impl {
  httplib::Server server;
};

LoopbackLlmServer::LoopbackLlmServer() : impl_(std::make_unique<Impl>()) {
  auto chat = [this](const httplib::Request& req, httplib::Response& res) {
    ReceivedRequest rec;
    rec.path = req.path;
    rec.target = req.target;
    for (auto& [k, v] : req.headers) {
      std::string name = k;
      for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      rec.headers[name] = v;
    }
    rec.raw_body = req.body;
    rec.body = json::parse(req.body, nullptr, false);
    {
      std::lock_guard lock(mu_);
      requests_.push_back(rec);
    }
    const bool gemini = req.path.find(":generateContent") != std::string::npos;
    const bool bedrock = req.path.rfind("/model/", 0) == 0;
    if (!key_.empty() && !bedrock) {
      std::string given;
      if (auto it = rec.headers.find("x-goog-api-key"); it != rec.headers.end()) given = it->second;
      if (auto it = rec.headers.find("authorization"); it != rec.headers.end()) given = it->second.substr(7);
      if (auto it = rec.headers.find("x-api-key"); it != rec.headers.end()) given = it->second;
      if (auto it = rec.headers.find("api-key"); it != rec.headers.end()) given = it->second;
      if (given != key_ && gemini) {
        res.status = 400;
        res.set_content(json{{"error", {{"code", 400}, {"message", "API key not valid: " + given}, {"status", "INVALID_ARGUMENT"},
                                        {"details", {{{"@type", "type.googleapis.com/google.rpc.ErrorInfo"}, {"reason", "API_KEY_INVALID"}}}}}}}.dump(),
                        "application/json");
        return;
      }
      if (given != key_) {
        // Like real services, the message quotes the key it got: clients must redact it.
        res.status = 401;
        res.set_content(json{{"error", {{"message", "Incorrect API key provided: " + given}}}}.dump(), "application/json");
        return;
      }
    }
    const bool anthropic = req.path.find("/messages") != std::string::npos || bedrock;
    const bool embeddings = req.path.find("/embeddings") != std::string::npos;
    Fault fault = next_fault();
    switch (fault) {
      case Fault::RateLimit:
        res.status = 429;
        if (gemini) {  // Gemini names the delay in a RetryInfo detail, not in a header
          res.set_content(json{{"error", {{"code", 429}, {"status", "RESOURCE_EXHAUSTED"},
                                          {"details", {{{"@type", "type.googleapis.com/google.rpc.RetryInfo"},
                                                        {"retryDelay", retry_after_ + "s"}}}}}}}.dump(),
                          "application/json");
          return;
        }
        res.set_header("Retry-After", retry_after_);
        res.set_content(R"({"error":{"message":"Rate limit reached"}})", "application/json");
        return;
      case Fault::ServerError:
        res.status = 500;
        res.set_content(R"({"error":{"message":"internal error"}})", "application/json");
        return;
      case Fault::Stall: {
        auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(stall_s_);
        while (!stopping_ && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        break;
      }
      case Fault::Unauthorized:
        res.status = 401;
        res.set_content(R"({"error":{"message":"invalid api key"}})", "application/json");
        return;
      case Fault::Latin1BadGateway:
        // "Passerelle défectueuse" with é as the single byte 0xE9, as an old proxy sends it.
        res.status = 502;
        res.set_content(std::string("<html><body><h1>502 Passerelle d\xE9" "fectueuse</h1></body></html>"), "text/html; charset=iso-8859-1");
        return;
      case Fault::GzipBomb:
        res.status = 200;
        res.set_header("Content-Encoding", "gzip");
        res.set_content(gzip_of_zeros(gzip_bomb_bytes_), "application/octet-stream");  // httplib leaves it as is
        return;
      case Fault::Huge: {
        res.status = 200;
        std::string body = R"({"choices":[{"index":0,"message":{"role":"assistant","content":")";
        body.append(huge_bytes_, 'a');
        body += R"("},"finish_reason":"stop"}]})";
        // Not a type httplib compresses: the client sees the full Content-Length.
        res.set_content(body, "application/octet-stream");
        return;
      }
      case Fault::Malformed:
        res.status = 200;
        res.set_content("<html><body>502 Bad Gateway</body></html>", "text/html");
        return;
      case Fault::Drop:
        // Headers promise a body that never comes: the client sees the connection end early.
        res.set_content_provider(
            4096, "application/json", [](std::size_t, std::size_t, httplib::DataSink&) { return false; });
        return;
      default:
        break;
    }
    if (embeddings) {
      std::string input = rec.body.is_object() ? rec.body.value("input", "") : "";
      json vec = json::array();
      std::uint64_t h = fnv(input);
      for (int i = 0; i < 8; ++i) vec.push_back(double((h >> (i * 8)) & 0xff) / 255.0 + 0.01);
      res.set_content(json{{"data", {{{"embedding", vec}, {"index", 0}}}}, {"usage", {{"prompt_tokens", input.size() / 4}}}}.dump(),
                      "application/json");
      return;
    }
    std::string system;
    std::vector<std::pair<std::string, std::string>> messages;
    if (gemini && rec.body.is_object()) {
      if (rec.body.contains("systemInstruction")) system = rec.body["systemInstruction"]["parts"][0].value("text", "");
      for (auto& c : rec.body.value("contents", json::array()))
        messages.emplace_back(c.value("role", "") == "model" ? "assistant" : "user", c["parts"][0].value("text", ""));
    } else if (rec.body.is_object() && rec.body.contains("messages")) {
      if (anthropic) system = rec.body.value("system", "");
      for (auto& m : rec.body["messages"]) {
        if (m.value("role", "") == "system") system = m.value("content", "");
        else messages.emplace_back(m.value("role", ""), m.value("content", ""));
      }
    }
    std::string text;
    if (fault == Fault::Empty) text = "";
    else if (fault == Fault::NoPatch) text = "The program looks fine to me; I would keep it as it is.";
    else if (fault == Fault::Refusal) text = "";
    else if (std::optional<std::string> scripted = responder_ ? responder_(system, messages) : std::nullopt) text = *scripted;
    else text = fixed_answer_.empty() ? answer_for(system, messages) : fixed_answer_;
    std::size_t prompt_chars = system.size();
    for (auto& m : messages) prompt_chars += m.second.size();
    json usage_in = prompt_chars / 4 + 1, usage_out = text.size() / 4 + 1;
    json body;
    if (gemini) {
      if (fault == Fault::Refusal)
        body = {{"promptFeedback", {{"blockReason", "SAFETY"}}}, {"usageMetadata", {{"promptTokenCount", usage_in}}}};
      else
        body = {{"candidates", {{{"content", {{"role", "model"}, {"parts", {{{"text", text}}}}}}, {"finishReason", "STOP"}}}},
                {"usageMetadata", {{"promptTokenCount", usage_in}, {"candidatesTokenCount", usage_out}}}};
    } else if (anthropic) {
      body = {{"id", "msg_loopback"},
              {"type", "message"},
              {"role", "assistant"},
              {"model", rec.body.value("model", "")},
              {"content", fault == Fault::Refusal ? json::array() : json::array({{{"type", "text"}, {"text", text}}})},
              {"stop_reason", fault == Fault::Refusal ? "refusal" : "end_turn"},
              {"usage", {{"input_tokens", usage_in}, {"output_tokens", usage_out}}}};
    } else {
      json message = {{"role", "assistant"}, {"content", text}};
      if (fault == Fault::Refusal) {
        message["content"] = nullptr;
        message["refusal"] = "I can't help with that request.";
      }
      body = {{"id", "chatcmpl-loopback"},
              {"object", "chat.completion"},
              {"model", rec.body.value("model", "")},
              {"choices", {{{"index", 0}, {"message", message}, {"finish_reason", "stop"}}}},
              {"usage", {{"prompt_tokens", usage_in}, {"completion_tokens", usage_out}}}};
    }
    std::string out = body.dump();
    if (fault == Fault::Truncated) out = out.substr(0, out.size() / 2);
    if (fault == Fault::InvalidUtf8) {
      // Raw bytes that are not UTF-8 inside the answer's JSON string (a stray 0xFF, a Latin-1
      // 0xE9, a cut 3-byte sequence), as a broken proxy or model server emits them.
      const std::string key = "\"content\":\"";
      if (auto at = out.find(key); at != std::string::npos) out.insert(at + key.size(), "\xFF caf\xE9 \xE2\x82 ");
    }
    res.status = 200;
    res.set_content(out, "application/json");
  };
  impl_->server.Post("/v1/chat/completions", chat);
  impl_->server.Post("/v1/messages", chat);
  impl_->server.Post("/v1/embeddings", chat);
  impl_->server.Post(R"(/openai/deployments/([^/]+)/chat/completions)", chat);
  impl_->server.Post(R"(/openai/deployments/([^/]+)/embeddings)", chat);
  impl_->server.Post(R"(/v1beta/models/([^/]+):generateContent)", chat);
  impl_->server.Post(R"(/model/([^/]+)/invoke)", chat);
  port_ = impl_->server.bind_to_any_port("127.0.0.1");
  thread_ = std::thread([this] { impl_->server.listen_after_bind(); });
  for (int i = 0; i < 200 && !impl_->server.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

LoopbackLlmServer::~LoopbackLlmServer() {
  stopping_ = true;
  impl_->server.stop();
  if (thread_.joinable()) thread_.join();
}

std::string LoopbackLlmServer::base_url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/v1"; }

void LoopbackLlmServer::push_faults(const std::vector<Fault>& faults) {
  std::lock_guard lock(mu_);
  faults_.insert(faults_.end(), faults.begin(), faults.end());
}

void LoopbackLlmServer::set_fault_plan(std::function<Fault(std::size_t)> plan) {
  std::lock_guard lock(mu_);
  plan_ = std::move(plan);
}

Fault LoopbackLlmServer::next_fault() {
  std::lock_guard lock(mu_);
  std::size_t n = served_++;
  Fault f = Fault::None;
  if (!faults_.empty()) {
    f = faults_.front();
    faults_.pop_front();
  } else if (plan_) {
    f = plan_(n);
  }
  static const char* names[] = {"none",    "rate_limit", "server_error", "stall",        "truncated",
                                "malformed", "empty",    "no_patch",     "refusal",      "drop",
                                "invalid_utf8", "latin1_bad_gateway", "gzip_bomb", "huge", "unauthorized"};
  if (f != Fault::None) ++injected_[names[static_cast<int>(f)]];
  return f;
}

std::vector<ReceivedRequest> LoopbackLlmServer::requests() const {
  std::lock_guard lock(mu_);
  return requests_;
}

std::size_t LoopbackLlmServer::request_count() const {
  std::lock_guard lock(mu_);
  return requests_.size();
}

std::map<std::string, int> LoopbackLlmServer::answers_by_kind() const {
  std::lock_guard lock(mu_);
  return answers_;
}

std::map<std::string, int> LoopbackLlmServer::faults_injected() const {
  std::lock_guard lock(mu_);
  return injected_;
}

std::string LoopbackLlmServer::answer_for(const std::string& system,
                                          const std::vector<std::pair<std::string, std::string>>& messages) {
  std::string all;
  for (auto& m : messages) all += m.second + "\n";
  const std::string first = messages.empty() ? "" : messages.front().second;
  const std::string last = messages.empty() ? "" : messages.back().second;
  auto count = [&](const std::string& kind) {
    std::lock_guard lock(mu_);
    ++answers_[kind];
  };

  if (system.find("You review candidates") != std::string::npos) {
    count("feedback");
    std::smatch m;
    std::string outcome = "?", score = "?", parent = "?";
    static const std::regex out_re(R"(Outcome: (\w+))"), score_re(R"(Score: (\S+) \(parent: ([^\n]*)\))");
    if (std::regex_search(first, m, out_re)) outcome = m[1];
    if (std::regex_search(first, m, score_re)) {
      score = m[1];
      parent = m[2];
    }
    if (outcome == "ok")
      return "Correct. Score " + score + " against the parent's " + parent +
             "; keep the knob change if it helped and try the neighbouring value next.";
    std::string err = first_error_line(section(first, "Errors:"));
    return "The candidate ended with " + outcome + ": " + (err.empty() ? "no diagnostics" : err) +
           ". Fix that before any tuning.";
  }
  if (system.find("You guide an evolutionary search") != std::string::npos) {
    count("meta");
    int recent = 0, failed = 0;
    for (auto& l : split_lines(first)) {
      if (l.rfind("- ", 0) != 0 || l.find("generation") == std::string::npos) continue;
      ++recent;
      if (l.find("failed") != std::string::npos || l.find("0 (") != std::string::npos) ++failed;
    }
    json out = {{"summary", std::to_string(recent) + " recent candidates, " + std::to_string(failed) + " failed."},
                {"scratchpad",
                 {{"tried", {"knob edits"}}, {"won", {"larger blocks"}}, {"failed", {"undeclared identifiers"}}}},
                {"recommendations",
                 {"Try kOrder = LoopOrder::IKJ with kTransposeB = false", "Raise kBK to 64",
                  "Unroll the inner loop by 4"}}};
    return "```json\n" + out.dump(2) + "\n```";
  }
  if (system.find("You judge whether") != std::string::npos) {
    count("novelty");
    return "NOVEL\nIt changes a tuning parameter.";
  }
  if (system.find("variation operator") == std::string::npos) {
    count("other");
    return "pong: " + last;
  }

  // A mutation. What is asked comes from the last user message (a retry repeats it).
  std::string kind = last.find("SEARCH/REPLACE edits") != std::string::npos ? "diff"
                     : last.find("Combine the current program") != std::string::npos ? "cross"
                                                                                      : "full";
  std::string code = code_after(first, "# Current program");
  auto lines = split_lines(code);
  auto knobs = knobs_of(lines);
  if (knobs.empty()) {
    count("no_knobs");
    return "I found no knob to change in the program you showed.";
  }
  // Seeing the real compiler error about the probe identifier is what teaches the fix.
  // (g++: "'braid_probe_undeclared' was not declared", clang: "undeclared identifier").
  bool error_seen = false;
  for (auto& l : split_lines(all))
    if (l.find("braid_probe_undeclared") != std::string::npos &&
        (l.find("was not declared") != std::string::npos || l.find("undeclared identifier") != std::string::npos))
      error_seen = true;
  std::size_t probe_line = lines.size();
  for (std::size_t i = 0; i < lines.size(); ++i)
    if (lines[i].find("braid_probe_undeclared") != std::string::npos) probe_line = i;
  bool fixing = error_seen && broken_ > 0;
  bool breaking = false;
  {
    std::lock_guard lock(mu_);
    ++mutations_;
    breaking = !error_seen && break_every_ > 0 && mutations_ % break_every_ == 1 % break_every_;
  }
  if (breaking) ++broken_;
  if (fixing) ++fixes_;

  std::uint64_t h = fnv(all);
  if (sample_) h ^= sample_() * 0x9e3779b97f4a7c15ull;
  // Read as a model follows the prompt: a one-knob change the prompt lists as already evaluated
  // is passed over for the next one in the same (hashed) order, where one is left.
  std::set<std::string> taken;  // listed in the first prompt, or again in a retry's
  for (const std::string* text : {&first, &last})
    if (auto at = text->find("Changes of one knob of this program already evaluated"); at != std::string::npos) {
      auto listed = split_lines(text->substr(at));
      for (std::size_t i = 1; i < listed.size() && listed[i].rfind("- ", 0) == 0; ++i) taken.insert(listed[i].substr(2));
    }
  const std::size_t n_knobs = knobs.size();
  std::size_t ki = h % n_knobs, step = 0;
  // A cross takes the value of the program to combine where it differs in the knob chosen; where
  // it does not (the islands' seeds are one program), or where the prompt lists that change as
  // taken (a retry after the combined program was already evaluated), the answer is an edit like
  // any other.
  const auto other = kind == "cross" ? knobs_of(split_lines(code_after(first, "# Programs to combine")))
                                     : std::vector<Knob>{};
  bool combine = false;
  for (auto& o : other)
    combine = combine || (o.name == knobs[ki].name && o.value != knobs[ki].value && !taken.count(o.name + " = " + o.value));
  auto value_of = [&](const Knob& knob, std::size_t s) {
    std::size_t cur = 0;
    for (std::size_t i = 0; i < knob.domain.size(); ++i)
      if (knob.domain[i] == knob.value) cur = i;
    const std::size_t others = std::max<std::size_t>(1, knob.domain.size() - 1);
    return knob.domain[(cur + 1 + (h / 7 + s) % others) % knob.domain.size()];
  };
  std::string value = value_of(knobs[ki], 0);
  for (std::size_t tried = 0; !combine && taken.count(knobs[ki].name + " = " + value) && tried < 64; ++tried) {
    if (++step >= knobs[ki].domain.size()) step = 0, ki = (ki + 1) % n_knobs;
    value = value_of(knobs[ki], step);
  }
  // A prompt that gives changes to choose from (its focus; a retry's list is the newer) is
  // followed as a model follows it, in `focus_follow_` of the answers: the one in the hashed order
  // among those not listed as taken.
  // A list of changes of two knobs together ("kA = a, kB = b") is followed the same way.
  std::vector<std::string> focus;
  for (const char* header : {"Changes of one knob for you to choose from", "Changes of two knobs together for you to choose from"})
    for (const std::string* text : {&last, &first})
      if (auto at = text->find(header); focus.empty() && at != std::string::npos) {
        auto listed = split_lines(text->substr(at));
        for (std::size_t i = 1; i < listed.size() && listed[i].rfind("- ", 0) == 0; ++i)
          if (!taken.count(listed[i].substr(2))) focus.push_back(listed[i].substr(2));
      }
  // The knob and value of one "kName = value" part of a listed change (n_knobs: none such).
  auto knob_set = [&](const std::string& part) -> std::pair<std::size_t, std::string> {
    const auto eq = part.find(" = ");
    for (std::size_t i = 0; eq != std::string::npos && i < n_knobs; ++i)
      if (knobs[i].name == part.substr(0, eq) && std::count(knobs[i].domain.begin(), knobs[i].domain.end(), part.substr(eq + 3)))
        return {i, part.substr(eq + 3)};
    return {n_knobs, ""};
  };
  std::pair<std::size_t, std::string> second{n_knobs, ""};  // a listed pair's other change
  if (!combine && !focus.empty() && double((h >> 17) % 1000) < focus_follow_ * 1000.0) {
    const std::string& change = focus[(h / 7) % focus.size()];
    const auto comma = change.find(", ");
    if (auto first_set = knob_set(change.substr(0, comma)); first_set.first < n_knobs) {
      ki = first_set.first, value = first_set.second;
      if (comma != std::string::npos) second = knob_set(change.substr(comma + 2));
    }
  }
  const Knob& k = knobs[ki];
  if (combine)  // take the value from the program to combine
    for (auto& o : other)
      if (o.name == k.name && o.value != k.value && !taken.count(o.name + " = " + o.value)) value = o.value;
  std::vector<std::string> edited = lines;
  edited[k.line] = with_value(lines[k.line], k.value, value);
  // Told that every one-knob change of the program is taken, a model changes a second knob too.
  const Knob* k2 = nullptr;
  std::string value2;
  if (second.first < n_knobs && second.first != ki) {
    k2 = &knobs[second.first];
    value2 = second.second;
    edited[k2->line] = with_value(lines[k2->line], k2->value, value2);
  }
  const bool spent = first.find(kOneKnobChangesSpent) != std::string::npos || last.find(kOneKnobChangesSpent) != std::string::npos;
  if (spent && !combine && n_knobs > 1 && !k2)
    for (std::size_t s = 1; s < n_knobs && !k2; ++s) {
      const Knob& other_knob = knobs[(ki + s + (h / 13) % (n_knobs - 1)) % n_knobs];
      if (&other_knob == &k || other_knob.domain.size() < 2) continue;
      k2 = &other_knob;
      value2 = value_of(other_knob, s);
      edited[k2->line] = with_value(lines[k2->line], k2->value, value2);
    }
  if (probe_line < lines.size()) edited[probe_line] = "";  // drop the probe: it never compiled
  if (breaking) edited[k.line] += std::string("\n") + kProbe;
  count(kind);

  std::string idea = "Set " + k.name + " from " + k.value + " to " + value +
                     (k2 ? " and " + k2->name + " from " + k2->value + " to " + value2 : "") +
                     (fixing ? ", without the undeclared identifier the compiler rejected" : "") + ".";
  if (kind == "diff") {
    std::string out = idea + "\n\n<<<<<<< SEARCH\n" + lines[k.line] + "\n=======\n" + edited[k.line] + "\n>>>>>>> REPLACE\n";
    if (k2) out += "\n<<<<<<< SEARCH\n" + lines[k2->line] + "\n=======\n" + edited[k2->line] + "\n>>>>>>> REPLACE\n";
    if (probe_line < lines.size())
      out += "\n<<<<<<< SEARCH\n" + lines[probe_line] + "\n=======\n\n>>>>>>> REPLACE\n";
    return out;
  }
  std::string out = idea + "\n\n```cpp\n";
  bool in_block = false;
  for (std::size_t i = 0; i < edited.size(); ++i) {
    bool start = lines[i].find("EVOLVE-BLOCK-START") != std::string::npos;
    bool end = lines[i].find("EVOLVE-BLOCK-END") != std::string::npos;
    if (start) in_block = true;
    if (in_block && !(i == probe_line && edited[i].empty())) out += edited[i] + "\n";
    if (end) {
      in_block = false;
      out += "\n";
    }
  }
  return out + "```\n";
}

}  // namespace braid::testing
