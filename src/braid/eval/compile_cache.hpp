// Content-addressed cache of compiled candidates.
//
// The key covers everything that changes the binary: the source, every header it includes that
// lives in the source's folder or an -I folder (braid's device headers, NCCL's headers; found by
// following #include lines recursively, so an edited header is a new key), the compiler flags,
// the compiler's identity and the NCCL version. System headers are covered by the compiler's
// identity. A failed build is cached too, with its trimmed errors, so a repeated candidate
// costs nothing.
//
// Layout: <dir>/<key>/artifact (+ build.json) for a success, <dir>/<key>.failed.json for a
// failure. Entries are written to a temporary name and renamed, so concurrent braids and
// kill -9 never leave a half-written entry under a key.
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace braid {

struct CompileKeyInput {
  std::filesystem::path source;                     // the file compiled
  std::vector<std::filesystem::path> include_dirs;  // -I folders, in order
  std::vector<std::string> flags;                   // every compiler argument except input and output
  std::string compiler_identity;
  std::string nccl_version;
};

// Headers reached from `source` through #include, resolved like the compiler: "quoted" names
// first beside the including file, then (quoted and <angled>) in include_dirs. Names that
// resolve nowhere (system headers) are skipped. Sorted, without duplicates.
std::vector<std::filesystem::path> included_headers(const std::filesystem::path& source,
                                                    const std::vector<std::filesystem::path>& include_dirs);

// 32 hex digits over the source, the headers (path and content), flags, compiler and NCCL.
std::string compile_cache_key(const CompileKeyInput& input);

struct CachedBuild {
  bool ok = false;
  std::filesystem::path artifact;  // inside the cache (ok)
  std::string error;               // trimmed compiler errors (!ok)
};

class CompileCache {
 public:
  explicit CompileCache(std::filesystem::path dir);
  const std::filesystem::path& dir() const { return dir_; }

  std::optional<CachedBuild> lookup(const std::string& key) const;
  // Moves or copies `built` into the cache under `key`; returns the cached artifact's path.
  std::filesystem::path store_artifact(const std::string& key, const std::filesystem::path& built,
                                       const std::string& description);
  void store_failure(const std::string& key, const std::string& error);
  // Places a cached artifact at `dest` (a hard link where possible, else a copy).
  static void materialize(const std::filesystem::path& cached, const std::filesystem::path& dest);

 private:
  std::filesystem::path dir_;
};

}  // namespace braid
