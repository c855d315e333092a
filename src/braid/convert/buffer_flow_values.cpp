// BufferFlow (buffer_flow.hpp) on functions used other than by a direct call: lambdas bound to a
// name (functions of their own, capturing the enclosing function's variables), and functions
// whose name is used as a value. A value stored in a struct's function-pointer field (`{"x", f}`,
// `.run = f`, `t.run = f`) is followed to the calls through that field (`args->test->run(...)`),
// which become f's call sites; any other use leaves f's parameters unfollowed.
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <set>

#include "braid/convert/buffer_flow.hpp"
#include "braid/convert/buffer_flow_tokens.hpp"

namespace braid::convert {

using namespace flow_tokens;

// Lambdas bound to a name in a function body (`auto name = [&](T* p) {...};`,
// `std::function<...> name = [...](...) {...};`): functions of their own whose calls are
// `name(...)` and whose captures are the enclosing function's variables. A name defined twice
// (two lambdas, or a lambda and a function) is not one function: it is left out, its calls unfollowed.
void BufferFlow::collect_lambdas() {
  std::map<std::string, int> count;
  for (const FunctionDef& f : functions_) ++count[f.name];
  std::vector<FunctionDef> found;
  for (std::size_t fi = 0; fi < functions_.size() + found.size(); ++fi) {
    const FunctionDef f = fi < functions_.size() ? functions_[fi] : found[fi - functions_.size()];
    for (std::size_t k = f.body_open + 1; k + 3 < f.body_close; ++k) {
      if (code_[k].kind != TokenKind::Identifier || code_[k + 1].text != "=" || code_[k + 2].text != "[") continue;
      const std::size_t captures_end = match_forward(code_, k + 2, f.body_close);
      std::size_t p = captures_end + 1, params_open = 0, params_close = 0;
      if (p < f.body_close && code_[p].text == "(") {
        params_open = p;
        params_close = match_forward(code_, p, f.body_close);
        p = params_close + 1;
      }
      while (p < f.body_close && code_[p].text != "{" && code_[p].text != ";") ++p;  // mutable, noexcept, -> T
      if (p >= f.body_close || code_[p].text != "{") continue;
      FunctionDef l;
      l.name = code_[k].text;
      l.name_token = k;
      l.body_open = p;
      l.body_close = match_forward(code_, p, f.body_close);
      l.enclosing = f.name;
      if (params_open)
        for (const std::string& param : split_top(code_, params_open, params_close, true)) {
          std::vector<Token> pt = code_tokens(lex(param).tokens);
          std::string name;
          for (const Token& w : pt)
            if (w.kind == TokenKind::Identifier) name = w.text;
          l.params.push_back(name == "void" ? "" : name);
        }
      ++count[l.name];
      found.push_back(l);
      k = l.body_close;
    }
  }
  for (const FunctionDef& l : found)
    if (count[l.name] == 1) functions_.push_back(l);
  // Lambdas bound to no name (`hooks.push_back([&] {...})`, a callback argument), and those assigned
  // but not followed as a function (a name given two lambdas: `a.fn = [...]; b.fn = [...];`): run
  // whenever whoever holds them calls them.
  for (std::size_t k = 1; k + 2 < code_.size(); ++k) {
    const std::string& prev = code_[k - 1].text;
    if (code_[k].text != "[" || code_[k + 1].text == "[" || code_[k - 1].kind == TokenKind::Identifier || prev == "]" ||
        prev == ")" || prev == "[" || prev == ">")
      continue;
    std::size_t p = match_forward(code_, k, code_.size()) + 1;
    if (p < code_.size() && code_[p].text == "(") p = match_forward(code_, p, code_.size()) + 1;
    while (p < code_.size() && (code_[p].text == "mutable" || code_[p].text == "noexcept")) ++p;
    if (p < code_.size() && code_[p].text == "->")
      while (p < code_.size() && code_[p].text != "{" && code_[p].text != ";") ++p;
    const bool followed = prev == "=" && std::any_of(functions_.begin(), functions_.end(), [&](const FunctionDef& f) {
                            return !f.enclosing.empty() && f.body_open == p;
                          });
    if (p < code_.size() && code_[p].text == "{" && !followed)
      unnamed_lambdas_.emplace_back(k, match_forward(code_, p, code_.size()));
  }
}

std::size_t BufferFlow::unnamed_lambda_at(std::size_t at) const {
  for (const auto& [begin, end] : unnamed_lambdas_)
    if (at > begin && at < end) return begin;
  return SIZE_MAX;
}

int BufferFlow::unnamed_lambda_parameter(const std::string& name, std::size_t at) const {
  for (const auto& [begin, end] : unnamed_lambdas_) {
    if (at <= begin || at >= end) continue;
    const std::size_t open = match_forward(code_, begin, end) + 1;  // `[captures] (params)`
    if (open >= end || code_[open].text != "(") continue;
    const std::size_t close = match_forward(code_, open, end);
    for (std::size_t k = open + 1; k < close; ++k)  // a parameter's name ends its piece (or meets `=`)
      if (code_[k].text == name && code_[k].kind == TokenKind::Identifier &&
          (code_[k + 1].text == "," || code_[k + 1].text == ")" || code_[k + 1].text == "="))
        return code_[begin].line;
  }
  return 0;
}

std::optional<BufferFlow::ForEachVisit> BufferFlow::for_each_visit(std::size_t begin, std::size_t end) const {
  if (end + 1 >= code_.size() || code_[end + 1].text != ")") return std::nullopt;
  const std::size_t open = match_forward(code_, begin, end) + 1;  // `[captures] (param)`
  if (open >= end || code_[open].text != "(") return std::nullopt;
  const std::size_t close = match_forward(code_, open, end);
  const std::size_t call = enclosing_open(code_, end + 1);  // the call the lambda is the last argument of
  if (split_top(code_, open, close).size() != 1 || call == SIZE_MAX || call == 0 || code_[call - 1].text != "for_each")
    return std::nullopt;
  ForEachVisit v;
  v.param = code_[close - 1].text;
  v.by_value = std::none_of(code_.begin() + long(open), code_.begin() + long(close),
                            [](const Token& t) { return t.text == "&" || t.text == "&&"; });
  const std::vector<std::string> args = split_top(code_, call, end + 1);
  std::string range = args.size() == 2 ? args[0] : "";  // std::ranges::for_each(grads, ...)
  if (args.size() == 3) {
    std::string first = args[0];
    std::erase(first, ' ');
    for (const char* form : {".begin()", ".cbegin()"})
      if (first.ends_with(form)) range = first.substr(0, first.size() - std::string(form).size());
    if (first.starts_with("std::begin(") && first.ends_with(")")) range = first.substr(11, first.size() - 12);
  }
  if (!range.empty() && access_path(range, false).empty()) range.clear();
  v.range = range;
  return v;
}

std::string BufferFlow::for_each_element(const std::string& name, std::size_t at) const {
  for (const auto& [begin, end] : unnamed_lambdas_) {
    if (at <= begin || at >= end) continue;
    const std::optional<ForEachVisit> v = for_each_visit(begin, end);
    return v && v->param == name && !v->range.empty() ? v->range + " [ i ]" : "";
  }
  return "";
}

namespace {

// The '{' enclosing code token k (SIZE_MAX at file scope), skipping balanced brackets.
std::size_t enclosing_brace(const std::vector<Token>& code, std::size_t k) {
  const std::size_t open = enclosing_open(code, k);
  return open != SIZE_MAX && code[open].text == "{" ? open : SIZE_MAX;
}

}  // namespace

// The fields of a plain struct in declaration order (a function-pointer field `R (*name)(...)`
// by its name); empty when the body holds more than field declarations (member functions,
// nested types), whose aggregate initialisation would not be positional.
std::vector<std::string> BufferFlow::struct_fields(const std::string& type) const {
  const ClassBody* body = nullptr;
  for (const ClassBody& c : classes_)
    if (c.name == type) body = body ? nullptr : &c;  // two types of one name: not followed
  std::vector<std::string> fields;
  if (!body) return fields;
  std::size_t start = body->open + 1;
  for (std::size_t k = start; k <= body->close; ++k) {
    if (code_[k].text == "{") return {};
    if (code_[k].text == ":" && k > start && (code_[k - 1].text == "public" || code_[k - 1].text == "private")) {
      start = k + 1;
      continue;
    }
    if (code_[k].text != ";" && k != body->close) continue;
    if (k == start) continue;
    for (const std::string& piece : split_top(code_, start - 1, k)) {
      const std::vector<Token> t = code_tokens(lex(piece).tokens);
      std::string name;
      int depth = 0;
      for (std::size_t i = 0; i < t.size(); ++i) {
        if (t[i].text == "(" && i + 3 < t.size() && t[i + 1].text == "*" && t[i + 2].kind == TokenKind::Identifier &&
            t[i + 3].text == ")") {
          name = t[i + 2].text;  // R (*name)(params)
          break;
        }
        if (t[i].text == "(" || t[i].text == "[") ++depth;
        else if (t[i].text == ")" || t[i].text == "]") --depth;
        else if (depth == 0 && t[i].kind == TokenKind::Identifier) name = t[i].text;
      }
      if (!name.empty()) fields.push_back(name);
    }
    start = k + 1;
  }
  return fields;
}

// The function-pointer field that a value use of a function at code token k stores it into:
// `.run = f` / `x.run = f` / `x->run = f`, or the position of f in an aggregate initialiser of a
// struct variable (`struct T v = {"name", f};`, arrays of them too). "" for any other use.
std::string BufferFlow::stored_field(std::size_t k) const {
  std::size_t v = k > 0 && code_[k - 1].text == "&" ? k - 1 : k;  // &f
  if (v < 3) return "";
  if (code_[v - 1].text == "=")
    return code_[v - 2].kind == TokenKind::Identifier && (code_[v - 3].text == "." || code_[v - 3].text == "->")
               ? code_[v - 2].text
               : "";
  if ((code_[v - 1].text != "{" && code_[v - 1].text != ",") || k + 1 >= code_.size() ||
      (code_[k + 1].text != "," && code_[k + 1].text != "}"))
    return "";
  // Position among the initialiser's elements, then the variable's type before `v = {` / `v{` / `v[N] = {`.
  const std::size_t brace = enclosing_brace(code_, v);
  if (brace == SIZE_MAX) return "";
  std::size_t index = 0;
  for (std::size_t j = brace + 1; j < v; ++j) {
    const std::string& x = code_[j].text;
    if (x == "(" || x == "[" || x == "{") j = match_forward(code_, j, v);
    else if (x == ",") ++index;
  }
  std::size_t b = brace;
  for (int level = 0; level < 3 && b > 0 && (code_[b - 1].text == "{" || code_[b - 1].text == ","); ++level) {
    b = enclosing_brace(code_, b);  // an element of an array's initialiser
    if (b == SIZE_MAX) return "";
  }
  std::size_t t = b - 1;
  if (code_[t].text == "=") --t;
  while (t > 0 && code_[t].text == "]") {
    int depth = 0;
    for (; t > 0; --t) {
      if (code_[t].text == "]") ++depth;
      else if (code_[t].text == "[" && --depth == 0) break;
    }
    --t;
  }
  if (t == 0 || code_[t].kind != TokenKind::Identifier || code_[t - 1].kind != TokenKind::Identifier) return "";
  const std::vector<std::string> fields = struct_fields(code_[t - 1].text);
  return index < fields.size() ? fields[index] : "";
}

// The variable a value use of a function at code token k is the whole value of: `std::function<..>
// hook = f;`, `auto hook = f;`, `hook = f;`, `hook(f)`/`hook{f}` in a declaration. "" otherwise.
std::string BufferFlow::stored_variable(std::size_t k) const {
  if (k < 2 || k + 1 >= code_.size()) return "";
  const std::string& prev = code_[k - 1].text;
  const std::string& next = code_[k + 1].text;
  const Token& var = code_[k - 2];
  if (var.kind != TokenKind::Identifier) return "";
  if (prev == "=" && next == ";" && k >= 3 && code_[k - 3].text != "." && code_[k - 3].text != "->") return var.text;
  // `hooks.push_back(f)`: a container of callables, called as `hooks[i](...)`.
  if (prev == "(" && next == ")" && k >= 4 && (var.text == "push_back" || var.text == "emplace_back") &&
      code_[k - 3].text == "." && code_[k - 4].kind == TokenKind::Identifier)
    return code_[k - 4].text;
  // `std::function<void(float*)> hook(f);`: declared (a type before the name), not a call of `hook`.
  const bool closes = (prev == "(" && next == ")") || (prev == "{" && next == "}");
  if (closes && k + 2 < code_.size() && code_[k + 2].text == ";" && k >= 3 &&
      (code_[k - 3].text == ">" || declaring_word(code_[k - 3])))
    return var.text;
  return "";
}

// A function whose name is used other than in a call or its definition may be called through a
// pointer or a copy (a thread started on it is a call: buffer_flow_threads.cpp). Where every such use stores it into a
// function-pointer field, and the field is used nowhere but in its struct, in such stores and in calls through it
// (`p->run(...)`), those calls are its call sites; likewise a variable it is stored in (`std::function<..> hook =
// allreduce;`, a lambda's name too) whose every other use is a call (`hook(g, n)`); otherwise its parameters stay
// unfollowed (value_uses_).
void BufferFlow::record_value_uses() {
  std::set<std::string> names;
  for (const FunctionDef& f : functions_) names.insert(f.name);
  for (const ClassBody& c : classes_) names.erase(c.name);  // a constructor: its name is the type's
  std::set<std::size_t> name_tokens;
  for (const FunctionDef& f : functions_) name_tokens.insert(f.name_token);
  std::map<std::string, std::vector<std::size_t>> uses;
  for (std::size_t k = 0; k + 1 < code_.size(); ++k) {
    const Token& t = code_[k];
    if (t.kind != TokenKind::Identifier || !names.count(t.text) || name_tokens.count(k)) continue;
    const std::string& next = code_[k + 1].text;
    const std::string& prev = k > 0 ? code_[k - 1].text : "";
    if (next == "(" || next == "<" || prev == "." || prev == "->")
      continue;                                 // a call, a template call, another object's member
    if (prev == "~" || next == "::") continue;  // a destructor's name, a scope
    // `std::function<void(float*, size_t)> reduce_;`: the declaration of the variable a lambda is
    // assigned to later (`reduce_ = [this](...) {...};`), not a use of its value.
    const bool type_before = prev == ">" || (k > 0 && declaring_word(code_[k - 1]));
    if (type_before && (next == ";" || next == "{")) continue;
    if (const ThreadStart* started = thread_started_at(k)) {  // a thread started on it: a call
      calls_[t.text].push_back(CallSite{function_at(k), started->args, k, t.line});
      continue;
    }
    uses[t.text].push_back(k);
  }
  // Each function's fields, or none when one of its uses is no store into a field.
  std::map<std::string, std::set<std::string>> fields_of, variables_of;
  std::set<std::string> stored_fields, stored_variables;
  std::set<std::size_t> storing;  // the name token of each variable at its store (`hook` of `hook = f`)
  for (const auto& [name, tokens] : uses) {
    std::set<std::string> fields, variables;
    bool all = true;
    for (std::size_t k : tokens) {
      if (const std::string field = stored_field(k); !field.empty()) {
        fields.insert(field);
      } else if (const std::string variable = stored_variable(k); !variable.empty() && !names.count(variable)) {
        variables.insert(variable);
        storing.insert(k - 2);
      } else {
        all = false;
        break;
      }
    }
    if (!all) continue;
    fields_of[name] = fields;
    variables_of[name] = variables;
    stored_fields.insert(fields.begin(), fields.end());
    stored_variables.insert(variables.begin(), variables.end());
  }
  // A field is followed when every use of its name is in a struct, a store found above, or a call.
  // A variable holding a function copied into a container of them (`hooks.push_back(hook)`): the
  // container holds the function too.
  for (std::size_t k = 4; k + 1 < code_.size(); ++k) {
    if (!stored_variables.count(code_[k].text) || code_[k - 1].text == "." || code_[k - 1].text == "->") continue;
    const std::string holder = stored_variable(k);
    if (holder.empty() || holder == code_[k].text || names.count(holder) || code_[k - 1].text != "(") continue;
    storing.insert(k);
    stored_variables.insert(holder);
    for (auto& [name, variables] : variables_of)
      if (variables.count(code_[k].text)) variables.insert(holder);
  }
  std::map<std::string, std::vector<CallSite>> through;
  std::set<std::string> unclean;
  // `hooks.push_back(x)` at code token k (`hooks`) given anything but a function or a variable holding one.
  const auto fills_with_other = [&](std::size_t k) {
    const std::string& m = code_[k + 2].text;
    if (m != "push_back" && m != "emplace_back") return false;
    return !(k + 5 < code_.size() && code_[k + 3].text == "(" && code_[k + 5].text == ")" &&
             (storing.count(k + 4) || names.count(code_[k + 4].text)));
  };
  for (std::size_t k = 1; k + 2 < code_.size(); ++k) {
    const Token& t = code_[k];
    // A variable holding a function: its store and its calls (`hook(g, n)`), nothing else.
    if (t.kind == TokenKind::Identifier && stored_variables.count(t.text) && code_[k - 1].text != "." &&
        code_[k - 1].text != "->" && !storing.count(k)) {
      // `hook(g, n)`, or `hooks[l](g, n)` of a container of them.
      std::size_t open = k + 1;
      if (code_[open].text == "[") open = match_forward(code_, open, code_.size()) + 1;
      const std::size_t close =
          open < code_.size() && code_[open].text == "(" ? match_forward(code_, open, code_.size()) : SIZE_MAX;
      if (close != SIZE_MAX && close < code_.size())
        through[t.text].push_back(CallSite{function_at(k), split_top(code_, open, close), k, t.line});
      else if (!(declaring_word(code_[k - 1]) || code_[k - 1].text == ">" || code_[k - 1].text == ">>" ||
                 (code_[k + 1].text == "." && !fills_with_other(k))))
        unclean.insert(t.text);  // a use other than a call, its declaration or its container's own members
      continue;
    }
    if (t.kind != TokenKind::Identifier || !stored_fields.count(t.text)) continue;
    if (std::any_of(classes_.begin(), classes_.end(), [&](const ClassBody& c) { return k > c.open && k < c.close; }))
      continue;
    const bool member = code_[k - 1].text == "." || code_[k - 1].text == "->";
    if (member && code_[k + 1].text == "(") {
      const std::size_t close = match_forward(code_, k + 1, code_.size());
      through[t.text].push_back(CallSite{function_at(k), split_top(code_, k + 1, close), k, t.line});
    } else if (!(member && code_[k + 1].text == "=" &&
                 names.count(code_[k + 2].text == "&" ? code_[k + 3].text : code_[k + 2].text))) {
      unclean.insert(t.text);
    }
  }
  for (const auto& [name, tokens] : uses) {
    auto f = fields_of.find(name);
    const auto clean = [&](const std::set<std::string>& held) {
      return std::none_of(held.begin(), held.end(), [&](const std::string& x) { return unclean.count(x) > 0; });
    };
    if (f == fields_of.end() || !clean(f->second) || !clean(variables_of[name])) {
      value_uses_.emplace(name, code_[tokens.front()].line);
      continue;
    }
    for (const std::string& field : f->second)
      for (const CallSite& c : through[field]) calls_[name].push_back(c);
    for (const std::string& variable : variables_of[name])
      for (const CallSite& c : through[variable]) calls_[name].push_back(c);
  }
}

// `b` of `Tensor a = empty(n), b = empty(m);` at code token k: a declarator after the first one of
// a declaration statement (the comma at the statement's top level, the statement's first declarator
// preceded by its type). Not a call's argument, a for-header's second variable or a comma operator.
bool BufferFlow::later_declarator(std::size_t k, const FunctionDef& f) const {
  if (k < 2 || code_[k - 1].text != "," || k + 1 >= f.body_close || code_[k + 1].text != "=") return false;
  std::size_t j = k - 1;
  for (int depth = 0; j > f.body_open;) {
    const std::string& x = code_[--j].text;
    if (depth == 0 && (x == ";" || x == "}")) break;
    if (x == ")" || x == "]" || x == "}") ++depth;
    else if (x == "(" || x == "[") {
      if (depth-- == 0) return false;  // inside a call's or a for-header's parentheses
    } else if (x == "{") {
      if (depth > 0) {
        --depth;
        continue;
      }
      const std::string& b = code_[j - 1].text;  // a block opens the statement; a brace list is a value
      if (b == "=" || b == "(" || b == "," || code_[j - 1].kind == TokenKind::Identifier) return false;
      break;
    }
  }
  // The statement's first declarator: an identifier after its type, followed by `=`, `(`, `{` or `,`.
  for (std::size_t d = j + 2, depth = 0; d < k - 1; ++d) {
    const std::string& x = code_[d].text;
    if (x == "(" || x == "[" || x == "{" || x == "<") ++depth;
    if (x == ")" || x == "]" || x == "}" || x == ">") --depth;
    if (depth != 0 || code_[d].kind != TokenKind::Identifier) continue;
    const std::string& next = code_[d + 1].text;
    if (next != "=" && next != "(" && next != "{" && next != ",") continue;
    const Token& type = code_[d - 1];
    return declaring_word(type) || type.text == "*" || type.text == "&" || type.text == ">";
  }
  return false;
}

}  // namespace braid::convert
