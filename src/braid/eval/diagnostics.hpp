// Diagnostics trimmed to what the next mutation needs: the first errors with their locations,
// not pages of notes and template backtraces.
#pragma once
#include <cstddef>
#include <string>

namespace braid {

// From a compiler's output (gcc, clang or nvcc): the first `max_errors` error diagnostics with
// their source and caret lines; notes, warnings, "In file included from" and "required from"
// chains dropped; `long_path` replaced by `short_name` (the candidate's file in its work folder
// becomes "program.cpp"); at most `max_bytes`. Linker errors and unknown formats fall back to
// the lines that mention an error, then to the output's tail.
std::string trim_compiler_errors(const std::string& output, const std::string& long_path = "",
                                 const std::string& short_name = "", std::size_t max_errors = 4,
                                 std::size_t max_bytes = 3072);

// The last `max_bytes` of `text`, starting at a line boundary where one is near.
std::string tail_text(const std::string& text, std::size_t max_bytes);

// Every occurrence of `from` replaced by `to`.
std::string replace_all(std::string text, const std::string& from, const std::string& to);

}  // namespace braid
