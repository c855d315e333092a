#include "braid/eval/diagnostics.hpp"

#include <sstream>
#include <vector>

namespace braid {
namespace {

enum class LineKind { Error, Other, Note, Context, Continuation };

// Does `prefix` end in a source location: ":12", ":12:5" (gcc, clang) or "(12)" (nvcc/EDG)?
bool ends_with_location(const std::string& prefix) {
  auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  std::size_t end = prefix.size();
  if (end > 0 && prefix[end - 1] == ')') {
    std::size_t i = end - 1;
    while (i > 0 && is_digit(prefix[i - 1])) --i;
    return i < end - 1 && i > 0 && prefix[i - 1] == '(';
  }
  for (int numbers = 0; numbers < 2; ++numbers) {
    std::size_t i = end;
    while (i > 0 && is_digit(prefix[i - 1])) --i;
    if (i == end || i == 0 || prefix[i - 1] != ':') return numbers > 0;
    end = i - 1;
  }
  return true;
}

// The diagnostic kind of a header line "<location>: <kind>: ...", or "" for other lines.
// (Hand-written: std::regex recurses per character and overflows on long template lines.)
std::string diagnostic_kind(const std::string& line) {
  static const char* const kinds[] = {"fatal error", "error", "warning", "note", "remark"};
  for (std::size_t pos = line.find(": "); pos != std::string::npos; pos = line.find(": ", pos + 1)) {
    for (const char* kind : kinds) {
      std::string k(kind);
      if (line.compare(pos + 2, k.size(), k) != 0) continue;
      char after = pos + 2 + k.size() < line.size() ? line[pos + 2 + k.size()] : '\0';
      if (after != ':' && after != ' ') continue;
      if (ends_with_location(line.substr(0, pos))) return k;
    }
  }
  return {};
}

LineKind classify(const std::string& line) {
  const std::string kind = diagnostic_kind(line);
  if (kind == "error" || kind == "fatal error") return LineKind::Error;
  if (kind == "note") return LineKind::Note;
  if (!kind.empty()) return LineKind::Other;
  // Chains around a diagnostic that only repeat where the code was reached from.
  if (line.rfind("In file included from", 0) == 0 || line.rfind("                 from ", 0) == 0 ||
      line.find(": In function") != std::string::npos || line.find(": In instantiation of") != std::string::npos ||
      line.find(": In member function") != std::string::npos || line.find(": At global scope") != std::string::npos ||
      line.find("required from") != std::string::npos || line.find("required by substitution") != std::string::npos ||
      line.rfind("compilation terminated", 0) == 0 || line.find(" errors detected in the compilation") != std::string::npos ||
      line.find(" error detected in the compilation") != std::string::npos)
    return LineKind::Context;
  return LineKind::Continuation;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(line);
  }
  return lines;
}

std::string cap(std::string text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  const std::string marker = "\n[... trimmed ...]\n";
  if (max_bytes <= marker.size()) return text.substr(0, max_bytes);
  auto cut = text.rfind('\n', max_bytes - marker.size());
  if (cut == std::string::npos || cut < max_bytes / 2) cut = max_bytes - marker.size();
  return text.substr(0, cut) + marker;
}

}  // namespace

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  if (from.empty()) return text;
  for (std::size_t pos = 0; (pos = text.find(from, pos)) != std::string::npos; pos += to.size())
    text.replace(pos, from.size(), to);
  return text;
}

std::string tail_text(const std::string& text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  std::size_t start = text.size() - max_bytes;
  auto newline = text.find('\n', start);
  if (newline != std::string::npos && newline - start < max_bytes / 4) start = newline + 1;
  return "[...]\n" + text.substr(start);
}

std::string trim_compiler_errors(const std::string& output, const std::string& long_path, const std::string& short_name,
                                 std::size_t max_errors, std::size_t max_bytes) {
  const std::string text = replace_all(output, long_path, short_name);
  const auto lines = lines_of(text);
  std::string kept;
  std::size_t errors = 0;
  bool keeping = false;           // inside an error diagnostic we keep
  std::size_t continuation = 0;   // lines kept after its header (source line, caret, fix-it)
  for (const auto& line : lines) {
    switch (classify(line)) {
      case LineKind::Error:
        keeping = errors < max_errors;
        if (keeping) {
          ++errors;
          continuation = 0;
          kept += line + "\n";
        }
        break;
      case LineKind::Note:
      case LineKind::Other:
      case LineKind::Context:
        keeping = false;
        break;
      case LineKind::Continuation:
        if (keeping && continuation < 4) {
          ++continuation;
          kept += line + "\n";
        }
        break;
    }
  }
  if (errors > 0) return cap(kept, max_bytes);

  // Linker errors ("undefined reference", "ld returned 1") and unknown formats.
  std::string mentions;
  for (const auto& line : lines) {
    std::string lower = line;
    for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower.find("error") != std::string::npos || lower.find("undefined reference") != std::string::npos ||
        lower.find("multiple definition") != std::string::npos)
      mentions += line + "\n";
  }
  if (!mentions.empty()) return cap(mentions, max_bytes);
  return tail_text(text, max_bytes);
}

}  // namespace braid
