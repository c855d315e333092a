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
