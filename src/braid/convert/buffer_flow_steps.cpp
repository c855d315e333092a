// BufferFlow (buffer_flow.hpp): the steps of resolve() that follow a name to where it came from: a
// local alias to what it was set to, an element of an array initialised with buffers to each of
// them, a function's parameter to the argument of every call in this file.
#include <fmt/format.h>

#include <algorithm>

#include "braid/convert/buffer_flow.hpp"
#include "braid/convert/buffer_flow_tokens.hpp"

namespace braid::convert {
namespace {

// The path `expr` points into, for a use continued by `rest`: a pointer to one element of an array
// of structs (`&fields[f]`, `fields + f`) followed by a field (`fl->d`) is that element
// (`fields[]`), whose field it names, not a field of the array.
std::string pointee_path(const std::string& expr, const std::string& rest) {
  const std::string base = access_path(expr, false);
  if (base.empty() || rest.empty() || rest[0] != '.') return base;
  const std::string element = access_path(expr, true);
  return element.starts_with(base + "[") ? element : base;
}

}  // namespace

using namespace flow_tokens;

namespace {

// The type's name token before the declared name at code[k] (k >= 2): `unique_ptr` of
// `std::unique_ptr<T, Del> p_`, `device_ptr` of `device_ptr p`.
std::size_t type_before(const std::vector<Token>& code, std::size_t k) {
  std::size_t type = k - 1;
  if (code[type].text == ">") {  // back to the template's '<'
    for (int depth = 0; type > 0; --type) {
      if (code[type].text == ">") ++depth;
      else if (code[type].text == "<" && --depth == 0) break;
    }
    --type;
  }
  return type;
}

}  // namespace

// `using device_ptr = std::unique_ptr<T, CudaFree>;` (also under a template) and
// `typedef std::shared_ptr<float> FloatPtr;` name smart pointer types as std's own names do.
void BufferFlow::collect_smart_types() {
  smart_types_ = {"unique_ptr", "shared_ptr"};
  const auto smart_at = [&](std::size_t j) {
    while (j + 1 < code_.size() && (code_[j].text == "::" || (code_[j].text == "std" && code_[j + 1].text == "::")))
      ++j;
    return j < code_.size() && smart_types_.count(code_[j].text) > 0;
  };
  for (std::size_t k = 0; k + 3 < code_.size(); ++k) {
    if (code_[k].text == "using" && code_[k + 1].kind == TokenKind::Identifier && code_[k + 2].text == "=" &&
        smart_at(k + 3))
      smart_types_.insert(code_[k + 1].text);
    if (code_[k].text == "typedef" && smart_at(k + 1)) {
      const std::size_t e = statement_end(code_, k, code_.size());
      if (e < code_.size() && code_[e - 1].kind == TokenKind::Identifier) smart_types_.insert(code_[e - 1].text);
    }
  }
}

std::string BufferFlow::smart_initialiser(std::size_t k, std::size_t end) const {
  if (k < 2 || k + 1 >= end || (code_[k + 1].text != "(" && code_[k + 1].text != "{")) return "";
  const std::size_t type = type_before(code_, k);
  // `std::span<float> grads(flat, n)`: a view holds the pointer it is made from as a smart pointer does.
  if (!smart_types_.count(code_[type].text) && !view_types_.count(code_[type].text)) return "";
  const std::size_t close = match_forward(code_, k + 1, end);
  const std::vector<std::string> args = split_top(code_, k + 1, close);
  return args.empty() ? "" : args.front();
}

bool BufferFlow::declared_smart(const std::string& name, bool empty) const {
  for (std::size_t k = 2; k + 1 < code_.size(); ++k) {
    if (code_[k].text != name || code_[k].kind != TokenKind::Identifier) continue;
    // Empty: `std::unique_ptr<T, Del> p_;` (or `p_{};`), no pointer given where it is declared.
    if (empty && code_[k + 1].text != ";" &&
        !(code_[k + 1].text == "{" && k + 3 < code_.size() && code_[k + 2].text == "}" && code_[k + 3].text == ";"))
      continue;
    if (smart_types_.count(code_[type_before(code_, k)].text)) return true;
  }
  return false;
}

int BufferFlow::repointed(const std::string& name) const {
  for (std::size_t k = 1; k + 3 < code_.size(); ++k) {
    if (code_[k].text != name) continue;
    const std::string& prev = code_[k - 1].text;
    // Declared empty, `reset(p)` gives it its pointers as assignments do (below).
    const bool method = code_[k + 1].text == "." && code_[k + 3].text == "(" &&
                        ((code_[k + 2].text == "reset" && k + 4 < code_.size() && code_[k + 4].text != ")" &&
                          !declared_smart(name, true)) ||
                         code_[k + 2].text == "swap");
    const bool swapped = prev == "(" && k >= 2 && code_[k - 2].text == "swap";
    // Declared empty and given its pointer only by assignments, it is followed through them
    // (exchanged_with), as a raw pointer would be.
    const bool assigned =
        code_[k + 1].text == "=" && (prev == ";" || prev == "{" || prev == "}") && declared_with_value(name);
    if (method || swapped || assigned) return code_[k].line;
  }
  return 0;
}

std::string BufferFlow::owned_pointer(const std::string& expr) const {
  LexResult lr = lex(expr);
  bool addr = false;
  const std::vector<Token> t = strip(code_tokens(lr.tokens), addr);
  const std::size_t n = t.size();
  if (addr || n == 0) return "";
  // `.get()` of a class of this file is its own accessor (follow_accessor), not a smart pointer's,
  // unless it is called on a variable or field declared as a smart pointer (`p_.get()` inside the
  // class's own `T* get() const { return p_.get(); }`).
  const bool file_get = std::any_of(functions_.begin(), functions_.end(),
                                    [](const FunctionDef& f) { return f.name == "get" && !f.owner.empty(); });
  if (n > 4 && t[n - 4].text == "." && t[n - 3].text == "get" && t[n - 2].text == "(" && t[n - 1].text == ")" &&
      (!file_get || (t[n - 5].kind == TokenKind::Identifier && declared_smart(t[n - 5].text))))
    return join(t, 0, n - 4);
  const auto [name, open] = qualified_call(t);
  if (name == SIZE_MAX || !smart_types_.count(t[name].text)) return "";
  const std::vector<std::string> args = split_top(t, open, n - 1);
  return args.empty() ? "" : args.front();
}

// A local alias declared before the use (the nearest one): followed to what it was set to.
bool BufferFlow::resolve_alias(const std::string& root, const std::string& rest, const std::string& path,
                               const std::string& function, std::size_t at, int depth, Resolution& out,
                               std::vector<std::string>& stack) const {
  const Alias* best = nearest_alias(function, root, at);
  // `std::array<float*, 2> pair = {x, out}; pair[0]`: an element of a list (resolve_array_element).
  if (!best || (best->init.rfind("{", 0) == 0 && !rest.empty() && rest[0] == '[')) return false;
  const std::string base = pointee_path(best->init, rest);
  if (best->init.starts_with("std :: get <") && rest.empty()) {
    // `auto [send, recv] = make_buffers(n)` (record_tuple_binding): an element of what it returns.
    out.via.push_back(fmt::format("{} = {} (line {})", root, best->init, code_[best->token].line));
    resolve_into(best->init, function, best->token, depth, out, stack);
  } else if (base.empty() && returning_helper(best->init)) {
    // `float* x = device_alloc<float>(n)`: what a helper of this file returns.
    out.via.push_back(fmt::format("{} = {} (line {})", root, best->init, code_[best->token].line));
    follow_namesakes_returns(*returning_helper(best->init), rest, depth, out, stack);
  } else if (const std::vector<std::string> fields =
                 base.empty() ? fields_as_array(best->init, rest) : std::vector<std::string>{};
             !fields.empty()) {
    // llm.c's `float** grads = (float**)&model->grads; grads[i]`: any pointer field of the struct.
    out.via.push_back(fmt::format("{} = {} (line {}): an element is any of {} fields", root, best->init,
                                  code_[best->token].line, fields.size()));
    for (const std::string& field : fields) {
      resolve_into(field, function, best->token, depth, out, stack);
      if (!out.reason.empty()) break;
    }
  } else if (const std::vector<std::string> branches =
                 base.empty() ? ternary_branches(best->init) : std::vector<std::string>{};
             !branches.empty()) {
    // `int* in = in_place ? recv + rank * n : send`: either buffer, decided at run time.
    out.via.push_back(fmt::format("{} = {} (line {})", root, best->init, code_[best->token].line));
    for (const std::string& b : branches) {
      resolve_into(b + rest, function, best->token, depth, out, stack);
      if (!out.reason.empty()) break;
    }
  } else if (const std::string viewed = base.empty() && rest.empty() ? viewed_pointer(best->init, function) : "";
             !viewed.empty()) {
    // `std::span<float> view = grads.subspan(off, n)`: the buffer the view is of.
    out.via.push_back(fmt::format("{} = {} (line {}) views {}", root, best->init, code_[best->token].line, viewed));
    resolve_into(viewed, function, best->token, depth, out, stack);
  } else if (const std::string owned = base.empty() ? owned_pointer(best->init) : ""; !owned.empty()) {
    // `auto buf = std::unique_ptr<float, CudaFree>(p)`: the pointer it owns.
    out.via.push_back(fmt::format("{} = {} (line {}) owns {}", root, best->init, code_[best->token].line, owned));
    resolve_into(owned + rest, function, best->token, depth, out, stack);
  } else if (base.empty() && rest.empty() &&
             follow_accessor(best->init, function, best->token, depth - 1, out, stack)) {
    // `float* loss = arena.take<float>(1)`: what the object's member function returns.
    out.via.push_back(fmt::format("{} = {} (line {})", root, best->init, code_[best->token].line));
  } else if (base.empty()) {
    // Initialised by a call or an expression (`ncclComm_t comm = init_comm(r)`): the variable
    // itself is what the program names; an allocation through it must still be found by path.
    out.via.push_back(fmt::format("{} = {} (line {})", root, best->init, code_[best->token].line));
    out.paths.push_back(path);
  } else {
    out.via.push_back(fmt::format("{} = {} (line {})", root, best->init, code_[best->token].line));
    resolve_into(base + rest, function, best->token, depth, out, stack);
  }
  return true;
}

// An element of an array initialised with a list of buffers (`float* const ptrs[] = {g.wte, g.fcw}`):
// any of them.
bool BufferFlow::resolve_array_element(const std::string& expr, const std::string& root, const std::string& rest,
                                       const std::string& path, const std::string& function, std::size_t at, int depth,
                                       Resolution& out, std::vector<std::string>& stack) const {
  if (const ArrayInit init = array_initialiser(function, root, at);
      !init.elements.empty() && !rest.empty() && rest[0] == '[') {
    out.via.push_back(fmt::format("{} is one of {} (line {})", path, init.text, code_[init.token].line));
    const std::string after = rest.substr(rest.find(']') + 1);
    for (const std::string& element : init.elements) {
      const std::string element_path = access_path(element, false);
      if (element_path.empty() && !after.empty()) {
        out.reason = fmt::format("`{}` is an element of `{}`, whose `{}` braid cannot follow", expr, root, element);
        break;
      }
      resolve_into(after.empty() ? element : element_path + after, function, init.token, depth, out, stack);
      if (!out.reason.empty()) break;
    }
    return true;
  }
  return false;
}

// A parameter of `function`: followed to the argument of every call of the function in this file.
// Of overloads (`recv(float* buf, n, from)`, `recv(__half* buf, n)`), the one whose body holds code
// token `at`, where the expression is written.
bool BufferFlow::resolve_parameter(const std::string& root, const std::string& rest, const std::string& function,
                                   std::size_t at, int depth, Resolution& out, std::vector<std::string>& stack) const {
  const bool some_holds_at = std::any_of(functions_.begin(), functions_.end(), [&](const FunctionDef& g) {
    return g.name == function && g.body_open < at && at < g.body_close;
  });
  for (const FunctionDef& f : functions_) {
    if (f.name != function || (some_holds_at && !(f.body_open < at && at < f.body_close))) continue;
    auto p = std::find(f.params.begin(), f.params.end(), root);
    if (p == f.params.end()) continue;
    const std::size_t index = (std::size_t)(p - f.params.begin());
    if (auto v = value_uses_.find(function); v != value_uses_.end()) {
      out.reason = fmt::format(
          "`{}` is a parameter of {}(), which is also used as a value at line {} (called through a "
          "pointer or a copy, with arguments braid does not see)",
          root, function, v->second);
      return true;
    }
    auto calls = calls_.find(function);
    if (calls == calls_.end() || calls->second.empty()) {
      out.reason = fmt::format("`{}` is a parameter of {}(), which is not called in this file", root, function);
      return true;
    }
    // Functions of one name in several classes (`forward`): a call with another arity is another's.
    const bool overloaded = std::any_of(functions_.begin(), functions_.end(), [&](const FunctionDef& g) {
      return g.name == function && g.params.size() != f.params.size();
    });
    for (const CallSite& c : calls->second) {
      if (overloaded && c.args.size() != f.params.size()) continue;
      if (index >= c.args.size()) {
        out.reason = fmt::format("{}() is called with fewer arguments at line {}", function, c.line);
        break;
      }
      if (c.args[index] == "nullptr" || c.args[index] == "NULL" || c.args[index] == "0") {  // no buffer from this call
        out.null_given = true;
        out.via.push_back(fmt::format("{} of {}() <- {} (line {}, no buffer)", root, function, c.args[index], c.line));
        continue;
      }
      std::string arg_path = pointee_path(c.args[index], rest), tail = rest;
      if (arg_path.empty()) {  // `&model` (`&model->grads`) passes the struct itself: m->x is model.x
        bool addr = false;
        LexResult lr = lex(c.args[index]);
        std::vector<Token> t = strip(code_tokens(lr.tokens), addr);
        if (addr) arg_path = access_path(join(t, 0, t.size()), false);
        // `*comm` (`comm[0]`) of a `ncclComm_t* comm` given `&comm`: the variable itself.
        if (addr && !arg_path.empty() && (tail.starts_with("[0]") || tail.starts_with("[]")))
          tail = tail.substr(tail[1] == '0' ? 3 : 2);
      }
      // `c ? a : b`, or a view made at the call (`f(std::span<float>(p, n))`): followed as written.
      if (arg_path.empty() && rest.empty() &&
          (!ternary_branches(c.args[index]).empty() || !viewed_pointer(c.args[index], c.caller).empty())) {
        out.via.push_back(
            fmt::format("{} of {}() <- {} (line {}, in {}())", root, function, c.args[index], c.line, c.caller));
        resolve_into(c.args[index], c.caller, c.token, depth - 1, out, stack);
        if (!out.reason.empty()) break;
        continue;
      }
      // Any other expression braid follows: a smart pointer's (`f(buf.get())`), an offset into one
      // (`f(buf.get() + off)`), an accessor of a class of this file (`f(t.data())`).
      std::string why;  // what stops the argument, when it is followed as written
      if (arg_path.empty() && rest.empty()) {
        Resolution given;
        std::vector<std::string> inner = stack;
        resolve_into(c.args[index], c.caller, c.token, depth - 1, given, inner);
        if (given.reason.empty() && !given.paths.empty()) {
          out.via.push_back(
              fmt::format("{} of {}() <- {} (line {}, in {}())", root, function, c.args[index], c.line, c.caller));
          out.via.insert(out.via.end(), given.via.begin(), given.via.end());
          out.paths.insert(out.paths.end(), given.paths.begin(), given.paths.end());
          out.null_given = out.null_given || given.null_given;
          continue;
        }
        if (!given.reason.empty() &&
            given.reason.find("is not a variable, field or element access") == std::string::npos)
          why = ": " + given.reason;
      }
      if (arg_path.empty()) {
        out.reason = fmt::format("{}() passes `{}` as `{}` at line {}, which braid cannot follow{}", c.caller,
                                 c.args[index], root, c.line, why);
        break;
      }
      out.via.push_back(
          fmt::format("{} of {}() <- {} (line {}, in {}())", root, function, c.args[index], c.line, c.caller));
      resolve_into(arg_path + tail, c.caller, c.token, depth - 1, out, stack);
      if (!out.reason.empty()) break;
    }
    return true;
  }
  return false;
}

// The last `T* [const] name[N] = {a, b, ...};` of `function` before code token `at`, when its elements
// keep those values: declared `const`, or only ever read as `name[...]` in the function (never
// stored into, its address never taken, never passed whole). None when an element is a null pointer
// (an array allocated later, element by element).
BufferFlow::ArrayInit BufferFlow::array_initialiser(const std::string& function, const std::string& root,
                                                    std::size_t at) const {
  const FunctionDef* f = function_named(function);
  ArrayInit found;
  if (!f) return found;
  bool only_read = true;
  for (std::size_t d = f->body_open + 1; d + 1 < f->body_close; ++d) {
    if (code_[d].text != root || code_[d].kind != TokenKind::Identifier) continue;
    if (code_[d - 1].text == "." || code_[d - 1].text == "->") continue;  // another object's field
    const std::size_t close = code_[d + 1].text == "[" ? match_forward(code_, d + 1, f->body_close) : d;
    const std::string& after = code_[close + 1].text;
    const bool declared = close > d && after == "=" && close + 2 < f->body_close && code_[close + 2].text == "{" &&
                          (code_[d - 1].text == "*" || code_[d - 1].text == "const");
    if (declared && d < at) {
      const std::size_t end = match_forward(code_, close + 2, f->body_close);
      found =
          ArrayInit{split_top(code_, close + 2, end), join(code_, close + 2, end + 1), d, code_[d - 1].text == "const"};
      continue;
    }
    if (declared) continue;
    // `std::array<float*, 2> pair = {x, out};` (or `pair{x, out}`, `= {{x, out}}`): its elements, when only read.
    if (code_[d - 1].text == ">" && template_name_before(code_, d - 1) == "array") {
      std::size_t open = code_[d + 1].text == "=" ? d + 2 : d + 1;
      if (open >= f->body_close || code_[open].text != "{") continue;
      std::size_t end = match_forward(code_, open, f->body_close);
      if (code_[open + 1].text == "{" && match_forward(code_, open + 1, end) + 1 == end)
        end = match_forward(code_, ++open, f->body_close);
      if (d < at) found = ArrayInit{split_top(code_, open, end), join(code_, open, end + 1), d, false};
      continue;
    }
    const bool read = close > d && code_[d - 1].text != "&" && after != "=" && after != "+=" && after != "-=" &&
                      after != "++" && after != "--";
    only_read = only_read && read;
  }
  const bool null_element = std::any_of(found.elements.begin(), found.elements.end(),
                                        [](const std::string& e) { return e == "nullptr" || e == "NULL" || e == "0"; });
  if (null_element || (!found.constant && !only_read)) return ArrayInit{};
  return found;
}

// A call at code token k in f: of a function defined in the file, or `obj(args)` on an object
// declared of a class with a call operator (`dist::AllReducer<float> reduce(...)`; declarations
// are noted in `objects` as they come).
void BufferFlow::record_call(std::size_t k, const FunctionDef& f, const std::set<std::string>& defined,
                             const std::set<std::string>& callable_classes, std::set<std::string>& objects) {
  const Token& t = code_[k];
  const std::string& prev = code_[k - 1].text;
  const std::string declared_class = prev == ">" ? template_name_before(code_, k - 1) : prev;
  std::string callee;
  if (callable_classes.count(declared_class)) objects.insert(t.text);
  else if (code_[k + 1].text == "(" && objects.count(t.text)) callee = "operator()";  // `reduce(grads, n)`
  // `device_alloc<float>(n)`: a call of a template of this file, its template arguments skipped.
  std::size_t open = k + 1;
  if (code_[open].text == "<" && defined.count(t.text))
    if (const std::size_t after = after_template_args(code_, open, f.body_close);
        after != SIZE_MAX && code_[after].text == "(")
      open = after;
  if (callee.empty() && code_[open].text == "(" && defined.count(t.text) && k != f.name_token) callee = t.text;
  // `q_.push(job)` on a standard container is not a call of the file's own `push`.
  if (callee.empty() || (is_member_step(code_[k - 1]) && k >= 2 && standard_container(code_[k - 2].text))) return;
  const std::size_t close = match_forward(code_, open, f.body_close);
  calls_[callee].push_back(CallSite{f.name, split_top(code_, open, close), k, t.line});
}

bool BufferFlow::assigned_between(const std::string& name, std::size_t from, std::size_t to) const {
  for (std::size_t k = from + 1; k < to && k + 1 < code_.size(); ++k)
    if (code_[k].text == name && code_[k + 1].text == "=" && code_[k - 1].text != "." && code_[k - 1].text != "->")
      return true;
  return false;
}

std::string BufferFlow::target_path(const std::string& path, const std::string& function, std::size_t at) const {
  std::string p = path, fn = function;
  for (int guard = 0; guard < 8 && !p.empty(); ++guard) {
    const auto [root, rest] = split_root(p);
    const Alias* al = nearest_alias(fn, root, at);
    const FunctionDef* f = function_named(fn);
    if (!al && f && !f->enclosing.empty() && std::find(f->params.begin(), f->params.end(), root) == f->params.end()) {
      fn = f->enclosing;  // a lambda's capture
      continue;
    }
    if (!al && f && !rest.empty()) {  // `cudaMalloc(&l->out, ..)` in a helper given `&layer`: `layer.out`
      const std::string through = through_struct_pointer(*f, root);
      if (through.empty()) return p;
      const CallSite& c = calls_.at(fn).front();
      p = through + rest, fn = c.caller, at = c.token;
      continue;
    }
    if (al && al->pointer && !rest.empty() && !assigned_between(root, al->token, at)) {
      // `Worker* w = (Worker*)arg; cudaMalloc(&w->grads, ..)`: a field through a pointer is its
      // pointee's (a pointer's fields are reached only through `->`): `arg->grads`, or with
      // `Worker* w = &workers[r]`, `workers[r].grads`.
      bool addr = false;
      const std::vector<Token> t = strip(code_tokens(lex(al->init).tokens), addr);
      std::string pointee = access_path(join(t, 0, t.size()), false);
      // `halo_t* h = H + d;`: an element of H, as `&H[d]` is.
      if (const std::string base = addr ? "" : offset_base(al->init);
          !base.empty() && !access_path(base, false).empty())
        pointee = access_path(base, false) + "[]";
      if (pointee.empty()) return p;
      p = pointee + rest;
      at = al->token;
      continue;
    }
    if (!al || !al->reference) return p;
    std::string base = access_path(al->init, false);
    if (base.empty()) {  // `auto& s = mpu();`: the one path the accessor returns a reference to
      const FunctionDef* helper = returning_helper(al->init);
      const std::vector<std::size_t> returns = helper ? return_statements(*helper) : std::vector<std::size_t>{};
      if (returns.size() != 1) return p;
      std::size_t e = returns[0] + 1;
      while (e < helper->body_close && code_[e].text != ";") ++e;
      base = access_path(join(code_, returns[0] + 1, e), false);
      if (base.empty()) return p;
      fn = helper->name;
      at = returns[0];
      p = base + rest;
      continue;
    }
    p = base + rest;
    at = al->token;
  }
  return p;
}

// `(float**)&model->grads` indexed as `[i]...`: the paths of every field of the struct
// (`model.grads.wte...`, the rest after the index appended) when each is a pointer; empty otherwise.
std::vector<std::string> BufferFlow::fields_as_array(const std::string& init, const std::string& rest) const {
  if (rest.empty() || rest[0] != '[') return {};
  const std::vector<Token> all = code_tokens(lex(init).tokens);
  bool pointer_cast = false;  // `(T**)` or `reinterpret_cast<T**>` before the `&`
  for (std::size_t i = 1; i < all.size() && all[i].text != "&"; ++i)
    pointer_cast = pointer_cast || (all[i].text == "*" && all[i - 1].text == "*");
  bool addr = false;
  const std::vector<Token> t = strip(all, addr);
  const std::string object = addr && pointer_cast ? access_path(join(t, 0, t.size()), false) : "";
  std::vector<std::string> paths;
  if (object.empty() || object.find('[') != std::string::npos) return paths;
  const std::string after = rest.substr(rest.find(']') + 1);
  for (const std::string& field : pointer_fields(object)) paths.push_back(object + "." + field + after);
  return paths;
}

}  // namespace braid::convert
