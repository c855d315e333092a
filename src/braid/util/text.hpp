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

// The comment block at the top of a source file (its leading `//` lines without the markers, a
// leading #pragma once skipped), at most `max_lines` lines: the contract text of a header.
std::string leading_comment(const std::string& text, std::size_t max_lines);

}  // namespace braid
