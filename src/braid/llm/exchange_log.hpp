// Record and replay. Every exchange of a run is appended, in order, to
// <results>/llm_exchanges.jsonl: {"seq", "key", "model", "request", "response"} (requests
// carry no headers, so no key is ever written). `--llm replay:<results>` answers each request
// from that file: by its replay key ("mutate/g12/a0", stable when proposals run in parallel),
// else by sequence number; no network is used.
#pragma once
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "braid/llm/client.hpp"
#include "braid/llm/ledger.hpp"

namespace braid::llm {

inline constexpr const char* kExchangeFile = "llm_exchanges.jsonl";
// Cap of one line of that file; longer exchanges are stored cut, marked "truncated": true.
inline constexpr std::size_t kMaxExchangeRecordBytes = std::size_t(4) << 20;

// Appends exchanges to the run's file and numbers them. Shared by every client of a run.
class ExchangeRecorder {
 public:
  // Continues numbering after the exchanges already in `path` (a resumed run).
  explicit ExchangeRecorder(std::filesystem::path path);
  ~ExchangeRecorder();
  std::int64_t next_seq();
  void append(std::int64_t seq, const LlmRequest& request, const LlmResponse& response);
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::mutex mu_;
  std::FILE* out_ = nullptr;
  std::int64_t next_ = 0;
};

// The recorded exchanges of an earlier run. Throws UserError when the file is missing.
class ReplayLog {
 public:
  explicit ReplayLog(const std::filesystem::path& results_dir);
  // The recorded response for `request` (key first, then `seq`); error kind replay_missing
  // when none is left. A key whose recorded prompt differs is still answered (prompts carry
  // measured timings) and counted in diverged().
  LlmResponse answer(const LlmRequest& request, std::int64_t seq);
  std::vector<std::string> models() const;  // distinct models in recording order
  std::size_t size() const { return entries_.size(); }
  std::int64_t diverged() const;

 private:
  struct Entry {
    std::int64_t seq = 0;
    std::string key;
    json request;
    json response;
    bool used = false;
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::vector<std::size_t>> by_key_;
  mutable std::mutex mu_;
  std::int64_t diverged_ = 0;
};

// Client wrapper: numbers the call, asks `inner` (network) or the replay log, records the
// exchange, charges the ledger. Every operator talks to models through one of these.
class TrackedClient final : public LlmClient {
 public:
  TrackedClient(std::unique_ptr<LlmClient> inner, std::shared_ptr<ReplayLog> replay, std::string model,
                std::shared_ptr<ExchangeRecorder> recorder, std::shared_ptr<CostLedger> ledger);
  LlmResponse complete(const LlmRequest& request) override;
  const std::string& model() const override { return model_; }

 private:
  std::unique_ptr<LlmClient> inner_;
  std::shared_ptr<ReplayLog> replay_;
  std::string model_;
  std::shared_ptr<ExchangeRecorder> recorder_;
  std::shared_ptr<CostLedger> ledger_;
};

}  // namespace braid::llm
