// What `braid serve` cannot read from the database while a search runs: evaluations and proposals
// in flight and the evaluator's note (e.g. Slurm's running and queued jobs), kept in
// <results>/activity.json (report/run_trust.cpp reads it; web/API.md has the fields).
#pragma once
#include <chrono>
#include <filesystem>
#include <string>

#include "braid/search/runner.hpp"

namespace braid {

class ActivityFile {
 public:
  explicit ActivityFile(std::filesystem::path path) : path_(std::move(path)) {}

  // Written when it changed (at most once a second) and every 5 s as a heartbeat, so a reader
  // can tell a live run from one that stopped writing. A failed write is warned about once.
  void publish(const RunStatus& status);
  // At the end of the run: nothing is in flight any more.
  void remove();

 private:
  std::filesystem::path path_;
  std::string written_;  // the content last written, without its time stamp
  std::chrono::steady_clock::time_point written_at_{};
  bool warned_ = false;
};

}  // namespace braid
