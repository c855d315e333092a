// Small file helpers. Writes that must survive kill -9 go through write_file_atomic.
#pragma once
#include <filesystem>
#include <optional>
#include <string>

namespace braid {

namespace fs = std::filesystem;

// Whole file as a string; throws SystemError when it cannot be read.
std::string read_file(const fs::path& path);
std::optional<std::string> try_read_file(const fs::path& path);
// Write to a temporary file in the same folder, fsync, rename over `path`.
void write_file_atomic(const fs::path& path, std::string_view content);

}  // namespace braid
