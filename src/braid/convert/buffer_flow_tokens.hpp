// Token helpers shared by the buffer_flow*.cpp files (internal to BufferFlow).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "braid/convert/lexer.hpp"

namespace braid::convert {
struct FunctionDef;
}

namespace braid::convert::flow_tokens {

// `.` or `->`: the next name is a member.
inline bool is_member_step(const Token& t) { return t.text == "." || t.text == "->"; }
// A member call that adds an element to a sequence container (vector, deque, list, queue, stack).
inline bool sequence_fill(const std::string& m) {
  return m == "push_back" || m == "emplace_back" || m == "push" || m == "emplace" || m == "push_front" ||
         m == "emplace_front";
}
// The innermost bracket (`(`, `[`, `{`) still open before t[k], skipping balanced ones; SIZE_MAX
// when none is (file scope).
std::size_t enclosing_open(const std::vector<Token>& t, std::size_t k);
// A word that may stand before a declared name as its type (`float* p`, `Model m`): an identifier
// other than the statements' keywords (`return x;`, `else x = ...`, `delete p;`).
bool declaring_word(const Token& w);
// The token closing the bracket opened at t[open], searching before `end` (`end` when none).
std::size_t match_forward(const std::vector<Token>& t, std::size_t open, std::size_t end);
// One past the template argument list opening at code[lt] ("<"), or SIZE_MAX when it does not close
// before a token no type argument holds (`>>` closes two levels).
std::size_t after_template_args(const std::vector<Token>& code, std::size_t lt, std::size_t end);
// The class name of `Name<args>` whose `>` is code[gt], or "".
std::string template_name_before(const std::vector<Token>& code, std::size_t gt);
// Tokens [b, e) joined with single spaces.
std::string join(const std::vector<Token>& t, std::size_t b, std::size_t e);
// Top-level comma-separated pieces of tokens (b, e). With `angles` (a parameter list), a
// template's `<...>` is a bracket too (`std::array<float*, N>& bufs, size_t n` is two parameters).
std::vector<std::string> split_top(const std::vector<Token>& t, std::size_t b, std::size_t e, bool angles = false);
// The first `;` at bracket depth 0 in [from, end) (`end` when none): where a statement ends.
std::size_t statement_end(const std::vector<Token>& t, std::size_t from, std::size_t end);
// Removes casts, outer parentheses and `&`; `addr` tells whether an `&` was removed.
std::vector<Token> strip(std::vector<Token> t, bool& addr);
// `[ns ::]* name [<...>] ( args )` spanning all of t: the indices of name and of its '(';
// {SIZE_MAX, SIZE_MAX} for any other form.
std::pair<std::size_t, std::size_t> qualified_call(const std::vector<Token>& t);
// `c ? a : b` (under casts and parentheses) -> {a, b}: a pointer that is one of two buffers.
std::vector<std::string> ternary_branches(const std::string& expr);
// `base + k` / `base - k` (under casts and parentheses; the first top-level + or -) -> "base": a
// pointer into base's allocation. "" for any other form.
std::string offset_base(const std::string& expr);

// The code tokens [begin, end) of f's parameter `index` in its declaration; {0, 0} when absent.
std::pair<std::size_t, std::size_t> parameter_tokens(const std::vector<Token>& code, const FunctionDef& f,
                                                     std::size_t index);
// `&h->send` (under casts) -> `h->send`; "" when the argument is not an address taken.
std::string strip_address(const std::string& arg);

}  // namespace braid::convert::flow_tokens
