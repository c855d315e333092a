#include "braid/eval/gpu_pool.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace braid {

GpuLease::GpuLease(GpuLease&& other) noexcept { *this = std::move(other); }

GpuLease& GpuLease::operator=(GpuLease&& other) noexcept {
  if (this != &other) {
    release();
    pool_ = other.pool_;
    devices_ = std::move(other.devices_);
    exclusive_ = other.exclusive_;
    other.pool_ = nullptr;
    other.devices_.clear();
  }
  return *this;
}

GpuLease::~GpuLease() { release(); }

std::string GpuLease::cuda_visible_devices() const {
  std::string out;
  for (int d : devices_) out += (out.empty() ? "" : ",") + std::to_string(d);
  return out;
}

void GpuLease::release() {
  if (pool_) pool_->give_back(devices_, exclusive_);
  pool_ = nullptr;
}

GpuPool::GpuPool(std::vector<int> devices) : devices_(std::move(devices)) {}

std::optional<GpuLease> GpuPool::acquire(int count, bool exclusive, std::string* why) {
  std::unique_lock lock(mutex_);
  auto healthy_count = [&] { return static_cast<int>(devices_.size() - quarantined_.size()); };
  if (exclusive) ++exclusive_waiting_;
  bool gave_up = false;
  changed_.wait(lock, [&] {
    if (healthy_count() < count) return gave_up = true;
    if (exclusive_held_) return false;
    if (exclusive) {
      if (!busy_.empty()) return false;
    } else if (exclusive_waiting_ > 0) {
      return false;
    }
    int free = 0;
    for (int d : devices_)
      if (!busy_.count(d) && !quarantined_.count(d)) ++free;
    return free >= count;
  });
  if (exclusive) --exclusive_waiting_;
  if (gave_up) {
    changed_.notify_all();
    if (why) {
      std::string q;
      for (const auto& [d, reason] : quarantined_) q += (q.empty() ? "" : ", ") + std::to_string(d);
      *why = fmt::format("{} GPU{} needed but only {} of {} are healthy{}", count, count == 1 ? "" : "s", healthy_count(),
                         devices_.size(), q.empty() ? "" : " (quarantined: " + q + ")");
    }
    return std::nullopt;
  }
  GpuLease lease;
  lease.pool_ = this;
  lease.exclusive_ = exclusive;
  for (int d : devices_) {
    if (static_cast<int>(lease.devices_.size()) == count) break;
    if (!busy_.count(d) && !quarantined_.count(d)) lease.devices_.push_back(d);
  }
  busy_.insert(lease.devices_.begin(), lease.devices_.end());
  if (exclusive) exclusive_held_ = true;
  return lease;
}

void GpuPool::give_back(const std::vector<int>& devices, bool exclusive) {
  {
    std::lock_guard lock(mutex_);
    for (int d : devices) busy_.erase(d);
    if (exclusive) exclusive_held_ = false;
  }
  changed_.notify_all();
}

void GpuPool::quarantine(const std::vector<int>& devices, const std::string& reason) {
  {
    std::lock_guard lock(mutex_);
    for (int d : devices) quarantined_.emplace(d, reason);
  }
  changed_.notify_all();
}

std::vector<int> GpuPool::devices() const {
  std::lock_guard lock(mutex_);
  return devices_;
}

std::vector<int> GpuPool::healthy() const {
  std::lock_guard lock(mutex_);
  std::vector<int> out;
  for (int d : devices_)
    if (!quarantined_.count(d)) out.push_back(d);
  return out;
}

std::vector<int> GpuPool::quarantined() const {
  std::lock_guard lock(mutex_);
  std::vector<int> out;
  for (const auto& [d, reason] : quarantined_) out.push_back(d);
  return out;
}

int GpuPool::in_use() const {
  std::lock_guard lock(mutex_);
  return static_cast<int>(busy_.size());
}

std::string GpuPool::status_line() const {
  std::lock_guard lock(mutex_);
  if (quarantined_.empty()) return {};
  std::map<std::string, std::vector<int>> by_reason;
  for (const auto& [d, reason] : quarantined_) by_reason[reason].push_back(d);
  std::string out;
  for (const auto& [reason, ds] : by_reason) {
    std::string list;
    for (int d : ds) list += (list.empty() ? "" : ",") + std::to_string(d);
    out += fmt::format("{}GPU{} {} quarantined ({})", out.empty() ? "" : "; ", ds.size() == 1 ? "" : "s", list, reason);
  }
  return out;
}

}  // namespace braid
