// Wall-clock time as stored in the database and the logs: seconds since the Unix epoch.
#pragma once
#include <chrono>

namespace braid {

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace braid
