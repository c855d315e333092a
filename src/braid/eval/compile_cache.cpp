#include "braid/eval/compile_cache.hpp"

#include <unistd.h>

#include <algorithm>
#include <set>

#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/hash.hpp"
#include "braid/util/json.hpp"

namespace braid {
namespace {

struct IncludeLine {
  std::string name;
  bool quoted = false;
};

// `#include "x"` and `#include <x>` lines; comments and conditionals are ignored on purpose
// (an include under #if that is not taken only makes the key stricter).
std::vector<IncludeLine> include_lines(const std::string& text) {
  std::vector<IncludeLine> out;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::size_t p = start;
    while (p < end && (text[p] == ' ' || text[p] == '\t')) ++p;
    if (p < end && text[p] == '#') {
      ++p;
      while (p < end && (text[p] == ' ' || text[p] == '\t')) ++p;
      if (text.compare(p, 7, "include") == 0) {
        p += 7;
        while (p < end && (text[p] == ' ' || text[p] == '\t')) ++p;
        if (p < end && (text[p] == '"' || text[p] == '<')) {
          const char close = text[p] == '"' ? '"' : '>';
          std::size_t q = text.find(close, p + 1);
          if (q != std::string::npos && q < end) out.push_back({text.substr(p + 1, q - p - 1), close == '"'});
        }
      }
    }
    start = end + 1;
  }
  return out;
}

bool regular_file(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec);
}

}  // namespace

std::vector<std::filesystem::path> included_headers(const std::filesystem::path& source,
                                                    const std::vector<std::filesystem::path>& include_dirs) {
  std::set<std::filesystem::path> seen;
  std::vector<std::filesystem::path> stack = {source};
  while (!stack.empty()) {
    std::filesystem::path file = stack.back();
    stack.pop_back();
    auto text = try_read_file(file);
    if (!text) continue;
    for (const auto& inc : include_lines(*text)) {
      std::vector<std::filesystem::path> where;
      if (inc.quoted) where.push_back(file.parent_path());
      where.insert(where.end(), include_dirs.begin(), include_dirs.end());
      for (const auto& dir : where) {
        std::filesystem::path candidate = (dir / inc.name).lexically_normal();
        if (!regular_file(candidate)) continue;
        if (seen.insert(candidate).second) stack.push_back(candidate);
        break;
      }
    }
  }
  seen.erase(source.lexically_normal());
  return {seen.begin(), seen.end()};
}

std::string compile_cache_key(const CompileKeyInput& input) {
  std::string material = "braid-compile-v1\n";
  material += "source\n" + read_file(input.source) + "\n";
  for (const auto& header : included_headers(input.source, input.include_dirs)) {
    // The path matters only relative to its include folder (the repository may move), so the
    // content is what is hashed, with the file name.
    material += "header " + header.filename().string() + " " + hash_hex(read_file(header)) + "\n";
  }
  for (const auto& flag : input.flags) material += "flag " + flag + "\n";
  material += "compiler " + hash_hex(input.compiler_identity) + "\n";
  material += "nccl " + input.nccl_version + "\n";
  return hash_hex(material, 1) + hash_hex(material, 2);
}

CompileCache::CompileCache(std::filesystem::path dir) : dir_(std::move(dir)) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) throw SystemError("cannot create the compile cache " + dir_.string() + ": " + ec.message());
}

std::optional<CachedBuild> CompileCache::lookup(const std::string& key) const {
  const auto artifact = dir_ / key / "artifact";
  if (regular_file(artifact)) return CachedBuild{true, artifact, {}};
  if (auto failed = try_read_file(dir_ / (key + ".failed.json"))) {
    json value = json::parse(*failed, nullptr, false);
    if (value.is_object() && value.contains("error") && value["error"].is_string())
      return CachedBuild{false, {}, value["error"].get<std::string>()};
  }
  return std::nullopt;
}

std::filesystem::path CompileCache::store_artifact(const std::string& key, const std::filesystem::path& built,
                                                   const std::string& description) {
  const auto final_dir = dir_ / key;
  const auto tmp_dir = dir_ / (key + ".tmp" + std::to_string(::getpid()) + "_" + hash_hex(built.string()));
  std::error_code ec;
  std::filesystem::remove_all(tmp_dir, ec);
  std::filesystem::create_directories(tmp_dir);
  std::filesystem::copy_file(built, tmp_dir / "artifact", std::filesystem::copy_options::overwrite_existing);
  std::filesystem::permissions(tmp_dir / "artifact", std::filesystem::perms::owner_exec | std::filesystem::perms::group_exec,
                               std::filesystem::perm_options::add);
  write_file_atomic(tmp_dir / "build.json", json({{"key", key}, {"build", description}}).dump(2) + "\n");
  std::filesystem::rename(tmp_dir, final_dir, ec);
  if (ec) {
    // Another process stored the same key first: theirs is as good as ours.
    std::filesystem::remove_all(tmp_dir, ec);
  }
  return final_dir / "artifact";
}

void CompileCache::store_failure(const std::string& key, const std::string& error) {
  write_file_atomic(dir_ / (key + ".failed.json"), json({{"key", key}, {"error", error}}).dump(2) + "\n");
}

void CompileCache::materialize(const std::filesystem::path& cached, const std::filesystem::path& dest) {
  std::error_code ec;
  std::filesystem::remove(dest, ec);
  std::filesystem::create_hard_link(cached, dest, ec);
  if (ec) std::filesystem::copy_file(cached, dest, std::filesystem::copy_options::overwrite_existing);
}

}  // namespace braid
