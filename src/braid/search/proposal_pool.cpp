#include "braid/search/proposal_pool.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "braid/util/log.hpp"

namespace braid {

namespace {
// Back-off of a 429 without Retry-After: 1 s, doubling per consecutive 429, at most a minute.
constexpr double kBackoffBaseS = 1.0;
constexpr double kBackoffMaxS = 60.0;
}  // namespace

std::string idle_summary(const PoolStats& s) {
  double idle = 0;
  for (auto& [cause, t] : s.idle_s) idle += t;
  std::string by;
  for (auto& [cause, t] : s.idle_s)
    if (t >= 0.05 * idle && t >= 0.5) by += fmt::format("; {:.0f}s {}", t, cause);
  return fmt::format("idle {:.0f}% ({:.0f} of {:.0f} slot-seconds{})", s.slot_s > 0 ? 100 * idle / s.slot_s : 0.0, idle,
                     s.slot_s, by);
}

ProposalPool::ProposalPool(int max_parallel, std::function<void()> wake)
    : max_parallel_(std::max(1, max_parallel)), wake_(std::move(wake)), limit_(max_parallel_) {
  for (int i = 0; i < max_parallel_; ++i) threads_.emplace_back([this] { worker(); });
}

ProposalPool::~ProposalPool() {
  cancel();
  for (auto& t : threads_) t.join();
}

void ProposalPool::submit(std::int64_t generation, std::function<void()> work, bool first, std::int64_t after,
                          std::function<bool()> ready) {
  {
    std::lock_guard lock(mu_);
    if (cancelled_) return;
    queue_[generation] = Queued{std::move(work), first, after, std::move(ready)};
    if (first) first_open_.insert(generation);
    submitted_[generation] = Clock::now();
  }
  cv_.notify_all();
}

// Lowest generation first: the search indexes in generation order, so it waits on those. A first
// ask whose earlier first asks are still out waits (the lowest first ask out never does), and so
// does work that is not ready yet.
std::map<std::int64_t, ProposalPool::Queued>::iterator ProposalPool::startable() {
  for (auto it = queue_.begin(); it != queue_.end(); ++it)
    if ((!it->second.first || first_open_.empty() || *first_open_.begin() > it->second.after) &&
        (!it->second.ready || it->second.ready()))
      return it;
  return queue_.end();
}

std::string ProposalPool::idle_reason() {
  if (running_ >= limit_ || Clock::now() < paused_until_) return "rate limit";
  if (queue_.empty()) return idle_cause_;
  for (auto& [g, q] : queue_)
    if (!q.first || first_open_.empty() || *first_open_.begin() > q.after) return "diagnoses awaited";
  return "earlier first asks out";
}

void ProposalPool::set_idle_cause(std::string cause) {
  std::lock_guard lock(mu_);
  idle_cause_ = std::move(cause);
}

void ProposalPool::worker() {
  std::unique_lock lock(mu_);
  while (true) {
    // Readiness changes outside the pool (a diagnosis answered): looked at again every 50 ms.
    while (!cancelled_ && !(running_ < limit_ && startable() != queue_.end())) {
      const std::string reason = idle_reason();
      const auto since = Clock::now();
      cv_.wait_for(lock, std::chrono::milliseconds(50));
      idle_s_[reason] += std::chrono::duration<double>(Clock::now() - since).count();
    }
    if (cancelled_) return;
    auto it = startable();
    const std::int64_t g = it->first;
    const bool first = it->second.first;
    auto work = std::move(it->second.work);
    queue_.erase(it);
    ++running_;
    lock.unlock();
    work();
    lock.lock();
    --running_;
    submitted_.erase(g);
    if (first) first_open_.erase(g);  // later first asks may start
    if (!cancelled_) finished_.insert(g);
    cv_.notify_all();  // a slot is free
    if (wake_) {
      lock.unlock();
      wake_();
      lock.lock();
    }
  }
}

std::vector<std::int64_t> ProposalPool::take_finished() {
  std::lock_guard lock(mu_);
  std::vector<std::int64_t> out(finished_.begin(), finished_.end());
  finished_.clear();
  return out;
}

bool ProposalPool::has_finished() const {
  std::lock_guard lock(mu_);
  return !finished_.empty();
}

void ProposalPool::cancel() {
  {
    std::lock_guard lock(mu_);
    cancelled_ = true;
    queue_.clear();
    first_open_.clear();
    finished_.clear();
  }
  cv_.notify_all();
}

bool ProposalPool::cancelled() const {
  std::lock_guard lock(mu_);
  return cancelled_;
}

void ProposalPool::await_clear() {
  std::unique_lock lock(mu_);
  // Woken early by cancel(); a pause that is extended meanwhile is waited out again.
  while (!cancelled_ && Clock::now() < paused_until_) cv_.wait_until(lock, paused_until_);
}

void ProposalPool::rate_limited(double retry_after_s) {
  std::lock_guard lock(mu_);
  ++consecutive_limits_;
  double delay = retry_after_s >= 0 ? retry_after_s
                                    : std::min(kBackoffMaxS, kBackoffBaseS * std::pow(2.0, consecutive_limits_ - 1));
  auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(delay));
  paused_until_ = std::max(paused_until_, until);
  const int was = limit_;
  limit_ = std::max(1, limit_ / 2);
  if (limit_ != was || delay > 0)
    log::warn("llm rate limit: proposals paused {:.1f}s, at most {} at once (of {})", delay, limit_, max_parallel_);
}

void ProposalPool::answered() {
  {
    std::lock_guard lock(mu_);
    consecutive_limits_ = 0;
    if (limit_ >= max_parallel_) return;
    ++limit_;
  }
  cv_.notify_all();
}

PoolStats ProposalPool::stats() const {
  std::lock_guard lock(mu_);
  PoolStats s;
  s.asking = running_;
  s.queued = int(queue_.size());
  s.limit = limit_;
  const auto now = Clock::now();
  for (auto& [g, t] : submitted_) s.oldest_wait_s = std::max(s.oldest_wait_s, std::chrono::duration<double>(now - t).count());
  if (paused_until_ > now) s.paused_s = std::chrono::duration<double>(paused_until_ - now).count();
  s.idle_s = idle_s_;
  s.slot_s = max_parallel_ * std::chrono::duration<double>(now - created_).count();
  return s;
}

}  // namespace braid
