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

// `s` with every byte sequence that is not valid UTF-8 (stray bytes, Latin-1 text, overlong
// forms, surrogates, truncated sequences) replaced by U+FFFD, so it can go into JSON.
std::string valid_utf8(std::string_view s);
// The longest prefix of `s` of at most `max_bytes` bytes that does not cut a UTF-8 sequence.
std::string_view utf8_prefix(std::string_view s, std::size_t max_bytes);

// The comment block at the top of a source file (its leading `//` lines without the markers, a
// leading #pragma once skipped), at most `max_lines` lines: the contract text of a header.
std::string leading_comment(const std::string& text, std::size_t max_lines);

}  // namespace braid
