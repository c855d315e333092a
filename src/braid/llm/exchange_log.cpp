#include "braid/llm/exchange_log.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "braid/llm/secrets.hpp"
#include "braid/util/error.hpp"
#include "braid/util/log.hpp"
#include "braid/util/text.hpp"

namespace braid::llm {

ExchangeRecorder::ExchangeRecorder(std::filesystem::path path) : path_(std::move(path)) {
  if (std::ifstream in(path_); in) {
    std::string line;
    while (std::getline(in, line)) {
      json j = json::parse(line, nullptr, false);
      // A torn last line (kill -9 mid-write) is skipped, numbering continues after it.
      if (!j.is_discarded() && j.contains("seq")) next_ = std::max(next_, j["seq"].get<std::int64_t>() + 1);
    }
  }
  out_ = std::fopen(path_.c_str(), "a");
  if (out_ == nullptr) throw SystemError("cannot write " + path_.string() + ": " + std::strerror(errno));
}

ExchangeRecorder::~ExchangeRecorder() {
  if (out_ != nullptr) std::fclose(out_);
}

std::int64_t ExchangeRecorder::next_seq() {
  std::lock_guard lock(mu_);
  return next_++;
}

namespace {

// One exchange as a line, at most kMaxExchangeRecordBytes: a huge prompt or answer is cut
// (UTF-8 safe) and the record marked "truncated", so a hostile endpoint cannot fill the disk.
std::string exchange_line(std::int64_t seq, const LlmRequest& request, const LlmResponse& response) {
  json line = {{"seq", seq},
               {"key", request.replay_key},
               {"model", response.model},
               {"request", to_json(request)},
               {"response", to_json(response)}};
  // Strings are valid UTF-8 by construction (http.cpp); replace anything that is not anyway.
  std::string text = line.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() <= kMaxExchangeRecordBytes) return text;
  const std::size_t share = kMaxExchangeRecordBytes / 4;
  auto cut = [&](json& field) {
    if (field.is_string() && field.get_ref<const std::string&>().size() > share)
      field = std::string(utf8_prefix(field.get_ref<const std::string&>(), share)) + "\n[... cut by braid: record over the size cap]";
  };
  cut(line["response"]["text"]);
  cut(line["response"]["error"]);
  cut(line["request"]["system"]);
  auto& messages = line["request"]["messages"];
  const std::size_t n = std::max<std::size_t>(1, messages.size());
  for (auto& m : messages) {
    auto& content = m["content"];
    if (content.is_string() && content.get_ref<const std::string&>().size() > share / n)
      content = std::string(utf8_prefix(content.get_ref<const std::string&>(), share / n)) + "\n[... cut by braid]";
  }
  line["truncated"] = true;
  return line.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

void ExchangeRecorder::append(std::int64_t seq, const LlmRequest& request, const LlmResponse& response) {
  std::string text = redact(exchange_line(seq, request, response)) + "\n";
  std::lock_guard lock(mu_);
  std::fwrite(text.data(), 1, text.size(), out_);
  std::fflush(out_);
}

ReplayLog::ReplayLog(const std::filesystem::path& results_dir) {
  auto path = results_dir / kExchangeFile;
  std::ifstream in(path);
  if (!in) throw UserError(path.string(), "no recorded LLM exchanges to replay (" + std::string(std::strerror(errno)) + ")");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded()) continue;
    Entry e;
    e.seq = j.value("seq", std::int64_t{0});
    e.key = j.value("key", "");
    e.request = j.value("request", json::object());
    e.response = j.value("response", json::object());
    if (!e.key.empty()) by_key_[e.key].push_back(entries_.size());
    entries_.push_back(std::move(e));
  }
}

std::vector<std::string> ReplayLog::models() const {
  std::vector<std::string> out;
  for (auto& e : entries_) {
    std::string m = e.response.value("model", "");
    if (!m.empty() && std::find(out.begin(), out.end(), m) == out.end()) out.push_back(m);
  }
  return out;
}

std::int64_t ReplayLog::diverged() const {
  std::lock_guard lock(mu_);
  return diverged_;
}

LlmResponse ReplayLog::answer(const LlmRequest& request, std::int64_t seq) {
  std::lock_guard lock(mu_);
  Entry* hit = nullptr;
  if (!request.replay_key.empty()) {
    if (auto it = by_key_.find(request.replay_key); it != by_key_.end())
      for (auto i : it->second)
        if (!entries_[i].used) {
          hit = &entries_[i];
          break;
        }
  } else {
    for (auto& e : entries_)
      if (e.seq == seq && !e.used) hit = &e;
  }
  if (hit == nullptr) {
    LlmResponse r;
    r.error_kind = "replay_missing";
    r.error = "no recorded exchange for " + (request.replay_key.empty() ? "seq " + std::to_string(seq) : "'" + request.replay_key + "'");
    return r;
  }
  hit->used = true;
  const json& rec = hit->request;
  if (rec.value("system", "") != request.system || rec.value("messages", json::array()) != to_json(request)["messages"])
    ++diverged_;
  return response_from_json(hit->response);
}

TrackedClient::TrackedClient(std::unique_ptr<LlmClient> inner, std::shared_ptr<ReplayLog> replay, std::string model,
                             std::shared_ptr<ExchangeRecorder> recorder, std::shared_ptr<CostLedger> ledger)
    : inner_(std::move(inner)), replay_(std::move(replay)), model_(std::move(model)), recorder_(std::move(recorder)),
      ledger_(std::move(ledger)) {}

LlmResponse TrackedClient::complete(const LlmRequest& request) {
  LlmResponse response;
  if (ledger_ && ledger_->exhausted()) {
    response.model = model_;
    response.error_kind = "budget";
    response.error = "max_api_cost reached";
    return response;  // not a call: neither recorded nor charged
  }
  std::int64_t seq = recorder_ ? recorder_->next_seq() : 0;
  if (replay_) {
    response = replay_->answer(request, seq);
  } else {
    response = inner_->complete(request);
  }
  response.model = model_;  // the run's name for the model, the same in a replay
  if (recorder_) recorder_->append(seq, request, response);
  if (ledger_) ledger_->record(request, response, seq);
  return response;
}

}  // namespace braid::llm
