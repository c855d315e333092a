// Knob-only candidates evaluated ahead of their turn (runner.cpp): an evaluation slot left idle
// evaluates a candidate that waits behind a slower generation, so that the generations after it
// are ready to index when it settles. The result is kept here, in memory and never stored, until
// its candidate is accepted at its turn (a kill -9 meanwhile loses only what a proposal not yet
// settled loses); a candidate asked again at its turn (other code) drops it.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "braid/db/record.hpp"

namespace braid {

class AheadEvaluations {
 public:
  explicit AheadEvaluations(std::filesystem::path results) : results_(std::move(results)) {}

  bool running(std::int64_t g) const { return running_.count(g) > 0; }
  void start(std::int64_t g) { running_.insert(g); }
  // An evaluation of generation g came back. false: it was no evaluation ahead (one at its turn;
  // `rec` is left alone). Else `rec` is kept (moved from) while `pending` (g still waits for its
  // turn), or its work folder goes.
  bool finish(std::int64_t g, ProgramRecord& rec, bool pending);
  // Whether `code` of generation g is evaluated, or being evaluated, ahead already.
  bool covers(std::int64_t g, const std::string& code) const;
  bool has_result(std::int64_t g, const std::string& code) const;
  // The result for `code` of generation g, taken out; a result for other code is dropped.
  std::optional<ProgramRecord> take(std::int64_t g, const std::string& code);
  // Generation g was rejected or dropped: its result goes, with its work folder.
  void drop(std::int64_t g);

 private:
  void remove_work_dir(std::int64_t g) const;

  std::filesystem::path results_;
  std::set<std::int64_t> running_;              // still running
  std::map<std::int64_t, ProgramRecord> done_;  // results, by generation
};

}  // namespace braid
