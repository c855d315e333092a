#include "braid/search/pending_feedback.hpp"

#include <chrono>

namespace braid {

void PendingFeedback::expect(const std::string& id) {
  std::lock_guard lock(mu_);
  by_id_[id] = std::nullopt;
}

void PendingFeedback::settle(const std::string& id, std::string text) {
  {
    std::lock_guard lock(mu_);
    by_id_[id] = std::move(text);
  }
  cv_.notify_all();
}

std::optional<std::string> PendingFeedback::await(const std::string& id, const std::function<bool()>& stopping) {
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

void PendingFeedback::complete(ProgramRecord& rec, const std::function<bool()>& stopping) {
  if (rec.id.empty()) return;
  if (std::optional<std::string> text = await(rec.id, stopping); text && !text->empty()) rec.text_feedback = *text;
}

}  // namespace braid
