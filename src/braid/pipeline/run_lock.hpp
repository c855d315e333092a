// One braid per results folder. `evolve`, `resume` (and `run`'s evolve step) hold an exclusive
// flock on <results>/braid.lock for as long as they run; the file names the holder ("pid host")
// so a refused second braid can say which process owns the folder. The kernel drops the lock
// when its holder dies (kill -9 included), so a lock file left by a dead braid is simply taken
// over: no stale-lock clean-up is ever needed.
#pragma once
#include <filesystem>
#include <string>

namespace braid {

inline constexpr const char* kLockFile = "braid.lock";

class RunLock {
 public:
  // Takes the lock, creating the folder's lock file; throws UserError(<results>, "is in use by
  // braid pid N on HOST ...") when a live process holds it. Re-entrant within one process.
  explicit RunLock(const std::filesystem::path& results);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  std::string key_;
  int fd_ = -1;  // -1 when this process already held the lock (nested acquire)
};

}  // namespace braid
