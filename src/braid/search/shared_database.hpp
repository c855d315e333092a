// The run's database as the runner's threads share it: the search thread, the evaluation
// workers (each stores its candidate the moment it ends) and the proposal threads (attempts)
// make one call at a time through it.
#pragma once
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "braid/db/database.hpp"

namespace braid {

class SharedDatabase {
 public:
  explicit SharedDatabase(ProgramDatabase& db) : db_(db) {}
  SharedDatabase(const SharedDatabase&) = delete;
  SharedDatabase& operator=(const SharedDatabase&) = delete;

  // f(ProgramDatabase&) under the lock: several calls in one go, or state kept beside them.
  template <class F>
  decltype(auto) with(F&& f) {
    std::lock_guard lock(mutex_);
    return std::forward<F>(f)(db_);
  }

  std::optional<ProgramRecord> get(const std::string& id) {
    return with([&](ProgramDatabase& db) { return db.get(id); });
  }
  void insert(const ProgramRecord& record) {
    with([&](ProgramDatabase& db) { db.insert(record); });
  }
  std::optional<std::string> meta(const std::string& key) {
    return with([&](ProgramDatabase& db) { return db.meta(key); });
  }
  void set_meta(const std::string& key, const std::string& value) {
    with([&](ProgramDatabase& db) { db.set_meta(key, value); });
  }

 private:
  ProgramDatabase& db_;
  std::mutex mutex_;
};

}  // namespace braid
