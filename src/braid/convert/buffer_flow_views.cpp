// BufferFlow (buffer_flow.hpp): views of a buffer. A `std::span<T>` made from a pointer points into
// what the pointer points into, whatever part of it the view covers: `std::span<float>(p, n).data()`,
// `view.data()` of `std::span<float> view(p, n)`, `grads.subspan(off, n).data()`, a parameter
// `std::span<const T> in` followed to what its callers pass, a field declared as a span.
// Also a pointer offset into a buffer (`buf.get() + off`): offset_base.
// `.data()` is stripped only where the receiver is known to be a view: for any other class it is the
// class's own accessor (follow_accessor), or a container's storage braid does not follow.
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "braid/convert/buffer_flow.hpp"
#include "braid/convert/buffer_flow_tokens.hpp"

namespace braid::convert {

using namespace flow_tokens;

namespace {

// `x . name ( args )` ending t: the index of the '.' (or '->') and of the '(', or {SIZE_MAX, 0}.
std::pair<std::size_t, std::size_t> trailing_method(const std::vector<Token>& t, const std::string& name) {
  const std::size_t n = t.size();
  if (n < 5 || t[n - 1].text != ")") return {SIZE_MAX, 0};
  for (std::size_t open = n - 1; open-- > 2;) {
    if (t[open].text != "(" || match_forward(t, open, n) != n - 1) continue;
    // `first<4>()`: a template argument list between the name and '('
    std::size_t m = open - 1;
    if (t[m].text == ">")
      for (int depth = 0; m > 0; --m) {
        if (t[m].text == ">") ++depth;
        else if (t[m].text == "<" && --depth == 0) break;
      }
    if (t[m].text == "<") --m;
    if (t[m].text != name || (t[m - 1].text != "." && t[m - 1].text != "->")) return {SIZE_MAX, 0};
    return {m - 1, open};
  }
  return {SIZE_MAX, 0};
}

}  // namespace

// `using FloatView = std::span<float>;` (also under a template) names a view type as `span` does.
void BufferFlow::collect_view_types() {
  view_types_ = {"span"};
  for (std::size_t k = 0; k + 3 < code_.size(); ++k) {
    if (code_[k].text != "using" || code_[k + 1].kind != TokenKind::Identifier || code_[k + 2].text != "=") continue;
    std::size_t j = k + 3;
    while (j + 1 < code_.size() && (code_[j].text == "const" || code_[j + 1].text == "::"))
      j += code_[j].text == "const" ? 1 : 2;
    if (j < code_.size() && view_types_.count(code_[j].text)) view_types_.insert(code_[k + 1].text);
  }
}

// Whether code token `d` (an identifier) is declared there with a view type: `std::span<T> d`,
// `const std::span<const T>& d`, `FloatView d`.
bool BufferFlow::declared_view_at(std::size_t d) const {
  std::size_t j = d;
  while (j > 0 && (code_[j - 1].text == "&" || code_[j - 1].text == "&&" || code_[j - 1].text == "const")) --j;
  if (j == 0) return false;
  if (view_types_.count(code_[j - 1].text)) return code_[j - 1].kind == TokenKind::Identifier;
  return code_[j - 1].text == ">" && view_types_.count(template_name_before(code_, j - 1)) > 0;
}

bool BufferFlow::declared_view(const std::string& name, const std::string& function, int depth) const {
  if (depth < 0) return false;
  for (const FunctionDef& f : functions_) {
    if (f.name != function) continue;
    for (std::size_t d = f.name_token + 1; d < f.body_close; ++d)
      if (code_[d].text == name && code_[d].kind == TokenKind::Identifier && declared_view_at(d)) return true;
  }
  // `auto view = grads.subspan(off, n)`: a variable initialised with a view.
  if (auto it = aliases_.find(function); it != aliases_.end())
    for (const Alias& a : it->second)
      if (a.name == name && view_expression(a.init, function, depth - 1)) return true;
  return false;
}

bool BufferFlow::view_field(const std::string& field) const {
  for (const ClassBody& c : classes_)
    for (std::size_t d = c.open + 1; d < c.close; ++d)
      if (code_[d].text == field && code_[d].kind == TokenKind::Identifier && declared_view_at(d)) return true;
  return false;
}

// `std::span<T>(p, n)`, `std::span{p, n}`, `v.subspan(...)`/`first`/`last` of a view, a variable,
// parameter or field declared as a view.
bool BufferFlow::view_expression(const std::string& expr, const std::string& function, int depth) const {
  return !view_source(expr, function, depth).empty();
}

std::string BufferFlow::view_source(const std::string& expr, const std::string& function, int depth) const {
  if (depth < 0) return "";
  LexResult lr = lex(expr);
  bool addr = false;
  const std::vector<Token> t = strip(code_tokens(lr.tokens), addr);
  const std::size_t n = t.size();
  if (addr || n == 0) return "";
  // A construction: `[std::]span<T>(p, n)` or `[std::]span<T>{p, n}`: the pointer it is made from.
  std::size_t name = t[0].text == "::" ? 1 : 0;
  while (name + 2 < n && t[name].kind == TokenKind::Identifier && t[name + 1].text == "::") name += 2;
  if (view_types_.count(t[name].text)) {
    std::size_t open = name + 1;
    if (open < n && t[open].text == "<") open = after_template_args(t, open, n);
    if (open < n && (t[open].text == "(" || t[open].text == "{") && match_forward(t, open, n) == n - 1) {
      const std::vector<std::string> args = split_top(t, open, n - 1);
      return args.empty() ? "" : args.front();
    }
    return "";
  }
  // A part of a view is a view of the same buffer.
  for (const char* part : {"subspan", "first", "last"}) {
    const auto [dot, open] = trailing_method(t, part);
    if (dot == SIZE_MAX) continue;
    const std::string receiver = join(t, 0, dot);
    return view_expression(receiver, function, depth - 1) ? receiver : "";
  }
  // A name, or a field, declared as a view: itself (followed as a variable, parameter or field).
  if (n == 1 && t[0].kind == TokenKind::Identifier) return declared_view(t[0].text, function, depth) ? expr : "";
  if (n >= 3 && t[n - 1].kind == TokenKind::Identifier && (t[n - 2].text == "." || t[n - 2].text == "->") &&
      !access_path(expr, false).empty())
    return view_field(t[n - 1].text) ? expr : "";
  return "";
}

std::string BufferFlow::viewed_pointer(const std::string& expr, const std::string& function) const {
  LexResult lr = lex(expr);
  bool addr = false;
  const std::vector<Token> t = strip(code_tokens(lr.tokens), addr);
  if (addr || t.empty()) return "";
  // `view.data()`: what the view is of. `view` itself: what it was made from, or the view named.
  const auto [dot, open] = trailing_method(t, "data");
  const bool data = dot != SIZE_MAX && open + 2 == t.size();
  const std::string view = data ? join(t, 0, dot) : join(t, 0, t.size());
  const std::string source = view_source(view, function, 4);
  if (source.empty() || (!data && source == view)) return "";
  return source;
}

std::string BufferFlow::conversion_path(const std::string& path) const {
  if (path.find_first_of(".[") != std::string::npos) return "";
  const std::string cls = declared_class(path);
  for (const FunctionDef& f : functions_) {
    if (f.name != kConversionOperator || f.owner != cls || cls.empty()) continue;
    const std::vector<std::size_t> returns = return_statements(f);
    if (returns.size() != 1) return "";
    const std::size_t k = returns[0] + 1;
    bool smart = false;
    const std::string field = returned_name(k, flow_tokens::statement_end(code_, k, f.body_close), smart);
    return !field.empty() && declares_field(cls, field) ? path + "." + field : "";
  }
  return "";
}

std::string BufferFlow::index_operator_path(const std::string& path) const {
  const std::size_t bracket = path.find("[]");
  if (bracket == std::string::npos || bracket == 0 || path.find_first_of(".[") != bracket) return "";
  const std::string root = path.substr(0, bracket), cls = declared_class(root);
  std::string field;
  for (const FunctionDef& f : functions_) {
    if (f.name != kIndexOperator || f.owner != cls || cls.empty() || f.params.size() != 1) continue;
    const std::vector<std::size_t> returns = return_statements(f);
    if (returns.size() != 1) return "";
    // `return bufs_[i];`, `return this->bufs_[i];`: the field indexed by the parameter, nothing more.
    std::size_t k = returns[0] + 1;
    if (code_[k].text == "this" && code_[k + 1].text == "->") k += 2;
    if (k + 4 >= f.body_close || code_[k].kind != TokenKind::Identifier || code_[k + 1].text != "[" ||
        code_[k + 2].text != f.params[0] || code_[k + 3].text != "]" || code_[k + 4].text != ";")
      return "";
    if (!declares_field(cls, code_[k].text) || (!field.empty() && field != code_[k].text)) return "";
    field = code_[k].text;
  }
  return field.empty() ? "" : root + "." + field + path.substr(bracket);
}

std::string BufferFlow::optional_held(const std::string& expr) const {
  if (expr.find("value") == std::string::npos) return "";  // resolve_into's every step: lex only a candidate
  const std::vector<Token> t = code_tokens(lex(expr).tokens);
  const auto [dot, open] = trailing_method(t, "value");
  if (dot == SIZE_MAX || dot == 0 || open + 2 != t.size() || function_named("value") != nullptr) return "";
  return join(t, 0, dot);
}

// Whether code of `cls`'s own member functions may give `field` (or an element of it) a value:
// `field = x`, `field[i] = x`, `&field`, `&field[i]`, `field.push_back(x)`, `field.reset(p)`, a
// range-for over it, through `this->` too.
bool BufferFlow::class_sets_field(const std::string& cls, const std::string& field) const {
  static const std::set<std::string> kSetters = {"assign", "resize", "insert"};  // reset/swap/release: owner_resets
  for (const FunctionDef& f : functions_) {
    if (f.owner != cls) continue;
    for (std::size_t k = f.body_open + 1; k + 2 < f.body_close; ++k) {
      if (code_[k].text != field) continue;
      const bool via_this = k >= 2 && code_[k - 1].text == "->" && code_[k - 2].text == "this";
      if (is_member_step(code_[k - 1]) && !via_this) continue;
      const std::size_t before = via_this ? k - 3 : k - 1;
      std::size_t after = k + 1;
      while (after < f.body_close && code_[after].text == "[") after = match_forward(code_, after, f.body_close) + 1;
      const std::string& next = after < f.body_close ? code_[after].text : "";
      // `for (auto& p : field)` may set its elements: counted, as any range-for over it.
      if (code_[before].text == "&" || code_[before].text == ":" || next == "=" ||
          (is_member_step(code_[after]) && after + 1 < f.body_close &&
           (sequence_fill(code_[after + 1].text) || kSetters.count(code_[after + 1].text))))
        return true;
    }
  }
  return member_writes_.count(cls + "::" + field) > 0 || member_addressed_.count(cls + "::" + field) > 0 ||
         owner_resets(cls, field);
}

void BufferFlow::in_callers_terms(const std::string& cls, const std::string& object, Resolution& out,
                                  std::size_t from) const {
  for (std::size_t k = from; k < out.paths.size(); ++k) {
    const auto [root, rest] = split_root(out.paths[k]);
    if (!declares_field(cls, root) || class_sets_field(cls, root)) continue;
    if (const std::string base = access_path(object + " " + root, false); !base.empty()) {
      out.via.push_back(fmt::format("field {} of class {} is `{}`", root, cls, base));
      out.paths[k] = base + rest;
    }
  }
}

namespace flow_tokens {

std::string offset_base(const std::string& expr) {
  LexResult lr = lex(expr);
  if (!lr.error.empty()) return "";
  bool addr = false;
  const std::vector<Token> t = strip(code_tokens(lr.tokens), addr);
  if (addr) return "";
  int depth = 0;
  for (std::size_t i = 1; i < t.size(); ++i) {
    const std::string& x = t[i].text;
    if (x == "(" || x == "[" || x == "{") ++depth;
    else if (x == ")" || x == "]" || x == "}") --depth;
    else if (depth == 0 && (x == "?" || x == "<" || x == ">" || x == "=" || x == "," || x == "*")) return "";
    else if (depth == 0 && (x == "+" || x == "-")) return join(t, 0, i);
  }
  return "";
}

}  // namespace flow_tokens

}  // namespace braid::convert
