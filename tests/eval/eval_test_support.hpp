// Helpers shared by the eval tests: temporary folders and variants of the example program.
#pragma once
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>

#include "braid/util/error.hpp"

namespace braid::testing {

inline std::filesystem::path example_dir(const std::string& name) {
  return std::filesystem::path(BRAID_SOURCE_DIR) / "examples" / name;
}

// A fresh folder under the system temp dir, removed by the destructor.
class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("braid_eval_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// `code` with `needle` (which must occur once, inside the evolve block) replaced.
inline std::string variant(const std::string& code, const std::string& needle, const std::string& replacement) {
  auto block_begin = code.find("// EVOLVE-BLOCK-START");
  auto block_end = code.find("// EVOLVE-BLOCK-END");
  auto at = code.find(needle, block_begin);
  if (block_begin == std::string::npos || at == std::string::npos || at > block_end ||
      code.find(needle, at + 1) < block_end)
    throw SystemError("test variant: '" + needle + "' must occur once inside the evolve block");
  return code.substr(0, at) + replacement + code.substr(at + needle.size());
}

}  // namespace braid::testing
