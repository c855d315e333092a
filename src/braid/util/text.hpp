// Whitespace trimming shared by the parsers (markers, LLM answers, tool output).
#pragma once
#include <string>
#include <string_view>

namespace braid {

inline bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v'; }
std::string_view trim_left(std::string_view s);
std::string_view trim_right(std::string_view s);
std::string_view trim(std::string_view s);
// Owning copy of trim(s).
inline std::string trimmed(std::string_view s) { return std::string(trim(s)); }

}  // namespace braid
