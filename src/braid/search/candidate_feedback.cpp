#include "braid/search/candidate_feedback.hpp"

#include <chrono>

namespace braid {

std::optional<ProgramRecord> CandidateFeedback::parent_of(const ProgramRecord& rec) const {
  return rec.parent_id.empty() ? std::nullopt : db_.get(rec.parent_id);
}

std::string CandidateFeedback::now(const ProgramRecord& rec) {
  if (!asks()) return "";
  const std::optional<ProgramRecord> parent = parent_of(rec);
  agent_->note_outcome(rec, parent ? &*parent : nullptr);
  return agent_->diagnose(rec, parent ? &*parent : nullptr);
}

void CandidateFeedback::note_outcome(const ProgramRecord& rec) {
  if (!asks()) return;
  const std::optional<ProgramRecord> parent = parent_of(rec);
  agent_->note_outcome(rec, parent ? &*parent : nullptr);
  std::lock_guard lock(mu_);
  by_id_[rec.id] = std::nullopt;
}

void CandidateFeedback::ask(const ProgramRecord& rec, bool stopped) {
  if (!asks()) return;
  std::string text;
  if (!stopped) {
    const std::optional<ProgramRecord> parent = parent_of(rec);
    text = agent_->diagnose(rec, parent ? &*parent : nullptr);
    if (!text.empty()) db_.with([&](ProgramDatabase& db) { db.set_text_feedback(rec.id, text); });
  }
  settle(rec.id, std::move(text));
}

void CandidateFeedback::settle(const std::string& id, std::string text) {
  {
    std::lock_guard lock(mu_);
    by_id_[id] = std::move(text);
  }
  cv_.notify_all();
}

bool CandidateFeedback::settled(const std::string& id) {
  std::lock_guard lock(mu_);
  const auto it = by_id_.find(id);
  return it == by_id_.end() || it->second.has_value();
}

std::optional<std::string> CandidateFeedback::await(const std::string& id, const std::function<bool()>& stopping) {
  std::unique_lock lock(mu_);
  while (true) {
    auto it = by_id_.find(id);
    if (it == by_id_.end()) return std::nullopt;
    if (it->second) return it->second;
    if (stopping && stopping()) return std::string();
    // Stopping is a flag, not a notification: looked at again every 100 ms.
    cv_.wait_for(lock, std::chrono::milliseconds(100));
  }
}

void CandidateFeedback::complete(ProgramRecord& rec, const std::function<bool()>& stopping) {
  if (rec.id.empty()) return;
  if (std::optional<std::string> text = await(rec.id, stopping); text && !text->empty()) rec.text_feedback = *text;
}

}  // namespace braid
