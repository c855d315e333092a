// BufferFlow (buffer_flow.hpp) on tuples: an allocation helper returning several buffers at once
// (`return {send, recv};`, `std::make_tuple(a, b)`, `std::make_pair(a, b)`), taken apart with a
// structured binding (`auto [send, recv] = make_buffers(n);`), `std::tie(send, recv) = ...` or
// `std::get<1>(...)`: each element is followed into the helper's returns.
#include <fmt/format.h>

#include <cctype>
#include <set>
#include <utility>

#include "braid/convert/buffer_flow.hpp"
#include "braid/convert/buffer_flow_tokens.hpp"

namespace braid::convert {

using namespace flow_tokens;

// `names = helper(args);` with the call at code token `rhs` and the names' statement at k: each name
// (one per element; "" skips one) is `std::get<i>(helper(args))` to the end of the block. False when
// the right side is not a call of a helper of this file, or the statement is not in a block.
bool BufferFlow::alias_tuple_elements(std::size_t k, std::size_t rhs, const std::vector<std::string>& names,
                                      const FunctionDef& f) {
  if (rhs >= f.body_close || code_[rhs].kind != TokenKind::Identifier) return false;
  const std::size_t end = statement_end(code_, rhs, f.body_close);
  const std::string call = join(code_, rhs, end);
  const std::size_t brace = enclosing_open(code_, k);
  if (end >= f.body_close || returning_helper(call) == nullptr || brace == SIZE_MAX || code_[brace].text != "{")
    return false;
  const std::size_t scope_end = match_forward(code_, brace, f.body_close);
  for (std::size_t j = 0; j < names.size(); ++j)
    if (!names[j].empty())
      aliases_[f.name].push_back(Alias{names[j], fmt::format("std :: get < {} > ( {} )", j, call), k, scope_end});
  return true;
}

// `auto [send, recv] = make_buffers(n);` at code token k (`auto`), the names between code_[lb] and code_[rb].
bool BufferFlow::record_tuple_binding(std::size_t k, std::size_t lb, std::size_t rb, const FunctionDef& f) {
  if (rb + 3 >= f.body_close || code_[rb + 1].text != "=") return false;
  std::vector<std::string> names;
  for (std::size_t i = lb + 1; i < rb; ++i)
    if (code_[i].kind == TokenKind::Identifier) names.push_back(code_[i].text);
  return alias_tuple_elements(k, rb + 2, names, f);
}

// `std::tie(send, recv) = make_buffers(n);` at code token k (`tie`): the same, into variables declared
// before; `std::ignore` (or any part that is not a plain name) takes no alias.
void BufferFlow::record_tie_assignment(std::size_t k, const FunctionDef& f) {
  if (code_[k].text != "tie" || k + 1 >= f.body_close || code_[k + 1].text != "(" ||
      (k >= 2 && code_[k - 1].text == "::" && code_[k - 2].text != "std"))
    return;
  const std::size_t close = match_forward(code_, k + 1, f.body_close);
  if (close + 2 >= f.body_close || code_[close + 1].text != "=") return;
  std::vector<std::string> names = split_top(code_, k + 1, close);
  for (std::string& part : names)
    if (part.find_first_of(" :.[(*&") != std::string::npos || part == "ignore") part.clear();
  alias_tuple_elements(k, close + 2, names, f);
}

// `std::get<I>(helper(args))`, or of a variable given the helper's result (`auto bufs = helper(args);`):
// element I of what the helper returns. False when `expr` has no such form.
bool BufferFlow::resolve_tuple_element(const std::string& expr, const std::string& function, std::size_t at, int depth,
                                       Resolution& out, std::vector<std::string>& stack) const {
  if (expr.find("get") == std::string::npos) return false;  // resolve_into's every step: lex only a candidate
  const std::vector<Token> t = code_tokens(lex(expr).tokens);
  if (t.size() < 9 || t[0].text != "std" || t[1].text != "::" || t[2].text != "get" || t[3].text != "<" ||
      t[4].kind != TokenKind::Number || t[5].text != ">" || t[6].text != "(" ||
      match_forward(t, 6, t.size()) + 1 != t.size())
    return false;
  std::string whole = join(t, 7, t.size() - 1);
  if (const Alias* a = t.size() == 9 ? nearest_alias(function, whole, at) : nullptr; a && returning_helper(a->init)) {
    out.via.push_back(fmt::format("{} = {} (line {})", whole, a->init, code_[a->token].line));
    whole = a->init;
  }
  const FunctionDef* helper = returning_helper(whole);
  if (helper == nullptr) {
    out.reason =
        fmt::format("`{}` takes an element of `{}`, which is not what a helper of this file returns", expr, whole);
    return true;
  }
  out.via.push_back(fmt::format("`{}` is element {} of what {}() returns", expr, t[4].text, helper->name));
  follow_namesakes_returns(*helper, "", depth - 1, out, stack, std::stoi(t[4].text));
  return true;
}

// Element `element` of a returned value [b, e): `{a, b}`, `std::make_tuple(a, b)`, `std::pair<T*, U*>(a, b)`;
// "" for any other value.
std::string BufferFlow::returned_element(std::size_t b, std::size_t e, int element) const {
  static const std::set<std::string> kMakers = {"make_tuple", "make_pair", "tuple", "pair", "forward_as_tuple"};
  std::size_t open = b;
  if (open + 1 < e && code_[open].text == "std" && code_[open + 1].text == "::") open += 2;
  if (open < e && kMakers.count(code_[open].text)) {
    ++open;
    if (open < e && code_[open].text == "<") open = after_template_args(code_, open, e);
  }
  if (open >= e || (code_[open].text != "{" && code_[open].text != "(") || match_forward(code_, open, e) + 1 != e)
    return "";
  const std::vector<std::string> parts = split_top(code_, open, e - 1);
  return element >= 0 && (std::size_t)element < parts.size() ? parts[(std::size_t)element] : "";
}

std::string BufferFlow::pair_member(std::size_t b, std::size_t e, std::string& rest) const {
  for (const auto& [member, index] : {std::pair<std::string, int>{".first", 0}, {".second", 1}}) {
    if (!rest.starts_with(member) || (rest.size() > member.size() &&
                                      (std::isalnum((unsigned char)rest[member.size()]) || rest[member.size()] == '_')))
      continue;
    const std::string part = returned_element(b, e, index);
    if (part.empty()) break;
    rest = rest.substr(member.size());
    return part;
  }
  return join(code_, b, e);
}

}  // namespace braid::convert
