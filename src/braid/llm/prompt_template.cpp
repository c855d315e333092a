#include "braid/llm/prompt_template.hpp"

#include <unistd.h>

#include <cstdlib>

#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"

namespace braid::llm {
namespace {

std::string trim_name(std::string_view s) {
  auto b = s.find_first_not_of(" \t");
  auto e = s.find_last_not_of(" \t");
  return b == std::string_view::npos ? "" : std::string(s.substr(b, e - b + 1));
}

// Renders [pos, end-of-section) of `t`; `closing` is the section name that ends this level.
std::string render_range(std::string_view t, std::size_t& pos, const PromptVars& vars, const std::string& origin,
                         const std::string& closing) {
  std::string out;
  while (pos < t.size()) {
    auto open = t.find("{{", pos);
    if (open == std::string_view::npos) {
      out.append(t.substr(pos));
      pos = t.size();
      break;
    }
    out.append(t.substr(pos, open - pos));
    auto close = t.find("}}", open + 2);
    if (close == std::string_view::npos) throw UserError(origin, "unclosed '{{'");
    std::string_view tag = t.substr(open + 2, close - open - 2);
    pos = close + 2;
    if (tag.empty()) throw UserError(origin, "empty '{{}}'");
    char sigil = tag[0];
    if (sigil == '/') {
      std::string name = trim_name(tag.substr(1));
      if (name != closing) throw UserError(origin, "'{{/" + name + "}}' closes no open section");
      return out;
    }
    if (sigil == '#' || sigil == '^') {
      std::string name = trim_name(tag.substr(1));
      auto it = vars.find(name);
      if (it == vars.end()) throw UserError(origin, "unknown variable '" + name + "'");
      // A section's own line break after its opening tag is part of the tag.
      if (pos < t.size() && t[pos] == '\n') ++pos;
      std::string inner = render_range(t, pos, vars, origin, name);
      bool show = (sigil == '#') != it->second.empty();
      if (show) out += inner;
      if (pos < t.size() && t[pos] == '\n' && (out.empty() || out.back() == '\n')) ++pos;
      continue;
    }
    std::string name = trim_name(tag);
    auto it = vars.find(name);
    if (it == vars.end()) throw UserError(origin, "unknown variable '" + name + "'");
    out += it->second;
  }
  if (!closing.empty()) throw UserError(origin, "section '" + closing + "' is never closed");
  return out;
}

std::filesystem::path exe_dir() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path() : p.parent_path();
}

}  // namespace

std::string render_template(std::string_view tmpl, const PromptVars& vars, const std::string& origin) {
  std::size_t pos = 0;
  return render_range(tmpl, pos, vars, origin, "");
}

std::filesystem::path PromptLibrary::shipped_dir() {
  if (const char* env = std::getenv("BRAID_PROMPTS_DIR"); env && *env) return env;
  auto exe = exe_dir();
  for (auto candidate : {exe / ".." / "share" / "braid" / "prompts", exe / ".." / "prompts"})
    if (std::filesystem::is_regular_file(candidate / "system.md")) return candidate.lexically_normal();
  return std::filesystem::path(BRAID_SOURCE_DIR) / "prompts";
}

PromptLibrary::PromptLibrary(std::filesystem::path override_dir)
    : override_dir_(std::move(override_dir)), shipped_(shipped_dir()) {
  if (!override_dir_.empty() && !std::filesystem::is_directory(override_dir_))
    throw UserError(override_dir_.string(), "prompts_dir is not a folder");
}

std::filesystem::path PromptLibrary::path_of(const std::string& name) const {
  if (!override_dir_.empty() && std::filesystem::is_regular_file(override_dir_ / name)) return override_dir_ / name;
  return shipped_ / name;
}

bool PromptLibrary::has(const std::string& name) const { return std::filesystem::is_regular_file(path_of(name)); }

std::string PromptLibrary::text(const std::string& name) const {
  auto p = path_of(name);
  auto content = try_read_file(p);
  if (!content) throw SystemError("prompt template " + p.string() + " is missing");
  return *content;
}

std::string PromptLibrary::render(const std::string& name, const PromptVars& vars) const {
  return render_template(text(name), vars, path_of(name).string());
}

}  // namespace braid::llm
