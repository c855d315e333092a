#include "braid/pipeline/run_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>

#include "braid/util/error.hpp"
#include "braid/util/text.hpp"

namespace braid {
namespace {

std::mutex& held_mutex() {
  static std::mutex m;
  return m;
}
// Folders whose lock this process holds: flock conflicts between two descriptors of one
// process, and `resume` of a `braid run` folder reaches the evolve step holding it already.
std::set<std::string>& held() {
  static std::set<std::string> s;
  return s;
}

std::string holder_text(int fd) {
  char buf[256] = {};
  ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string text = n > 0 ? trimmed(std::string(buf, std::size_t(n))) : "";
  auto space = text.find(' ');
  if (text.empty() || space == std::string::npos) return "another braid";
  return "braid pid " + text.substr(0, space) + " on " + text.substr(space + 1);
}

}  // namespace

RunLock::RunLock(const std::filesystem::path& results) {
  std::error_code ec;
  auto canonical = std::filesystem::weakly_canonical(results, ec);
  key_ = (ec ? std::filesystem::absolute(results) : canonical).string();
  std::lock_guard guard(held_mutex());
  if (held().count(key_)) return;  // nested: the outer RunLock releases it
  const auto path = results / kLockFile;
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw SystemError("cannot open " + path.string() + ": " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    std::string who = e == EWOULDBLOCK ? holder_text(fd_) : "";
    ::close(fd_);
    fd_ = -1;
    if (e != EWOULDBLOCK) throw SystemError("cannot lock " + path.string() + ": " + std::strerror(e));
    throw UserError(results.string(), "is in use by " + who + " (" + kLockFile +
                                          "); wait for it to end or stop it before starting another braid here");
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string text = std::to_string(::getpid()) + " " + host + "\n";
  // The holder line is informative only; the flock is what excludes. Should it not be written
  // (a full disk), a refused braid names "another braid" instead.
  const bool named = ::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, text.data(), text.size(), 0) == ssize_t(text.size());
  (void)named;
  held().insert(key_);
}

RunLock::~RunLock() {
  if (fd_ < 0) return;
  std::lock_guard guard(held_mutex());
  held().erase(key_);
  ::close(fd_);  // releases the flock; the file stays (removing it would race a new holder)
}

}  // namespace braid
