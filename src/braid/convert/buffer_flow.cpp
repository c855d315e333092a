#include "braid/convert/buffer_flow.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "braid/convert/buffer_flow_tokens.hpp"

namespace braid::convert {

namespace flow_tokens {

std::size_t match_forward(const std::vector<Token>& t, std::size_t open, std::size_t end) {
  const std::string o = t[open].text;
  const std::string c = o == "(" ? ")" : o == "[" ? "]" : o == "{" ? "}" : ">";
  int depth = 0;
  for (std::size_t i = open; i < end; ++i) {
    if (t[i].text == o) ++depth;
    else if (t[i].text == c && --depth == 0) return i;
  }
  return end;
}

std::pair<std::size_t, std::size_t> qualified_call(const std::vector<Token>& t) {
  const std::pair<std::size_t, std::size_t> none{SIZE_MAX, SIZE_MAX};
  std::size_t name = !t.empty() && t[0].text == "::" ? 1 : 0;
  while (name + 2 < t.size() && t[name].kind == TokenKind::Identifier && t[name + 1].text == "::") name += 2;
  if (name >= t.size() || t[name].kind != TokenKind::Identifier) return none;
  std::size_t open = name + 1;
  if (open < t.size() && t[open].text == "<") {
    int depth = 0;
    for (; open < t.size(); ++open) {
      if (t[open].text == "<") ++depth;
      else if (t[open].text == ">" && --depth == 0) break;
      else if (t[open].text == ">>" && (depth -= 2) <= 0) break;
    }
    ++open;
  }
  if (open >= t.size() || t[open].text != "(" || match_forward(t, open, t.size()) + 1 != t.size()) return none;
  return {name, open};
}

std::size_t statement_end(const std::vector<Token>& t, std::size_t from, std::size_t end) {
  std::size_t e = from;
  for (int depth = 0; e < end && !(depth == 0 && t[e].text == ";"); ++e)
    depth += t[e].text == "(" || t[e].text == "[" || t[e].text == "{"   ? 1
             : t[e].text == ")" || t[e].text == "]" || t[e].text == "}" ? -1
                                                                        : 0;
  return e;
}

std::size_t after_template_args(const std::vector<Token>& code, std::size_t lt, std::size_t end) {
  int depth = 0;
  for (std::size_t j = lt; j < end; ++j) {
    const std::string& x = code[j].text;
    if (x == "<") ++depth;
    else if (x == ">" || x == ">>") depth -= (int)x.size();
    else if (x == ";" || x == "{" || x == "}" || x == "(" || x == ")") return SIZE_MAX;
    if (depth <= 0) return depth == 0 ? j + 1 : SIZE_MAX;
  }
  return SIZE_MAX;
}

std::string template_name_before(const std::vector<Token>& code, std::size_t gt) {
  int depth = 0;
  for (std::size_t j = gt + 1; j-- > 0;) {
    const std::string& x = code[j].text;
    if (x == ">" || x == ">>") depth += (int)x.size();
    else if (x == "<" && --depth == 0)
      return j > 0 && code[j - 1].kind == TokenKind::Identifier ? code[j - 1].text : "";
    else if (x == ";" || x == "{" || x == "}") return "";
  }
  return "";
}

std::string join(const std::vector<Token>& t, std::size_t b, std::size_t e) {
  std::string s;
  for (std::size_t i = b; i < e; ++i) s += (s.empty() ? "" : " ") + t[i].text;
  return s;
}

// Top-level comma-separated pieces of tokens (b, e).
std::vector<std::string> split_top(const std::vector<Token>& t, std::size_t b, std::size_t e, bool angles) {
  std::vector<std::string> out;
  if (e <= b + 1) return out;
  int depth = 0;
  std::size_t start = b + 1;
  for (std::size_t i = b + 1; i <= e; ++i) {
    if (i == e || (t[i].text == "," && depth == 0)) {
      out.push_back(join(t, start, i));
      start = i + 1;
      continue;
    }
    const std::string& x = t[i].text;
    if (x == "(" || x == "[" || x == "{" || (angles && x == "<")) ++depth;
    else if (x == ")" || x == "]" || x == "}" || (angles && x == ">")) --depth;
    else if (angles && x == ">>") depth -= 2;
    if (angles) depth = std::max(depth, 0);  // a `>` of a default argument's comparison closes nothing
  }
  return out;
}
const std::set<std::string> kTypeWords = {
    "const", "volatile", "void", "struct", "unsigned", "signed", "restrict", "__restrict__", "*", "::", "<", ">", "&"};

// Removes casts, outer parentheses and `&`; returns whether an `&` was removed.
std::vector<Token> strip(std::vector<Token> t, bool& addr) {
  for (int guard = 0; guard < 16 && !t.empty(); ++guard) {
    if (t.front().text == "&") {
      addr = !addr;
      t.erase(t.begin());
      continue;
    }
    if (t.front().text == "(") {
      const std::size_t close = match_forward(t, 0, t.size());
      if (close == t.size() - 1) {  // (expr)
        t = std::vector<Token>(t.begin() + 1, t.end() - 1);
        continue;
      }
      bool cast = close < t.size();
      for (std::size_t k = 1; k < close && cast; ++k)
        cast = t[k].kind == TokenKind::Identifier || kTypeWords.count(t[k].text);
      if (cast) {
        t.erase(t.begin(), t.begin() + (long)close + 1);
        continue;
      }
    }
    if (t.front().text.find("_cast") != std::string::npos && t.size() > 2 && t[1].text == "<") {
      std::size_t k = 1;
      int depth = 0;
      for (; k < t.size(); ++k) {
        if (t[k].text == "<") ++depth;
        else if (t[k].text == ">" && --depth == 0) break;
      }
      if (k + 1 < t.size() && t[k + 1].text == "(") {
        const std::size_t close = match_forward(t, k + 1, t.size());
        if (close < t.size()) {
          std::vector<Token> inner(t.begin() + (long)k + 2, t.begin() + (long)close);
          std::vector<Token> rest(t.begin() + (long)close + 1, t.end());
          inner.insert(inner.end(), rest.begin(), rest.end());
          t = inner;
          continue;
        }
      }
    }
    break;
  }
  return t;
}

// `c ? a : b` (under casts and parentheses) -> {a, b}: a pointer that is one of two buffers.
std::vector<std::string> ternary_branches(const std::string& expr) {
  LexResult lr = lex(expr);
  if (!lr.error.empty()) return {};
  bool addr = false;
  const std::vector<Token> t = strip(code_tokens(lr.tokens), addr);
  if (addr) return {};
  int depth = 0, nested = 0;
  std::size_t question = 0;
  for (std::size_t i = 0; i < t.size(); ++i) {
    const std::string& x = t[i].text;
    if (x == "(" || x == "[" || x == "{") ++depth;
    else if (x == ")" || x == "]" || x == "}") --depth;
    else if (depth == 0 && x == "?") {
      if (question == 0) question = i;
      else ++nested;
    } else if (depth == 0 && x == ":" && question > 0) {
      if (nested > 0) {
        --nested;
        continue;
      }
      return {join(t, question + 1, i), join(t, i + 1, t.size())};
    }
  }
  return {};
}

std::size_t enclosing_open(const std::vector<Token>& t, std::size_t k) {
  for (int depth = 0; k-- > 0;) {
    const std::string& x = t[k].text;
    if (x == ")" || x == "]" || x == "}") ++depth;
    else if ((x == "(" || x == "[" || x == "{") && depth-- == 0) return k;
  }
  return SIZE_MAX;
}

bool declaring_word(const Token& w) {
  static const std::set<std::string> kStatementWords = {"return", "else",   "case",      "do",
                                                        "throw",  "delete", "co_return", "goto"};
  return w.kind == TokenKind::Identifier && !kStatementWords.count(w.text);
}

}  // namespace flow_tokens

using namespace flow_tokens;

std::pair<std::string, std::string> split_root(const std::string& path) {
  const std::size_t p = path.find_first_of(".[");
  if (p == std::string::npos) return {path, ""};
  return {path.substr(0, p), path.substr(p)};
}

std::string access_path(const std::string& expr, bool target) {
  LexResult lr = lex(expr);
  if (!lr.error.empty()) return "";
  bool addr = false;
  std::vector<Token> t = strip(code_tokens(lr.tokens), addr);
  // A dereference is an element: `*(ptrs + i)` is `ptrs[i]`, `*ptrs` is `ptrs[0]`.
  if (!target && !addr && t.size() > 1 && t[0].text == "*") {
    if (std::any_of(t.begin(), t.end(), [](const Token& x) { return x.text == "&"; })) return "";
    const std::string inner = join(t, 1, t.size());
    const std::string element = access_path(inner, true);
    if (!element.empty()) return element.size() > 2 && element.substr(element.size() - 2) == "[]" ? element : "";
    const std::string base = access_path(inner, false);
    return base.empty() ? "" : base + "[0]";
  }
  // Pointer arithmetic: the left operand names the allocation (`p + i`; as a target, &p[i]).
  bool arithmetic = false;
  {
    int depth = 0;
    for (std::size_t i = 1; i < t.size(); ++i) {
      const std::string& x = t[i].text;
      if (x == "(" || x == "[") ++depth;
      else if (x == ")" || x == "]") --depth;
      else if (depth == 0 && (x == "+" || x == "-")) {
        t.resize(i);
        arithmetic = true;
        break;
      }
    }
    if (arithmetic) t = strip(t, addr);
  }
  if (t.size() > 2 && t[0].text == "this" && t[1].text == "->") t.erase(t.begin(), t.begin() + 2);  // a field
  if (t.empty() || t[0].kind != TokenKind::Identifier) return "";
  std::string path = t[0].text;
  if (path == "nullptr" || path == "NULL" || path == "this") return "";
  std::size_t i = 1;
  bool last_index = false;
  while (i < t.size()) {
    if ((t[i].text == "." || t[i].text == "->") && i + 2 < t.size() && t[i + 2].text == "(" &&
        (t[i + 1].text == "front" || t[i + 1].text == "back" || t[i + 1].text == "top" || t[i + 1].text == "at")) {
      // A queue's or container's element read by its accessor (`q.front()`, `v.at(i)`): an element.
      const std::size_t close = match_forward(t, i + 2, t.size());
      if (close >= t.size() || (t[i + 1].text != "at" && close != i + 3) || (t[i + 1].text == "at" && close == i + 3))
        return "";
      path += "[]";
      i = close + 1;
      last_index = true;
    } else if ((t[i].text == "." || t[i].text == "->") && i + 1 < t.size() && t[i + 1].kind == TokenKind::Identifier) {
      path += "." + t[i + 1].text;
      i += 2;
      last_index = false;
    } else if (t[i].text == "[") {
      const std::size_t close = match_forward(t, i, t.size());
      if (close >= t.size()) return "";
      const bool literal = close == i + 2 && t[i + 1].kind == TokenKind::Number;
      path += literal ? "[" + t[i + 1].text + "]" : "[]";
      i = close + 1;
      last_index = true;
    } else if (t[i].text == "::" && i + 1 < t.size() && t[i + 1].kind == TokenKind::Identifier) {
      path = t[i + 1].text;  // a qualified name: its last component
      i += 2;
    } else {
      return "";  // a call, a dereference, an operator: not a plain access path
    }
  }
  if (target) {
    if (arithmetic && !addr) return path + "[]";  // (void**)p + i  ==  &p[i]
    return addr ? path : "";
  }
  if (addr) {
    if (!last_index) return "";   // &x: the address of a pointer variable, not a buffer
    path.erase(path.rfind('['));  // &buf[i] == buf + i
  }
  return path;
}

bool path_matches(const std::string& use, const std::string& alloc) {
  std::size_t i = 0, j = 0;
  while (i < use.size() && j < alloc.size()) {
    if (use[i] == '[' && alloc[j] == '[') {
      const std::size_t ie = use.find(']', i), je = alloc.find(']', j);
      const std::string a = use.substr(i + 1, ie - i - 1), b = alloc.substr(j + 1, je - j - 1);
      if (!a.empty() && !b.empty() && a != b) return false;
      i = ie + 1;
      j = je + 1;
      continue;
    }
    if (use[i] != alloc[j]) return false;
    ++i;
    ++j;
  }
  return i == use.size() && j == alloc.size();
}

namespace {

// The names of a function's parameters, its `(` at code[open] and `)` at code[close] ("" for an
// unnamed one; none for `(void)`).
std::vector<std::string> parameter_names(const std::vector<Token>& code, std::size_t open, std::size_t close) {
  std::vector<std::string> names;
  for (const std::string& param : split_top(code, open, close, true)) {
    const std::vector<Token> pt = code_tokens(lex(param).tokens);
    auto eq = std::find_if(pt.begin(), pt.end(), [](const Token& x) { return x.text == "="; });
    std::string name;
    int bracket = 0;  // `T (&name)[N]`: N is the array's extent, not the name
    for (auto it = pt.begin(); it != eq; ++it) {
      bracket += it->text == "[" ? 1 : it->text == "]" ? -1 : 0;
      if (it->kind == TokenKind::Identifier && bracket == 0) name = it->text;
    }
    names.push_back(name == "void" ? "" : name);
  }
  return names;
}

}  // namespace

BufferFlow::BufferFlow(const std::vector<Token>& code) : code_(code), conditional_(code.size(), false) {
  // Function definitions: `name ( params ) [const|noexcept|override]* [: inits] {` outside other functions.
  collect_classes();
  collect_smart_types();
  collect_view_types();
  std::size_t function_end = 0;  // inside a function body until this token
  for (std::size_t i = 0; i < code.size(); ++i) {
    if (i < function_end || code[i].text != "{") continue;
    const FunctionHead h = function_head(code, i);
    if (h.name == SIZE_MAX) continue;
    FunctionDef f;
    f.name = (h.name > 0 && code[h.name - 1].text == "~" ? "~" : "") + code[h.name].text;  // a destructor: ~Name
    if (f.name == "operator")                                                              // `obj(args)`, below
      f.name = h.conversion ? kConversionOperator : h.index ? kIndexOperator : "operator()";
    f.name_token = h.name;
    f.body_open = i;
    f.body_close = match_forward(code, i, code.size());
    f.params = parameter_names(code, h.open, h.close);
    if (h.name >= 2 && code[h.name - 1].text == "::" && code[h.name - 2].kind == TokenKind::Identifier)
      f.owner = code[h.name - 2].text;  // Owner::name defined outside the class
    if (h.name >= 2 && code[h.name - 1].text == "::" && code[h.name - 2].text == ">")
      f.owner = template_name_before(code, h.name - 2);  // Owner<T>::name, a class template's member
    for (const ClassBody& c : classes_)
      if (f.owner.empty() && h.name > c.open && h.name < c.close) f.owner = c.name;
    function_end = f.body_close;
    functions_.push_back(f);
    record_member_writes(functions_.back(), h.init_colon);
  }
  collect_lambdas();
  mark_conditionals();
  // Each token belongs to its innermost function: lambdas come after the function they are in.
  owner_.assign(code.size(), -1);
  for (std::size_t fi = 0; fi < functions_.size(); ++fi)
    for (std::size_t k = functions_[fi].body_open + 1; k < functions_[fi].body_close; ++k) owner_[k] = (int)fi;
  // The block each token sits in ends at this token (the matching '}' of the innermost '{').
  std::vector<std::size_t> block_end(code.size(), code.size());
  {
    std::vector<std::size_t> open, close_of(code.size(), code.size());
    for (std::size_t k = 0; k < code.size(); ++k) {  // each '{' -> its '}'
      if (code[k].text == "{") open.push_back(k);
      else if (code[k].text == "}" && !open.empty()) close_of[open.back()] = k, open.pop_back();
    }
    open.clear();
    for (std::size_t k = 0; k < code.size(); ++k) {
      if (code[k].text == "{") open.push_back(k);
      else if (code[k].text == "}" && !open.empty()) open.pop_back();
      if (!open.empty()) block_end[k] = close_of[open.back()];
    }
  }
  // Aliases (`T* name = init;`, `auto& b = ...`, range-for `auto& b : container`) and call sites.
  std::set<std::string> defined, callable_classes, callable_objects;  // classes with operator(), objects of them
  for (const FunctionDef& f : functions_) {
    defined.insert(f.name);
    if (f.name == "operator()" && !f.owner.empty()) callable_classes.insert(f.owner);
  }
  for (std::size_t fi = 0; fi < functions_.size(); ++fi) {
    const FunctionDef& f = functions_[fi];
    for (std::size_t k = f.body_open + 1; k + 1 < f.body_close; ++k) {
      if (owner_[k] != (int)fi) continue;  // a lambda's own tokens are its own
      const Token& t = code_[k];
      if (t.kind != TokenKind::Identifier) continue;
      const Token& prev = code_[k - 1];
      // `float* p = v` declares p; `*p = v;` (after `;`, `{`, `)`) stores through it and aliases nothing.
      const Token& before = code_[k - 2];
      const bool declared = ((prev.text == "*" || prev.text == "&") &&
                             (declaring_word(before) || before.text == "*" || before.text == "&" ||
                              before.text == ">" || before.text == ",")) ||
                            declaring_word(prev) || later_declarator(k, f);
      // `device_ptr<float> buf = make_device<float>(n)`: a template type declares too.
      if ((declared || prev.text == ">") && code_[k + 1].text == "=") {
        std::size_t e = k + 2;
        int depth = 0;
        for (; e < f.body_close; ++e) {
          const std::string& x = code_[e].text;
          if (x == "(" || x == "[" || x == "{") ++depth;
          else if (x == ")" || x == "]" || x == "}") {
            if (depth == 0) break;
            --depth;
          } else if ((x == ";" || x == ",") && depth == 0) break;
        }
        // `float* p = nullptr;` declares a variable an allocator fills later (`cudaMalloc(&p, ...)`):
        // not an alias, the variable itself is the allocation's path.
        const std::string init = join(code_, k + 2, e), element = iterator_element(k + 2, e);
        if (!element.empty())  // `auto it = params.find(key);`: `it->second` is an element's
          aliases_[f.name].push_back(Alias{t.text, element, k, block_end[k], false, true});
        else if (init != "nullptr" && init != "NULL" && init != "0")
          aliases_[f.name].push_back(Alias{t.text, init, k, block_end[k], prev.text == "&", prev.text == "*"});
      } else if (const std::string owned = smart_initialiser(k, f.body_close); !owned.empty()) {
        aliases_[f.name].push_back(Alias{t.text, owned, k, block_end[k], false});
      } else if (declared && code_[k + 1].text == ":" && k >= 3) {  // for (auto& b : container)
        std::size_t open = k;
        while (open > f.body_open && code_[open].text != "(") --open;
        if (open > 0 && code_[open - 1].text == "for") {
          const std::size_t close = match_forward(code_, open, f.body_close);
          aliases_[f.name].push_back(Alias{t.text, join(code_, k + 2, close) + " [ i ]", k,
                                           for_body_end(close, f.body_close), prev.text == "&"});
        }
      }
      record_binding_aliases(k, f);
      record_tie_assignment(k, f);
      record_element_copy(k, f.name, f.body_close);
      record_element_fields(k, f.name, f.body_close);
      record_field_write(k, f.name, f.body_close);
      record_exchange(k, f.name, f.body_close);
      record_pointer_array_store(k, f.name, f.body_open, f.body_close);
      record_table_entry(k, f.name, f.body_close);
      record_table_store(k, f.name, f.body_close);
      record_construction(k, f.name, f.body_close);
      record_call(k, f, defined, callable_classes, callable_objects);
    }
  }
  collect_thread_starts();
  record_value_uses();
  collect_visible_containers();
  link_table_stores();
}

const FunctionDef* BufferFlow::function_named(const std::string& name) const {
  for (const FunctionDef& f : functions_)
    if (f.name == name) return &f;
  return nullptr;
}

const BufferFlow::Alias* BufferFlow::nearest_alias(const std::string& function, const std::string& root,
                                                   std::size_t at) const {
  auto it = aliases_.find(function);
  if (it == aliases_.end()) return nullptr;
  const Alias* best = nullptr;
  for (const Alias& al : it->second)
    if (al.name == root && al.token < at && at <= al.scope_end && (!best || al.token > best->token)) best = &al;
  return best;
}

// The caller's struct behind a pointer parameter, where the helper has one call in this file, on
// every path (not under a condition), given `&x` (so `p->f` is `x.f`), an element `&layers[l]` or
// `layers + l` (called in a loop over the layers: `p->f` is `layers[].f`, one allocation site for
// every element, as `cudaMalloc(&bufs[i], ..)` in a loop is `bufs[]`) or a field `&model->enc`;
// "" otherwise.
std::string BufferFlow::through_struct_pointer(const FunctionDef& f, const std::string& param) const {
  const auto p = std::find(f.params.begin(), f.params.end(), param);
  const auto calls = calls_.find(f.name);
  if (p == f.params.end() || value_uses_.count(f.name) || calls == calls_.end() || calls->second.size() != 1) return "";
  const CallSite& c = calls->second.front();
  const std::size_t index = (std::size_t)(p - f.params.begin());
  if (index >= c.args.size() || c.args.size() > f.params.size() || conditional(c.token))
    return "";  // defaults may follow
  // `void setup(Stage& s)` called as `setup(st)`: the reference is the object given.
  for (std::size_t k = f.name_token + 2; k < f.body_open; ++k)
    if (code_[k].text == param && (code_[k - 1].text == "&" || code_[k - 1].text == "&&"))
      return access_path(c.args[index], false);
  return access_path(c.args[index], true);
}

std::string BufferFlow::pointee_of_parameter(const std::string& param, const std::string& function) const {
  const FunctionDef* f = function_named(function);
  const std::string through = f ? through_struct_pointer(*f, param) : "";
  if (through.empty()) return "";
  const CallSite& c = calls_.at(function).front();
  return target_path(through, c.caller, c.token);
}

std::vector<std::size_t> BufferFlow::return_statements(const FunctionDef& f) const {
  std::vector<std::size_t> out;
  for (std::size_t k = f.body_open + 1; k < f.body_close; ++k)
    if (code_[k].text == "return" &&
        (owner_.empty() || owner_[k] < 0 || functions_[(std::size_t)owner_[k]].name == f.name))
      out.push_back(k);
  return out;
}

BufferFlow::Resolution BufferFlow::resolve(const std::string& expr, const std::string& function, std::size_t at,
                                           int max_depth) const {
  Resolution r;
  std::vector<std::string> stack;
  resolve_into(expr, function, at, max_depth, r, stack);
  if (!r.reason.empty()) r.paths.clear();
  std::sort(r.paths.begin(), r.paths.end());
  r.paths.erase(std::unique(r.paths.begin(), r.paths.end()), r.paths.end());
  return r;
}

void BufferFlow::resolve_into(const std::string& expr, const std::string& function, std::size_t at, int depth,
                              Resolution& out, std::vector<std::string>& stack) const {
  // Every way below spends depth (an accessor returning another accessor's value may loop).
  if (depth < 0) {
    out.reason = fmt::format("`{}` is defined through a cycle or more than 6 levels of calls", expr);
    return;
  }
  if (const std::vector<std::string> branches = ternary_branches(expr); !branches.empty()) {
    out.via.push_back(fmt::format("`{}` is one of `{}`, `{}`", expr, branches[0], branches[1]));
    for (const std::string& b : branches) {  // either buffer, decided at run time
      // `last ? nullptr : act` (Megatron's optional send/receive): no buffer on that branch, as for a
      // call site passing nullptr (NCCL refuses a null buffer; the helper tests it before its call).
      if (b == "nullptr" || b == "NULL") {
        out.null_given = true;
        continue;
      }
      resolve_into(b, function, at, depth, out, stack);
      if (!out.reason.empty()) return;
    }
    return;
  }
  if (resolve_tuple_element(expr, function, at, depth, out, stack)) return;  // `std::get<1>(make_buffers(n))`
  // `buf.get() + off`, `(char*)view.data() - k`: the left operand's allocation (a plain path's
  // arithmetic is access_path's).
  if (const std::string base = access_path(expr, false).empty() ? offset_base(expr) : ""; !base.empty()) {
    out.via.push_back(fmt::format("`{}` points into `{}`", expr, base));
    resolve_into(base, function, at, depth, out, stack);
    return;
  }
  if (const std::string owned = owned_pointer(expr); !owned.empty()) {
    std::string compact = expr;  // `buf.get()`: the smart pointer `buf` may be given another pointer later
    std::erase(compact, ' ');
    if (const int line = compact.ends_with(".get()") ? repointed(split_root(access_path(owned, false)).first) : 0) {
      out.reason = fmt::format("`{}` owns another pointer from line {} on (reset, swap or assignment): not followed",
                               owned, line);
      return;
    }
    out.via.push_back(fmt::format("`{}` is the pointer `{}` owns", expr, owned));
    resolve_into(owned, function, at, depth, out, stack);
    return;
  }
  if (const std::string viewed = viewed_pointer(expr, function); !viewed.empty()) {
    out.via.push_back(fmt::format("`{}` is a view of `{}`", expr, viewed));
    resolve_into(viewed, function, at, depth, out, stack);
    return;
  }
  const std::string path = access_path(expr, false);
  if (path.empty()) {
    if (const std::string held = optional_held(expr); !held.empty()) {
      out.via.push_back(fmt::format("`{}` is what the optional `{}` holds", expr, held));
      return resolve_into(held, function, at, depth - 1, out, stack);
    }
    if (follow_accessor(expr, function, at, depth - 1, out, stack)) return;
    // `ptr_(device_alloc<T>(n))`, `return make(n);`: what a helper of this file returns, as for
    // `T* p = device_alloc<T>(n);` (resolve_alias).
    if (const FunctionDef* helper = returning_helper(expr)) {
      out.via.push_back(fmt::format("`{}` is what {}() returns", expr, helper->name));
      follow_namesakes_returns(*helper, "", depth - 1, out, stack);
      return;
    }
    out.reason = fmt::format("`{}` is not a variable, field or element access braid can follow", expr);
    return;
  }
  const auto [root, rest] = split_root(path);
  if (const std::string element = for_each_element(root, at); !element.empty()) {
    out.via.push_back(fmt::format("`{}` is each element of `{}`", root, element.substr(0, element.size() - 6)));
    resolve_into(element + rest, function_at(unnamed_lambda_at(at)), unnamed_lambda_at(at), depth - 1, out, stack);
    return;
  }
  if (const int line = unnamed_lambda_parameter(root, at); line > 0) {
    // Not the enclosing function's variable of that name: whoever calls the lambda gives it.
    out.reason = fmt::format(
        "`{}` is a parameter of a lambda bound to no name (line {}), called through whatever holds it: its "
        "arguments are not followed",
        root, line);
    return;
  }
  const std::string key = function + "/" + root;
  if (std::find(stack.begin(), stack.end(), key) != stack.end() || depth < 0) {
    out.reason = fmt::format("`{}` is defined through a cycle or more than 6 levels of calls", expr);
    return;
  }
  stack.push_back(key);
  const bool done = resolve_alias(root, rest, path, function, at, depth, out, stack) ||
                    resolve_array_element(expr, root, rest, path, function, at, depth, out, stack) ||
                    resolve_parameter(root, rest, function, at, depth, out, stack);
  if (done) {
    stack.pop_back();
    return;
  }
  if (const FunctionDef* f = function_named(function); f && !f->enclosing.empty()) {
    stack.pop_back();  // a lambda's capture: the enclosing function's variable
    out.via.push_back(fmt::format("{} captured by {}() from {}()", root, function, f->enclosing));
    resolve_into(expr, f->enclosing, at, depth, out, stack);
    return;
  }
  if (!follow_member(path, function, at, depth, out, stack)) out.paths.push_back(path);
  stack.pop_back();
}

}  // namespace braid::convert
