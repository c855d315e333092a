// BufferFlow (buffer_flow.hpp): which statements run conditionally (bodies of if/else/switch, `?:`
// operands, the rest of a loop body after a conditional `continue`/`break`) and under which
// conditions (guards()), read by the rank pass to tell conditions every rank evaluates alike.
#include <algorithm>
#include <cctype>
#include <set>
#include <vector>

#include "braid/convert/buffer_flow.hpp"
#include "braid/convert/buffer_flow_tokens.hpp"

namespace braid::convert {

using namespace flow_tokens;

namespace {

using Guards = std::vector<std::size_t>;  // guards(): if conditions' `(`, or kUnknownGuard

// The else at code[e] runs under the negations of its chain's conditions (`if (A) {} else if (B) {}
// else`), alike where they are: their `(`s when every if has a braced body, else kUnknownGuard.
Guards else_chain(const std::vector<Token>& code, std::size_t e) {
  Guards conds;
  for (int n = 0; n < 64; ++n) {
    if (e < 1 || code[e - 1].text != "}") return {BufferFlow::kUnknownGuard};
    const std::size_t body = enclosing_open(code, e - 1);
    if (body == SIZE_MAX || body < 1 || code[body - 1].text != ")") return {BufferFlow::kUnknownGuard};
    const std::size_t cond = enclosing_open(code, body - 1);
    if (cond == SIZE_MAX || cond < 1 || code[cond - 1].text != "if") return {BufferFlow::kUnknownGuard};
    conds.push_back(cond);
    if (cond < 2 || code[cond - 2].text != "else") return conds;
    e = cond - 2;
  }
  return {BufferFlow::kUnknownGuard};
}

// An if's body (condition at code[q]): its condition, and for an else-if the chain's before it.
Guards if_guards(const std::vector<Token>& code, std::size_t q) {
  Guards g = {q};
  if (q > 1 && code[q - 2].text == "else") {
    const Guards before = else_chain(code, q - 2);
    g.insert(g.end(), before.begin(), before.end());
  }
  return g;
}

// The return at code[r] leaves with an error (`return 1;`, `return -1;`, `return EXIT_FAILURE;`,
// `return err;`): the program's failure path, not a role some ranks take.
bool error_return(const std::vector<Token>& code, std::size_t r) {
  const std::size_t end = statement_end(code, r, code.size());
  if (end == r + 2 && code[r + 1].kind == TokenKind::Number) return code[r + 1].text != "0";
  if (end == r + 3 && code[r + 1].text == "-" && code[r + 2].kind == TokenKind::Number) return true;
  for (std::size_t k = r + 1; k < end; ++k) {
    std::string w = code[k].text;
    std::transform(w.begin(), w.end(), w.begin(), [](unsigned char c) { return (char)std::tolower(c); });
    if (code[k].kind == TokenKind::Identifier &&
        (w.find("err") != std::string::npos || w.find("fail") != std::string::npos))
      return true;
  }
  return false;
}

// The `{` at code[open] opens an if's or an else's body.
bool if_body(const std::vector<Token>& code, std::size_t open) {
  if (open > 0 && code[open - 1].text == "else") return true;
  if (open == 0 || code[open - 1].text != ")") return false;
  const std::size_t cond = enclosing_open(code, open - 1);
  return cond != SIZE_MAX && cond > 0 && code[cond - 1].text == "if";
}

// `if (color == NCCL_SPLIT_NOCOLOR) return 0;` or `if (rank >= workers) { serve(); return 0; }` (the
// return at code[i] ends the if's body, directly in it): the rest of the enclosing block runs where
// the if did not, under its conditions (after_return: guards that do not make the code conditional
// by themselves; the rank pass reads them). An error return is the program's failure path. True
// when the guards changed.
bool guard_rest_after_return(const std::vector<Token>& code, std::size_t i, const std::vector<Guards>& brace_guard,
                             const std::vector<std::pair<std::size_t, Guards>>& unbraced,
                             std::vector<Guards>& after_return, int& returned) {
  if (error_return(code, i)) return false;
  const Guards* body = nullptr;
  std::size_t level = brace_guard.size();  // the block the if is in: brace_guard[level - 1]
  if (!unbraced.empty() && unbraced.back().first == brace_guard.size() &&
      (code[i - 1].text == ")" || code[i - 1].text == "else")) {
    body = &unbraced.back().second;
  } else if (const std::size_t open = enclosing_open(code, i);
             open != SIZE_MAX && code[open].text == "{" && if_body(code, open) && !brace_guard.back().empty()) {
    const std::size_t end = statement_end(code, i, code.size());
    if (end + 1 < code.size() && code[end + 1].text == "}") body = &brace_guard.back(), --level;
  }
  if (body == nullptr || body->empty() || level < 1) return false;
  Guards& rest = after_return[level - 1];
  if (rest.empty()) ++returned;
  rest.insert(rest.end(), body->begin(), body->end());
  return true;
}

}  // namespace

// Conditional regions: braced or unbraced bodies of if/else/switch, and `?:` operands; for each
// conditional token, the conditions it runs under (guards()).
void BufferFlow::mark_conditionals() {
  const std::vector<Token>& code = code_;
  std::size_t i = 0;
  // Per open '{': what it runs under (if conditions, or kUnknownGuard); empty when not a guard.
  std::vector<Guards> brace_guard;
  // Per open '{': the conditions of returns before, in its block (guard_rest_after_return); how many are set.
  std::vector<Guards> after_return;
  int returned = 0;
  int cond_depth = 0;
  // Unbraced bodies end at ';' at this brace depth; each with what it runs under.
  std::vector<std::pair<std::size_t, Guards>> unbraced;
  // An if/switch's own parenthesised condition runs whenever the statement does
  // (`if (cudaMalloc(&p, n) != cudaSuccess) exit(1);` allocates on every rank).
  std::size_t condition_until = 0, condition_open = 0;
  bool condition_in = false;
  std::vector<std::size_t> condition_guards;  // what the condition itself runs under
  std::vector<std::size_t> now;               // what the code runs under now, rebuilt when a body comes or goes
  bool changed = true;
  const auto current = [&]() -> const std::vector<std::size_t>& {
    if (!changed) return now;
    now.clear();
    // Innermost first: unbraced bodies sit inside the braces open around them.
    for (auto it = unbraced.rbegin(); it != unbraced.rend(); ++it)
      now.insert(now.end(), it->second.begin(), it->second.end());
    for (auto it = brace_guard.rbegin(); it != brace_guard.rend(); ++it) now.insert(now.end(), it->begin(), it->end());
    for (auto it = after_return.rbegin(); it != after_return.rend(); ++it)
      now.insert(now.end(), it->begin(), it->end());
    changed = false;
    return now;
  };
  // Consecutive tokens mostly run under the same guards: each token names its set.
  guard_set_.assign(code.size(), 0);
  guard_sets_ = {{}};
  const auto note_guards = [&](std::size_t at, const std::vector<std::size_t>& g) {
    const std::vector<std::size_t> unknown = {kUnknownGuard};
    const std::vector<std::size_t>& set = g.empty() ? unknown : g;
    if (guard_sets_.back() != set) guard_sets_.push_back(set);
    guard_set_[at] = static_cast<std::uint32_t>(guard_sets_.size() - 1);
  };
  for (i = 0; i < code.size(); ++i) {
    const std::string& x = code[i].text;
    bool in = cond_depth > 0 || !unbraced.empty();
    std::vector<std::size_t> g;
    const bool in_condition = i > 0 && i <= condition_until;
    if (in_condition) in = condition_in;
    if (x == "{") {
      Guards guard;
      if (i > 0 && code[i - 1].text == "else") guard = else_chain(code, i - 1);
      if (i > 0 && code[i - 1].text == ")") {
        int d = 0;
        std::size_t q = i - 1;
        for (;; --q) {
          if (code[q].text == ")") ++d;
          else if (code[q].text == "(" && --d == 0) break;
          if (q == 0) break;
        }
        if (q > 0 && code[q - 1].text == "if") guard = if_guards(code, q);
        if (q > 0 && code[q - 1].text == "switch") guard = {kUnknownGuard};
      }
      if (!guard.empty()) ++cond_depth;
      brace_guard.push_back(std::move(guard));
      after_return.emplace_back();
      changed = true;
    } else if (x == "}") {
      if (!brace_guard.empty()) {
        if (!brace_guard.back().empty()) --cond_depth;
        if (!after_return.back().empty()) --returned;
        brace_guard.pop_back();
        after_return.pop_back();
        changed = true;
      }
    } else if ((x == "if" || x == "switch") && i + 1 < code.size() && code[i + 1].text == "(") {
      const std::size_t close = match_forward(code, i + 1, code.size());
      condition_until = close;
      condition_in = in;
      condition_open = i + 1;
      condition_guards = current();
      if (close + 1 < code.size() && code[close + 1].text != "{") {
        unbraced.push_back({brace_guard.size(), x == "if" ? if_guards(code, condition_open) : Guards{kUnknownGuard}});
        changed = true;
      }
    } else if (x == "else" && i + 1 < code.size() && code[i + 1].text != "{" && code[i + 1].text != "if") {
      unbraced.push_back({brace_guard.size(), else_chain(code, i)});
      changed = true;
      in = true;
    } else if (x == "?") {
      in = true;
      g = {kUnknownGuard};
    } else if ((x == "continue" || x == "break") && i + 1 < code.size() && code[i + 1].text == ";") {
      // `if (rank == 0) continue;` (or `{ continue; }`): the rest of the loop body runs under that
      // if's conditions too (an allocation after it is made on some ranks only).
      const bool braced = code[i - 1].text == "{" && i + 2 < code.size() && code[i + 2].text == "}";
      const Guards skip = braced ? brace_guard.back() : !unbraced.empty() ? unbraced.back().second : Guards{};
      const std::size_t target = braced ? brace_guard.size() - 1 : brace_guard.size();
      if (!skip.empty() && target >= 1 && (braced || unbraced.back().first == brace_guard.size())) {
        Guards& rest = brace_guard[target - 1];
        if (rest.empty()) ++cond_depth;
        rest.insert(rest.end(), skip.begin(), skip.end());
        changed = true;
      }
    }
    if (x == "return" && guard_rest_after_return(code, i, brace_guard, unbraced, after_return, returned))
      changed = true;
    conditional_[i] = in;
    if (in || returned > 0) note_guards(i, !g.empty() ? g : in_condition ? condition_guards : current());
    if (x == ";" && !unbraced.empty() && unbraced.back().first == brace_guard.size()) {
      unbraced.pop_back();
      changed = true;
    }
  }
  mark_short_circuits();
}

// `if (setup_comms() || setup_fields(n)) MPI_Abort(...)`: a `||` at the top of an if's condition
// whose body leaves (abort, exit, return, goto, throw). A rank that skips the right operand takes
// that body, so every rank that goes on has run it.
bool BufferFlow::error_exit_condition(std::size_t op) const {
  static const std::set<std::string> kLeaves = {"MPI_Abort", "exit", "abort", "_exit", "quick_exit",
                                                "return",    "goto", "throw", "std",   "assert"};
  const std::vector<Token>& code = code_;
  const std::size_t open = enclosing_open(code, op);
  if (open == SIZE_MAX || open == 0 || code[open].text != "(" || code[open - 1].text != "if") return false;
  const std::size_t close = match_forward(code, open, code.size());
  std::size_t end = close + 1;
  if (end < code.size() && code[end].text == "{") end = match_forward(code, end, code.size());
  while (end < code.size() && code[end].text != ";" && code[end].text != "}") ++end;
  for (std::size_t k = close + 1; k < end && k < code.size(); ++k)
    if (kLeaves.count(code[k].text) &&
        (code[k].text != "std" || (k + 2 < end && (code[k + 2].text == "exit" || code[k + 2].text == "abort"))))
      return true;
  return false;
}

// What runs only when an operand says so: the right operand of `&&` and `||`, both branches of
// `?:` (`if (alloc(&a) != ok || (rank == 0 && alloc(&b) != ok))` allocates b on rank 0 only), up to
// the end of the enclosing expression. Their guards are unknown. `T&& name` declares a reference;
// an operand after a CUDA or NCCL success test, or of an error exit's `||` (error_exit_condition),
// runs on every rank that goes on.
void BufferFlow::mark_short_circuits() {
  const std::vector<Token>& code = code_;
  static const std::set<std::string> kTypes = {"auto", "int", "float", "double", "char", "bool", "void", "size_t", ">"};
  for (std::size_t i = 1; i + 1 < code.size(); ++i) {
    const std::string& x = code[i].text;
    if (x != "&&" && x != "||" && x != "?") continue;
    if (x == "&&" && (kTypes.count(code[i - 1].text) || is_class(code[i - 1].text))) continue;
    // `a() != cudaSuccess || b() != cudaSuccess`: b runs wherever a succeeded, every rank on the
    // path that goes on (a failure is the program's error path).
    const bool success = code[i - 1].text == "cudaSuccess" || code[i - 1].text == "ncclSuccess";
    if (i >= 2 && success && code[i - 2].text == (x == "||" ? "!=" : "==")) continue;
    if (x == "||" && error_exit_condition(i)) continue;
    int depth = 0;
    for (std::size_t k = i + 1; k < code.size(); ++k) {
      const std::string& y = code[k].text;
      if (y == "(" || y == "[" || y == "{") ++depth;
      else if ((y == ")" || y == "]" || y == "}") && --depth < 0) break;
      else if (depth == 0 && (y == ";" || y == "," || (x != "?" && (y == "?" || y == ":")))) break;
      conditional_[k] = true;
      std::vector<std::size_t> g = guards(k);
      if (std::find(g.begin(), g.end(), kUnknownGuard) != g.end()) continue;
      g.push_back(kUnknownGuard);
      guard_sets_.push_back(g);
      guard_set_[k] = static_cast<std::uint32_t>(guard_sets_.size() - 1);
    }
  }
}

const std::vector<std::size_t>& BufferFlow::guards(std::size_t at) const {
  return guard_sets_[at < guard_set_.size() ? guard_set_[at] : 0];
}

}  // namespace braid::convert
