// Token helpers shared by buffer_flow.cpp and buffer_flow_members.cpp (internal to BufferFlow).
#pragma once
#include <string>
#include <vector>

#include "braid/convert/lexer.hpp"

namespace braid::convert::flow_tokens {

// The token closing the bracket opened at t[open], searching before `end` (`end` when none).
std::size_t match_forward(const std::vector<Token>& t, std::size_t open, std::size_t end);
// Tokens [b, e) joined with single spaces.
std::string join(const std::vector<Token>& t, std::size_t b, std::size_t e);
// Top-level comma-separated pieces of tokens (b, e).
std::vector<std::string> split_top(const std::vector<Token>& t, std::size_t b, std::size_t e);

}  // namespace braid::convert::flow_tokens
