// BufferFlow (buffer_flow.hpp): pointer variables the file exchanges. A solver's double buffer
// (`std::swap(a, a_new)`, `tmp = a; a = a_new; a_new = tmp;`) names one allocation before the
// exchange and the other after it, so a use of either is either allocation.
#include <fmt/format.h>

#include <algorithm>

#include "braid/convert/buffer_flow.hpp"
#include "braid/convert/buffer_flow_tokens.hpp"

namespace braid::convert {

using namespace flow_tokens;

namespace {

bool statement_start(const std::vector<Token>& code, std::size_t k) {
  if (k == 0) return true;
  const std::string& before = code[k - 1].text;
  return before == ";" || before == "{" || before == "}" || before == ")";
}

}  // namespace

// At code token k: `x = v;` where x is an access path (a variable, a field, an element; no
// declaration), or `[std ::] swap ( x , y )`.
void BufferFlow::record_exchange(std::size_t k, const std::string& function, std::size_t end) {
  if (code_[k].text == "swap" && k + 1 < end && code_[k + 1].text == "(" &&
      (statement_start(code_, k) || (k >= 2 && code_[k - 1].text == "::" && code_[k - 2].text == "std"))) {
    const std::vector<std::string> args = split_top(code_, k + 1, match_forward(code_, k + 1, end));
    if (args.size() == 2 && !access_path(args[0], false).empty() && !access_path(args[1], false).empty()) {
      exchanges_.push_back(Exchange{function, args[0], args[1], k});
      exchanges_.push_back(Exchange{function, args[1], args[0], k});
    }
    return;
  }
  if (!statement_start(code_, k)) return;
  std::size_t eq = k + 1;  // past `x`, `.f`, `->f`, `[i]`: anything else is no plain access path
  while (eq < end) {
    const std::string& x = code_[eq].text;
    if ((x == "." || x == "->") && eq + 1 < end && code_[eq + 1].kind == TokenKind::Identifier) eq += 2;
    else if (x == "[") eq = match_forward(code_, eq, end) + 1;
    else break;
  }
  // `p_.reset(p);`: a smart pointer given its pointer, as `p_ = p` (followed when it is declared
  // empty: repointed()).
  if (eq < end && code_[eq].text == "(" && eq >= k + 3 && code_[eq - 1].text == "reset" && code_[eq - 2].text == ".") {
    const std::vector<std::string> args = split_top(code_, eq, match_forward(code_, eq, end));
    if (!args.empty() && args[0] != "nullptr" && args[0] != "NULL")  // `reset(p, deleter)` too
      exchanges_.push_back(Exchange{function, join(code_, k, eq - 2), args[0], k});
    return;
  }
  if (eq >= end || code_[eq].text != "=") return;
  const std::string value = join(code_, eq + 1, statement_end(code_, eq + 1, end));
  if (value == "nullptr" || value == "NULL" || value == "0") return;  // a reset points at no buffer
  exchanges_.push_back(Exchange{function, join(code_, k, eq), value, k});
}

bool BufferFlow::declared_with_value(const std::string& name) const {
  for (std::size_t i = 1; i + 2 < code_.size(); ++i) {
    if (code_[i].text != name || code_[i + 1].text != "=") continue;
    const Token& before = code_[i - 1];
    // `T* name = `, `auto name = `, `std::shared_ptr<T> name = `; anything else is no declaration.
    if (before.text != "*" && before.text != "&" && before.text != ">" && before.kind != TokenKind::Identifier)
      continue;
    const std::string& v = code_[i + 2].text;
    if (v != "nullptr" && v != "NULL" && v != "0") return true;
  }
  return false;
}

bool BufferFlow::local_of(const std::string& name, const std::string& function) const {
  for (const FunctionDef& f : functions_) {
    if (f.name != function || !f.owner.empty() || !f.enclosing.empty()) continue;
    if (std::find(f.params.begin(), f.params.end(), name) != f.params.end()) return false;
    for (std::size_t k = f.body_open + 1; k + 1 < f.body_close; ++k) {
      if (code_[k].text != name) continue;
      // `T* name;`, `T *a, *name = ..;`, `T name[n];`: a declarator, after a type or a `*`.
      std::size_t w = k - 1;
      while (w > f.body_open && code_[w].text == "*") --w;
      const std::string& next = code_[k + 1].text;
      const bool declarator =
          (declaring_word(code_[w]) || code_[w].text == ">" || (w < k - 1 && code_[w].text == ",")) &&
          (next == ";" || next == "," || next == "=" || next == "[");
      if (!declarator || is_member_step(code_[w])) continue;
      // `static T* name;` keeps its value from call to call: not a plain local.
      for (std::size_t b = w; b > f.body_open && code_[b].text != ";" && code_[b].text != "{" && code_[b].text != "}";
           --b)
        if (code_[b].text == "static") return false;
      return true;
    }
  }
  return false;
}

bool BufferFlow::given_to_element_reader(std::size_t k) const {
  if ((code_[k - 1].text != "(" && code_[k - 1].text != ",") || (code_[k + 1].text != "," && code_[k + 1].text != ")"))
    return false;
  const std::size_t open = enclosing_open(code_, k);
  if (open == SIZE_MAX || open == 0 || code_[open].text != "(") return false;
  const std::string& callee = code_[open - 1].text;
  std::size_t index = 0;  // which argument
  for (std::size_t j = open + 1; j < k; ++j) {
    if (code_[j].text == "(" || code_[j].text == "[" || code_[j].text == "{") j = match_forward(code_, j, k);
    else if (code_[j].text == ",") ++index;
  }
  bool any = false;
  for (const FunctionDef& f : functions_) {
    if (f.name != callee) continue;
    if (index >= f.params.size() || f.params[index].empty()) return false;
    any = true;
    const std::string& param = f.params[index];
    for (std::size_t j = f.body_open + 1; j + 1 < f.body_close; ++j) {
      if (code_[j].text != param || is_member_step(code_[j - 1])) continue;
      if (code_[j + 1].text != "[") return false;  // given on, or its address taken
      const std::size_t close = match_forward(code_, j + 1, f.body_close);
      if (close + 1 < f.body_close && (code_[close + 1].text == "=" || code_[close + 1].text == "[")) return false;
      if (code_[j - 1].text == "&") return false;
    }
  }
  return any;
}

bool BufferFlow::elements_only_assigned(const std::string& name) const {
  bool declared = false;
  for (std::size_t k = 1; k + 2 < code_.size(); ++k) {
    if (code_[k].text != name || is_member_step(code_[k - 1]) || code_[k - 1].text == "::") continue;
    const std::string& prev = code_[k - 1].text;
    const std::string& next = code_[k + 1].text;
    const bool declaration = declaring_word(code_[k - 1]) || prev == ">" || prev == "*";
    if (declaration) {
      // No value but a size: `[N]`, `{}`, `(n)`, `= {}`, or none.
      std::size_t e = k + 1;
      if (code_[e].text == "[") e = match_forward(code_, e, code_.size()) + 1;
      if (code_[e].text == "{" && code_[e + 1].text == "}") e += 2;
      else if (code_[e].text == "=" && code_[e + 1].text == "{" && e + 2 < code_.size() && code_[e + 2].text == "}")
        e += 3;
      else if (code_[e].text == "(" && split_top(code_, e, match_forward(code_, e, code_.size())).size() <= 1)
        e = match_forward(code_, e, code_.size()) + 1;
      if (code_[e].text != ";") return false;
      declared = true;
      continue;
    }
    if (next == "[") {  // `name[i] = v;` (an exchange) or a read of an element
      const std::size_t close = match_forward(code_, k + 1, code_.size());
      if (close + 1 < code_.size() && code_[close + 1].text == "=" && statement_start(code_, k)) continue;
    }
    // `for (auto& g : name)`: the loop variable is only assigned (`g = v;`) or read in its body.
    if (prev == ":" && next == ")") {
      std::size_t open = k;
      while (open > 0 && code_[open].text != "(") --open;
      const std::size_t var = k - 2;
      if (open > 0 && code_[open - 1].text == "for" && code_[var].kind == TokenKind::Identifier) {
        const std::size_t body_end = for_body_end(k + 1, code_.size());
        bool reference = false;  // a copy's writes leave the elements as they are
        for (std::size_t j = open + 1; j < var; ++j)
          reference = reference || code_[j].text == "&" || code_[j].text == "&&";
        bool plain = true;
        if (!reference) continue;
        for (std::size_t j = k + 2; j < body_end && plain; ++j)
          if (code_[j].text == code_[var].text && !is_member_step(code_[j - 1]))
            plain = (code_[j + 1].text == "=" && statement_start(code_, j)) || read_only_use(j);
        if (plain) continue;
      }
      return false;
    }
    // `std::for_each(name.begin(), name.end(), [](T* g) {...})`: a lambda given copies reads it.
    if (next == "." && k + 4 < code_.size() && code_[k + 3].text == "(" && code_[k + 4].text == ")" &&
        (code_[k + 2].text == "begin" || code_[k + 2].text == "end" || code_[k + 2].text == "cbegin" ||
         code_[k + 2].text == "cend")) {
      const std::size_t call = enclosing_open(code_, k);
      const std::size_t close = call == SIZE_MAX ? SIZE_MAX : match_forward(code_, call, code_.size());
      const auto lambda = std::find_if(unnamed_lambdas_.begin(), unnamed_lambdas_.end(),
                                       [&](const auto& l) { return l.second + 1 == close; });
      const std::optional<ForEachVisit> v =
          lambda == unnamed_lambdas_.end() ? std::nullopt : for_each_visit(lambda->first, lambda->second);
      if (v && v->by_value && v->range == name) continue;
    }
    if (!read_only_use(k) && !given_to_element_reader(k)) return false;
  }
  return declared;
}

BufferFlow::Resolution BufferFlow::exchanged_with(const std::vector<std::string>& paths) const {
  Resolution out;
  std::vector<std::string> pending = paths, seen = paths;
  while (!pending.empty()) {  // `a = b; b = c;`: c too
    const std::string path = pending.back();
    pending.pop_back();
    for (const Exchange& x : exchanges_) {
      const Resolution lhs = resolve(x.lhs, x.function, x.token);
      if (std::none_of(lhs.paths.begin(), lhs.paths.end(), [&](const std::string& p) { return path_matches(p, path); }))
        continue;
      Resolution value;
      if (const FunctionDef* h = access_path(x.value, false).empty() ? returning_helper(x.value) : nullptr) {
        std::vector<std::string> stack;                     // `x = device_alloc<float>(n)`: what the helper returns
        follow_namesakes_returns(*h, "", 6, value, stack);  // resolve()'s depth
        if (!value.reason.empty()) value.paths.clear();
      } else {
        value = resolve(x.value, x.function, x.token);
      }
      if (!value.reason.empty() || value.paths.empty()) {
        if (out.reason.empty())
          out.reason = fmt::format("`{}` is given `{}` at line {}, which braid cannot follow", x.lhs, x.value,
                                   code_[x.token].line);
        continue;
      }
      for (const std::string& p : value.paths)
        if (std::find(seen.begin(), seen.end(), p) == seen.end()) {
          seen.push_back(p);
          pending.push_back(p);
          out.paths.push_back(p);
          out.via.push_back(
              fmt::format("{} is given {} (line {}, in {}())", x.lhs, x.value, code_[x.token].line, x.function));
        }
    }
  }
  return out;
}

}  // namespace braid::convert
