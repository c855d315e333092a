// GpuPool: which GPUs of this node an evaluation may use.
//
// Evaluations in flight take disjoint GPU sets (handed to their ranks as CUDA_VISIBLE_DEVICES).
// An exclusive lease (the benchmark level, by default) waits until no other lease is held and
// keeps the whole node to itself, so timings are not disturbed; while an exclusive request waits,
// new shared leases wait behind it (no starvation). Quarantined GPUs are never leased again in
// this run; GPUs are never reset.
#pragma once
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace braid {

class GpuPool;

// Held GPUs; released when destroyed.
class GpuLease {
 public:
  GpuLease() = default;
  GpuLease(GpuLease&& other) noexcept;
  GpuLease& operator=(GpuLease&& other) noexcept;
  GpuLease(const GpuLease&) = delete;
  GpuLease& operator=(const GpuLease&) = delete;
  ~GpuLease();

  const std::vector<int>& devices() const { return devices_; }
  bool exclusive() const { return exclusive_; }
  bool held() const { return pool_ != nullptr; }
  std::string cuda_visible_devices() const;  // "2,3"
  void release();

 private:
  friend class GpuPool;
  GpuPool* pool_ = nullptr;
  std::vector<int> devices_;
  bool exclusive_ = false;
};

class GpuPool {
 public:
  explicit GpuPool(std::vector<int> devices);

  // Blocks until `count` healthy GPUs are free (and, when exclusive, no lease is held at all).
  // nullopt with `why` when fewer than `count` healthy GPUs remain, now or while waiting.
  std::optional<GpuLease> acquire(int count, bool exclusive, std::string* why = nullptr);

  // Takes GPUs out of service for the rest of the run (after a failed health probe).
  void quarantine(const std::vector<int>& devices, const std::string& reason);

  std::vector<int> devices() const;
  std::vector<int> healthy() const;
  std::vector<int> quarantined() const;
  int in_use() const;
  // "" when all is well, else e.g. "GPUs 1 quarantined (health probe failed after a timeout)".
  std::string status_line() const;

 private:
  friend class GpuLease;
  void give_back(const std::vector<int>& devices, bool exclusive);

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<int> devices_;
  std::set<int> busy_;
  std::map<int, std::string> quarantined_;
  int exclusive_waiting_ = 0;
  bool exclusive_held_ = false;
};

}  // namespace braid
