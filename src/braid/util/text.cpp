#include "braid/util/text.hpp"

#include <sstream>

namespace braid {

std::string_view trim_left(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size() && is_space(s[i])) ++i;
  return s.substr(i);
}

std::string_view trim_right(std::string_view s) {
  std::size_t n = s.size();
  while (n > 0 && is_space(s[n - 1])) --n;
  return s.substr(0, n);
}

std::string_view trim(std::string_view s) { return trim_right(trim_left(s)); }

namespace {
// Length of the valid UTF-8 sequence at s[i], or 0 when none starts there (RFC 3629 table).
std::size_t utf8_sequence(std::string_view s, std::size_t i) {
  auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return 1;
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c == 0xE0) n = 3, lo = 0xA0;
  else if (c == 0xED) n = 3, hi = 0x9F;  // no surrogates
  else if (c >= 0xE1 && c <= 0xEF) n = 3;
  else if (c == 0xF0) n = 4, lo = 0x90;
  else if (c >= 0xF1 && c <= 0xF3) n = 4;
  else if (c == 0xF4) n = 4, hi = 0x8F;
  else return 0;
  if (i + n > s.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  return n;
}
}  // namespace

std::string valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    std::size_t n = utf8_sequence(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD for one bad byte
      ++i;
    } else {
      out.append(s.data() + i, n);
      i += n;
    }
  }
  return out;
}

std::string_view utf8_prefix(std::string_view s, std::size_t max_bytes) {
  if (s.size() <= max_bytes) return s;
  std::size_t end = max_bytes;
  // Step back over continuation bytes to the start of the sequence that crosses the cut.
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
  return s.substr(0, end);
}

std::string leading_comment(const std::string& text, std::size_t max_lines) {
  std::istringstream in(text);
  std::string out;
  std::size_t n = 0;
  bool started = false;
  for (std::string line; std::getline(in, line) && n < max_lines;) {
    auto first = line.find_first_not_of(" \t");
    if (first == std::string::npos) {
      if (started) out += "\n";
      continue;
    }
    if (line.compare(first, 2, "//") != 0) {
      if (started || line.compare(first, 1, "#") != 0) break;  // skip a leading #pragma once
      continue;
    }
    started = true;
    std::string body = line.substr(first + 2);
    if (!body.empty() && body[0] == ' ') body.erase(0, 1);
    out += body + "\n";
    ++n;
  }
  return out;
}

}  // namespace braid
