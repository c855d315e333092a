#include "braid/search/ahead_evaluations.hpp"

#include <fmt/format.h>

namespace braid {

bool AheadEvaluations::finish(std::int64_t g, ProgramRecord& rec, bool pending) {
  if (running_.erase(g) == 0) return false;
  if (pending) done_[g] = std::move(rec);
  else remove_work_dir(g);
  return true;
}

bool AheadEvaluations::has_result(std::int64_t g, const std::string& code) const {
  auto done = done_.find(g);
  return done != done_.end() && done->second.code == code;
}

bool AheadEvaluations::covers(std::int64_t g, const std::string& code) const {
  return running(g) || has_result(g, code);
}

std::optional<ProgramRecord> AheadEvaluations::take(std::int64_t g, const std::string& code) {
  auto done = done_.find(g);
  if (done == done_.end()) return std::nullopt;
  std::optional<ProgramRecord> out;
  if (done->second.code == code) out = std::move(done->second);
  done_.erase(done);
  return out;
}

void AheadEvaluations::drop(std::int64_t g) {
  if (done_.erase(g)) remove_work_dir(g);
}

void AheadEvaluations::remove_work_dir(std::int64_t g) const {
  std::error_code ec;
  std::filesystem::remove_all(results_ / fmt::format("gen_{}", g), ec);
}

}  // namespace braid
