// BufferFlow (buffer_flow.hpp) on classes: function heads (constructors' member-initialiser lists
// included), the fields a class's own code writes, the constructions of a class, and a field
// followed through them to what the construction site passes.
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "braid/convert/buffer_flow.hpp"
#include "braid/convert/buffer_flow_tokens.hpp"

namespace braid::convert {
namespace {

using namespace flow_tokens;

const std::set<std::string> kNotFunctions = {"if",
                                             "for",
                                             "while",
                                             "switch",
                                             "catch",
                                             "return",
                                             "sizeof",
                                             "decltype",
                                             "static_assert",
                                             "alignof",
                                             "noexcept",
                                             "defined",
                                             "__launch_bounds__",
                                             "alignas"};

// The '(' or '{' matching the ')' or '}' at `close`, or SIZE_MAX.
std::size_t open_of(const std::vector<Token>& code, std::size_t close) {
  const std::string c = code[close].text, o = c == ")" ? "(" : "{";
  int depth = 0;
  for (std::size_t j = close + 1; j-- > 0;) {
    if (code[j].text == c) ++depth;
    else if (code[j].text == o && --depth == 0) return j;
  }
  return SIZE_MAX;
}

// Where a trailing return type `-> T` ending before `p` starts (its `->`), or SIZE_MAX. T is names,
// `::`, template arguments, `*`, `&`, cv-qualifiers and `decltype(...)`.
std::size_t trailing_return_start(const std::vector<Token>& code, std::size_t p) {
  int angle = 0;
  for (std::size_t q = p; q > 0; --q) {
    const Token& t = code[q - 1];
    if (t.text == "->" && angle == 0) return q - 1 < p - 1 ? q - 1 : SIZE_MAX;
    if (t.text == ">" || t.text == ">>") angle += (int)t.text.size();
    else if (t.text == "<") --angle;
    else if (t.text == ")") {
      const std::size_t o = open_of(code, q - 1);
      if (o == SIZE_MAX || o == 0 || code[o - 1].text != "decltype") return SIZE_MAX;
      q = o;  // the loop's --q lands on `decltype`
    } else if (!(t.kind == TokenKind::Identifier || t.text == "::" || t.text == "*" || t.text == "&" ||
                 t.text == "&&" || (angle > 0 && (t.text == "," || t.kind == TokenKind::Number))))
      return SIZE_MAX;
    if (angle < 0) return SIZE_MAX;
  }
  return SIZE_MAX;
}

// Back from `p` over what may stand between a function's `)` and its body or initialiser list:
// cv- and other specifiers, `noexcept(...)`/`throw()`, and a trailing return type.
std::size_t skip_specifiers(const std::vector<Token>& code, std::size_t p) {
  static const std::set<std::string> kSpecifiers = {"const", "volatile", "noexcept", "override", "final"};
  while (p > 0) {
    if (kSpecifiers.count(code[p - 1].text)) {
      --p;
      continue;
    }
    if (code[p - 1].text == ")") {
      const std::size_t o = open_of(code, p - 1);
      if (o != SIZE_MAX && o > 0 && (code[o - 1].text == "noexcept" || code[o - 1].text == "throw")) {
        p = o - 1;
        continue;
      }
    }
    const std::size_t arrow = trailing_return_start(code, p);
    if (arrow == SIZE_MAX || arrow == 0) break;
    p = arrow;
  }
  return p;
}

bool null_value(const std::string& expr) { return expr == "nullptr" || expr == "NULL" || expr == "0" || expr.empty(); }

}  // namespace

FunctionHead function_head(const std::vector<Token>& code, std::size_t brace) {
  FunctionHead h;
  std::size_t p = skip_specifiers(code, brace);
  // A constructor's member-initialiser list `) : a(x), b{y} {`: walked back entry by entry to its ':'.
  for (std::size_t q = p; q > 0 && (code[q - 1].text == ")" || code[q - 1].text == "}");) {
    const std::size_t o = open_of(code, q - 1);
    if (o == SIZE_MAX || o < 2 || code[o - 1].kind != TokenKind::Identifier) break;
    if (code[o - 2].text == ",") {
      q = o - 2;
      continue;
    }
    if (code[o - 2].text == ":" && skip_specifiers(code, o - 2) > 0 &&
        code[skip_specifiers(code, o - 2) - 1].text == ")") {
      h.init_colon = o - 2;
      p = skip_specifiers(code, o - 2);
    }
    break;
  }
  if (p == 0 || code[p - 1].text != ")") return {};
  const std::size_t open = open_of(code, p - 1);
  // A function object's call operator, `void operator()(T* buf, size_t n)`: named by `operator`.
  const bool call_operator = open != SIZE_MAX && open >= 3 && code[open - 1].text == ")" &&
                             code[open - 2].text == "(" && code[open - 3].text == "operator";
  // An index operator, `T* operator[](size_t i) const`: named by `operator`.
  h.index = open != SIZE_MAX && open >= 3 && code[open - 1].text == "]" && code[open - 2].text == "[" &&
            code[open - 3].text == "operator";
  // A conversion operator, `operator T*() const`, `operator const float*()`: named by `operator`.
  for (std::size_t q = open == SIZE_MAX ? 0 : open - 1; q > 0 && !call_operator && q + 5 > open; --q) {
    const std::string& x = code[q].text;
    if (x == "operator") {
      if (code[open + 1].text != ")") break;  // takes no arguments
      h.name = q;
      h.open = open;
      h.close = p - 1;
      h.conversion = true;
      return h;
    }
    if (x != "*" && x != "&" && x != "const" && x != "::" && code[q].kind != TokenKind::Identifier) break;
  }
  if (!call_operator && !h.index &&
      (open == SIZE_MAX || open == 0 || code[open - 1].kind != TokenKind::Identifier ||
       kNotFunctions.count(code[open - 1].text)))
    return {};
  h.name = call_operator || h.index ? open - 3 : open - 1;
  h.open = open;
  h.close = p - 1;
  return h;
}

void BufferFlow::collect_classes() {
  for (std::size_t k = 0; k + 2 < code_.size(); ++k) {
    const std::string& x = code_[k].text;
    // `enum class E`, and a template's parameters (`template <class T> class Buffer`) are no class.
    if ((x != "class" && x != "struct") ||
        (k > 0 && (code_[k - 1].text == "enum" || code_[k - 1].text == "<" || code_[k - 1].text == ",")))
      continue;
    // C's `typedef struct { ... } Name;` (a tag or none): the class is Name.
    if (k > 0 && code_[k - 1].text == "typedef" && (code_[k + 1].text == "{" || code_[k + 2].text == "{")) {
      const std::size_t open = code_[k + 1].text == "{" ? k + 1 : k + 2;
      const std::size_t close = match_forward(code_, open, code_.size());
      if (close + 2 < code_.size() && code_[close + 1].kind == TokenKind::Identifier && code_[close + 2].text == ";")
        classes_.push_back(ClassBody{code_[close + 1].text, open, close});
    }
    if (code_[k + 1].kind != TokenKind::Identifier) continue;
    std::size_t j = k + 2;
    // `struct T* p` / `struct T v = ...` / a parameter `(struct T* a, ...)` name the type, not its body.
    while (j < code_.size() && code_[j].text != "{" && code_[j].text != ";" && code_[j].text != "(" &&
           code_[j].text != "=" && code_[j].text != ")" && code_[j].text != "," && code_[j].text != "*")
      ++j;
    if (j < code_.size() && code_[j].text == "{")
      classes_.push_back(ClassBody{code_[k + 1].text, j, match_forward(code_, j, code_.size())});
  }
}

bool BufferFlow::is_class(const std::string& name) const {
  return std::any_of(classes_.begin(), classes_.end(), [&](const ClassBody& c) { return c.name == name; });
}

// Past `name` at code token k and its template arguments, if any (k + 1 when they do not close).
static std::size_t past_template_arguments(const std::vector<Token>& code, std::size_t k) {
  if (k + 1 >= code.size() || code[k + 1].text != "<") return k + 1;
  const std::size_t after = after_template_args(code, k + 1, code.size());
  return after == SIZE_MAX ? k + 1 : after;
}

std::vector<std::string> BufferFlow::classes_holding(const std::string& cls) const {
  std::vector<std::string> out;
  for (const ClassBody& k : classes_) {
    int depth = 0;  // members only: not in a member function's body or parameters
    for (std::size_t j = k.open + 1; k.name != cls && j < k.close; ++j) {
      const std::string& x = code_[j].text;
      if (x == "{" || x == "(") ++depth;
      else if (x == "}" || x == ")") --depth;
      else if (depth == 0 && x == cls) {
        const std::size_t name = past_template_arguments(code_, j);  // a value member, not `T*`, `T&`, `T f()`
        if (name + 1 < k.close && code_[name].kind == TokenKind::Identifier && code_[name + 1].text != "(") {
          out.push_back(k.name);
          break;
        }
      }
    }
  }
  return out;
}

bool BufferFlow::container_construction_allocates(const std::string& cls) const {
  return std::any_of(functions_.begin(), functions_.end(), [&](const FunctionDef& f) {
    if (f.name != cls || f.owner != cls) return false;
    const std::size_t open = f.name_token + 1, close = match_forward(code_, open, f.body_open);
    const auto in_params = [&](const char* word) {
      return std::any_of(code_.begin() + (long)open, code_.begin() + (long)close,
                         [&](const Token& t) { return t.text == word; });
    };
    // Callable without arguments, or a copy or move (`T(const T& o)`): what a container runs itself.
    const bool by_container = f.params.empty() || in_params("=") || (f.params.size() == 1 && in_params(cls.c_str()));
    if (!by_container) return false;
    // Its initialisers and body allocate, or call a function of this file that may.
    for (std::size_t k = close + 1; k + 1 < f.body_close; ++k) {
      const std::string& x = code_[k].text;
      if (x.rfind("cudaMalloc", 0) == 0 || x == "ncclMemAlloc") return true;
      if (code_[k + 1].text == "(" && code_[k].kind == TokenKind::Identifier && x != cls &&
          std::any_of(functions_.begin(), functions_.end(), [&](const FunctionDef& g) { return g.name == x; }))
        return true;
    }
    return false;
  });
}

int BufferFlow::hidden_construction(const std::string& cls) const {
  // A container default-constructs (resize, operator[], a sized vector) and copies or moves what it
  // is given; only a construction in place (`emplace_back(n)`) runs another constructor unseen.
  // Either is reported at the container.
  const bool by_default = container_construction_allocates(cls);
  int emplaced = 0;
  for (std::size_t k = 1; !by_default && emplaced == 0 && k + 1 < code_.size(); ++k) {
    const std::string& m = code_[k].text;
    if (!is_member_step(code_[k - 1]) || code_[k + 1].text != "(" ||
        !(m.rfind("emplace", 0) == 0 || m == "try_emplace"))
      continue;
    const std::size_t close = match_forward(code_, k + 1, code_.size());
    // `m.emplace(key, T(n))`: the T is built where braid sees it, then moved in.
    const bool temporary = std::any_of(code_.begin() + (long)k + 2, code_.begin() + (long)close,
                                       [&](const Token& t) { return t.text == cls; });
    if (!temporary) emplaced = code_[k].line;
  }
  for (std::size_t k = 2; k < code_.size(); ++k) {
    if (code_[k].text != cls) continue;
    std::size_t q = k;  // `std::vector<pp::Buffer>`: the qualifiers belong to the argument
    while (q >= 3 && code_[q - 1].text == "::" && code_[q - 2].kind == TokenKind::Identifier) q -= 2;
    if (q < 2 || (code_[q - 1].text != "<" && code_[q - 1].text != ",")) continue;
    if (visible_containers_.count(k)) continue;     // a vector whose fills are constructions braid sees
    const std::string& holder = code_[q - 2].text;  // made by make_unique/new, seen as constructions
    if (code_[q - 1].text == "<" && (holder == "make_unique" || holder == "make_shared" || smart_types_.count(holder)))
      continue;
    const std::size_t after = past_template_arguments(code_, k);
    if (after < code_.size() && (code_[after].text == "*" || code_[after].text == "&")) continue;
    if (by_default || emplaced > 0) return code_[k].line;
  }
  return 0;
}

// A copy or move constructor or assignment setting `field` from the same field of the instance it
// is given (`ptr_(o.ptr_)`, `ptr_ = std::exchange(o.ptr_, nullptr)`): the field then holds what
// some instance's field holds, which adds no allocation of its own (value tokens [b, e)).
bool BufferFlow::copies_own_field(const FunctionDef& f, std::size_t b, std::size_t e, const std::string& field) const {
  if (f.name != f.owner && f.name != "operator=") return false;
  if (e > b + 4 && code_[b].text == "std" && code_[b + 1].text == "::" &&
      (code_[b + 2].text == "move" || code_[b + 2].text == "exchange") && code_[b + 3].text == "(") {
    const std::size_t close = match_forward(code_, b + 3, e);
    std::size_t arg_end = b + 4;
    while (arg_end < close && code_[arg_end].text != ",") ++arg_end;
    if (close + 1 != e) return false;
    b += 4;
    e = arg_end;
  }
  return e == b + 3 && std::find(f.params.begin(), f.params.end(), code_[b].text) != f.params.end() &&
         (code_[b + 1].text == "." || code_[b + 1].text == "->") && code_[b + 2].text == field;
}

// The fields a member function writes: its member-initialiser list (from `init_colon`), `field = x;`
// and `this->field = x;` in its body, and `&field` (written through its address). A copy or move
// from another instance of the class is not a write of anything new (copies_own_field).
void BufferFlow::record_member_writes(const FunctionDef& f, std::size_t init_colon) {
  if (f.owner.empty()) return;
  for (std::size_t k = init_colon + 1; init_colon > 0 && k + 1 < f.body_open; ++k) {
    if (code_[k].kind != TokenKind::Identifier || (code_[k + 1].text != "(" && code_[k + 1].text != "{")) continue;
    const std::size_t close = match_forward(code_, k + 1, f.body_open);
    if (!copies_own_field(f, k + 2, close, code_[k].text))
      for (const std::string& mk : member_keys(f.owner, code_[k].text))
        member_writes_[mk].push_back(MemberWrite{f.name, join(code_, k + 2, close), k, code_[k].line, true});
    k = close;
  }
  for (std::size_t k = f.body_open + 1; k + 2 < f.body_close; ++k) {
    const Token& t = code_[k];
    if (t.kind != TokenKind::Identifier) continue;
    const std::string& prev = code_[k - 1].text;
    const bool this_field = prev == "->" && code_[k - 2].text == "this";
    // `&field[i]` is an element's address (a view), not the field's: it cannot write the field.
    if ((prev == "&" || (this_field && code_[k - 3].text == "&")) && code_[k + 1].text != "[")
      for (const std::string& mk : member_keys(f.owner, t.text)) member_addressed_.insert(mk);
    if (code_[k + 1].text != "=" || !(this_field || prev == ";" || prev == "{" || prev == "}")) continue;
    std::size_t e = k + 2;
    while (e < f.body_close && code_[e].text != ";")
      e = code_[e].text == "(" ? match_forward(code_, e, f.body_close) + 1 : e + 1;
    if (!copies_own_field(f, k + 2, e, t.text))
      for (const std::string& mk : member_keys(f.owner, t.text))
        member_writes_[mk].push_back(MemberWrite{f.name, join(code_, k + 2, e), k, t.line, false});
  }
}

// A construction of a class with a constructor in this file (`Trainer t(comm, n)`, `Trainer t{...}`,
// `Buffer<float> b(n)`, `new Buffer<float>(n)`, `std::make_unique<Trainer>(...)`, `GroupGuard g;`;
// `Trainer(...)` and `new Trainer(...)` are calls already): a call site of the constructor, whose
// parameters the member-initialiser list reads.
void BufferFlow::record_construction(std::size_t k, const std::string& caller, std::size_t end) {
  const auto has_constructor = [&](const std::string& cls) {  // or members that may have one
    return is_class(cls) || std::any_of(functions_.begin(), functions_.end(),
                                        [&](const FunctionDef& f) { return f.name == cls && f.owner == cls; });
  };
  std::string cls;
  std::size_t open = 0;
  const Token& t = code_[k];
  // A class template's arguments (`DeviceBuffer<float> grads(n)`) are skipped.
  const bool maker = t.text == "make_unique" || t.text == "make_shared";
  const std::size_t after = past_template_arguments(code_, k);
  if (maker) {  // `std::make_unique<Trainer>(...)`, `std::make_unique<Buffer<float>>(n)`, `<ns::Trainer>`
    std::size_t name = k + 2;
    while (name + 2 < after && code_[name + 1].text == "::") name += 2;
    if (after > k + 1 && after < end && code_[after].text == "(" && name < end) cls = code_[name].text;
    open = after;
  } else if (after + 1 < end && code_[after].kind == TokenKind::Identifier &&
             (code_[after + 1].text == "(" || code_[after + 1].text == "{")) {
    cls = t.text;
    open = after + 1;
  } else if (after + 1 < end && code_[after].kind == TokenKind::Identifier && code_[after + 1].text == ";" &&
             (k == 0 || code_[k - 1].text != "return")) {
    cls = t.text;  // `GroupGuard guard;`: the default constructor runs
    open = after + 1;
  } else if (after < end && code_[after].text == "{" && code_[k - 1].text != ")") {
    cls = t.text;
    open = after;
  } else if (after > k + 1 && after < end && code_[after].text == "(") {  // `Buffer<float>(n)`, `new Buffer<float>(n)`
    cls = t.text;
    open = after;
  } else if (k > 0 && code_[k - 1].text == "new" && after < end &&
             (code_[after].text == "(" || code_[after].text == ";")) {  // `new Model()`, `new Model;`
    cls = t.text;
    open = after;
  }
  if (cls.empty() || !has_constructor(cls)) return;
  const bool declaration = open == after + 1;  // `T name(...)`, `T name{...}`, `T name;`
  // Each declarator constructs one: `CommWorker tp_worker(tp), dp_worker(dp);`. `at` is a
  // declarator's `(` or `{`, or what follows a name given no initialiser.
  // A later declarator's call site is at its name (its arguments follow it, as a call's do).
  for (std::size_t at = open, site = k;;) {
    std::size_t next = at;
    if (code_[at].text == "(" || code_[at].text == "{") {
      const std::size_t close = match_forward(code_, at, end);
      calls_[cls].push_back(CallSite{caller, split_top(code_, at, close), site, t.line});
      next = close + 1;
    } else {
      calls_[cls].push_back(CallSite{caller, {}, site, t.line});  // the default constructor runs
    }
    if (!declaration || next + 2 >= end || code_[next].text != "," || code_[next + 1].kind != TokenKind::Identifier)
      return;
    at = next + 2;
    site = next + 1;
    const std::string& x = code_[at].text;
    if (x != "(" && x != "{" && x != "," && x != ";") return;
  }
}

// Whether class `cls`'s body declares a data member `name` (at its own level, not in a member
// function's body): `T* name;`, `T* name = nullptr;`, `T name[N];`, `T name{};`.
bool BufferFlow::declares_field(const std::string& cls, const std::string& name) const {
  for (const ClassBody& c : classes_) {
    if (c.name != cls) continue;
    int depth = 0;
    for (std::size_t k = c.open + 1; k + 1 < c.close; ++k) {
      const std::string& x = code_[k].text;
      if (x == "{" || x == "(") ++depth;
      else if (x == "}" || x == ")") --depth;
      else if (depth == 0 && x == name && code_[k - 1].text != "." && code_[k - 1].text != "->") {
        const std::string& next = code_[k + 1].text;
        if (next == ";" || next == "=" || next == "[" || next == "{" || next == ",") return true;
      }
    }
  }
  return false;
}

// The field a member getter returns (`T* data() const { return data_; }`, `this->data_`), or a
// view into it, which may take parameters (a paged pool's `T* block(int layer, int id) const
// { return blocks + (layer * n + id) * elems; }`, `return &blocks[i];`), when every member
// function of that name is such a getter of a field its class declares and its own code never
// sets; else "".
bool BufferFlow::owner_resets(const std::string& owner, const std::string& field) const {
  for (const FunctionDef& f : functions_)
    for (std::size_t k = f.body_open + 1; f.owner == owner && k + 2 < f.body_close; ++k)
      if (code_[k].text == field && code_[k + 1].text == "." &&
          (code_[k + 2].text == "reset" || code_[k + 2].text == "swap" || code_[k + 2].text == "release"))
        return true;
  return false;
}

std::string BufferFlow::returned_name(std::size_t k, std::size_t end, bool& smart) const {
  // The name returned whole, cast or not (`(T*)x`, `reinterpret_cast<T*>(x)`: strip), or a smart
  // pointer's `.get()` (`static_cast<float*>(flat.get())`: owned_pointer).
  const std::string expr = join(code_, k, end);
  bool addr = false;
  const std::vector<Token> bare = strip(code_tokens(lex(expr).tokens), addr);
  const std::string owned = addr ? "" : owned_pointer(expr);
  smart = !owned.empty() && owned.find(' ') == std::string::npos;
  if (smart) return owned;
  return !addr && bare.size() == 1 && bare[0].kind == TokenKind::Identifier ? bare[0].text : "";
}

std::string BufferFlow::returned_field(const std::string& getter, const std::string& cls) const {
  std::string field;
  for (const FunctionDef& f : functions_) {
    if (f.name != getter || (!cls.empty() && f.owner != cls)) continue;
    if (f.owner.empty()) return "";
    const std::vector<std::size_t> returns = return_statements(f);
    if (returns.size() != 1) return "";
    std::size_t k = returns[0] + 1;
    const std::size_t end = flow_tokens::statement_end(code_, k, f.body_close);  // its `;`
    bool smart = false;
    std::string name = returned_name(k, end, smart);
    // A smart pointer its class's own code gives a pointer (`p_.reset(p)`) is followed as a member.
    if (smart && owner_resets(f.owner, name)) return "";
    if (name.empty()) {  // `this->x`, `&blocks[i]`, `x + off`: a view of a field
      if (k + 2 < end && code_[k].text == "this" && code_[k + 1].text == "->") k += 2;
      if (k + 2 < end && code_[k].text == "&" && code_[k + 2].text == "[") ++k;
      if (k >= end || code_[k].kind != TokenKind::Identifier) return "";
      const bool view = code_[k + 1].text == "+" || (code_[k + 1].text == "[" && code_[k - 1].text == "&");
      if (k + 1 != end && !(view && end < f.body_close)) return "";
      name = code_[k].text;
    }
    if (std::find(f.params.begin(), f.params.end(), name) != f.params.end()) return "";
    if (!declares_field(f.owner, name) || (!field.empty() && field != name)) return "";
    // A field the class's own code sets (its constructor allocates it) is followed as a member
    // (follow_member); this form is for plain holders filled from outside (a factory's `t.data_`).
    const std::string key = f.owner + "::" + name;
    if (member_writes_.count(key) || member_addressed_.count(key)) return "";
    field = name;
  }
  return field;
}

// `f() .x`, `obj.get() [i]`, `p->weight()`: what a function of this file called without arguments
// returns, then the rest of the access (accessors, getters, a singleton's `instance()`). A member
// function's name may belong to several classes: every one of them is followed. False when `expr`
// has no such form.
bool BufferFlow::follow_accessor(const std::string& expr, const std::string& function, std::size_t at, int depth,
                                 Resolution& out, std::vector<std::string>& stack) const {
  LexResult lr = lex(expr);
  bool addr = false;
  const std::vector<Token> t = strip(code_tokens(lr.tokens), addr);
  if (addr) return false;
  for (std::size_t i = 0; i + 2 < t.size(); ++i) {
    if (t[i].kind != TokenKind::Identifier) continue;
    // `arena.take<float>(n)`: a member template's arguments are skipped.
    const std::size_t paren = t[i + 1].text == "<" ? flow_tokens::after_template_args(t, i + 1, t.size()) : i + 1;
    if (paren == SIZE_MAX || paren + 1 >= t.size() || t[paren].text != "(") continue;
    const bool member = i > 0 && (t[i - 1].text == "." || t[i - 1].text == "->");
    // `pool.block(layer, id)`: a view getter given arguments; `arena.take<float>(n)`: a member
    // function handing out views of its class's own allocation (followed through its returns).
    const std::size_t close = t[paren + 1].text == ")" ? paren + 1 : flow_tokens::match_forward(t, paren, t.size());
    if (close >= t.size() ||
        (close != paren + 1 && !(member && (!returned_field(t[i].text).empty() || !owner_of(t[i].text).empty()))))
      continue;
    if (i > 0 && !member) return false;
    // `local.data()` of a variable declared of one class: that class's function, when it has one
    // (several classes may have a `data()`).
    std::string cls = member && i == 2 && t[0].kind == TokenKind::Identifier ? declared_class(t[0].text) : "";
    if (std::none_of(functions_.begin(), functions_.end(),
                     [&](const FunctionDef& f) { return f.name == t[i].text && f.owner == cls; }))
      cls.clear();
    const std::string rest = access_path("r" + join(t, close + 1, t.size()), false);
    if (rest.empty() || rest[0] != 'r') return false;
    // `obj.data()` of a getter returning a field (`return data_;`) is `obj.data_`, followed in the
    // caller's terms (the object may be a parameter, an element, a copy of a factory's result).
    if (const std::string field = member ? returned_field(t[i].text, cls) : ""; !field.empty()) {
      out.via.push_back(fmt::format("{}() returns its field {}", t[i].text, field));
      resolve_into(join(t, 0, i - 1) + " . " + field + join(t, close + 1, t.size()), function, at, depth, out, stack);
      return true;
    }
    bool any = false;
    for (const FunctionDef& f : functions_) {
      if (f.name != t[i].text || !f.enclosing.empty() || (!member && !f.params.empty()) ||
          (member && f.owner.empty()) || (!cls.empty() && f.owner != cls))
        continue;
      any = true;
      const std::size_t before = out.paths.size();
      follow_returns(f, rest.substr(1), depth, out, stack);
      if (member) in_callers_terms(f.owner, join(t, 0, i), out, before);  // `ws.carve<T>(n)`: `ws.base`
      if (!out.reason.empty()) return true;
    }
    return any;
  }
  return false;
}

// The class whose member `function` is, when only one class has a function of that name.
std::string BufferFlow::owner_of(const std::string& function) const {
  std::string owner;
  for (const FunctionDef& f : functions_) {
    if (f.name != function) continue;
    if (f.owner.empty() || (!owner.empty() && owner != f.owner)) return "";
    owner = f.owner;
  }
  return owner;
}

std::string BufferFlow::declared_class(const std::string& name) const {
  std::set<std::string> classes;
  for (std::size_t k = 1; k + 1 < code_.size(); ++k) {
    if (code_[k].text != name) continue;
    const std::string& after = code_[k + 1].text;
    if (after != ";" && after != "(" && after != "{" && after != "=" && after != "," && after != ")") continue;
    std::size_t w = k - 1;
    while (w > 0 && (code_[w].text == "*" || code_[w].text == "&" || code_[w].text == "&&")) --w;
    // `C a(x), b(y)`: back over the declarators before this one to the type.
    while (w > 1 && code_[w].text == ",") {
      std::size_t j = w - 1;
      if (code_[j].text == ")" || code_[j].text == "}") {
        for (int depth = 0; j > 0; --j) {
          depth += code_[j].text == ")" || code_[j].text == "}"   ? 1
                   : code_[j].text == "(" || code_[j].text == "{" ? -1
                                                                  : 0;
          if (depth == 0) break;
        }
        --j;
      }
      if (j == 0 || code_[j].kind != TokenKind::Identifier) break;
      w = j - 1;
      while (w > 0 && (code_[w].text == "*" || code_[w].text == "&")) --w;
    }
    if (code_[w].text == ">") {  // back over template arguments to the class's name
      int depth = 0;
      for (; w > 0; --w) {
        if (code_[w].text == ">") ++depth;
        else if (code_[w].text == "<" && --depth == 0) break;
      }
      if (w == 0) continue;
      --w;
    }
    if (code_[w].kind == TokenKind::Identifier && is_class(code_[w].text)) classes.insert(code_[w].text);
  }
  return classes.size() == 1 ? *classes.begin() : "";
}

BufferFlow::OwnField BufferFlow::own_field_allocation(const std::string& path) const {
  const auto [root, rest] = split_root(path);
  if (rest.size() < 2 || rest[0] != '.') return {};
  const std::size_t next = rest.find_first_of(".[", 1);
  const std::string field = rest.substr(1, next == std::string::npos ? std::string::npos : next - 1);
  const std::string cls = declared_class(root);
  if (cls.empty() || !member_addressed_.count(cls + "::" + field)) return {};
  return {cls, field + (next == std::string::npos ? "" : rest.substr(next))};
}

std::vector<BufferFlow::OwnCopy> BufferFlow::own_container_copies(const std::string& path) const {
  const auto [root, rest] = split_root(path);
  const std::size_t open = rest.find('[');
  if (rest.size() < 2 || rest[0] != '.' || open == std::string::npos || rest.find('.', 1) < open) return {};
  const std::size_t close = rest.find(']', open);
  const auto copies = element_copies_.find(rest.substr(1, open - 1));
  const std::string cls = close == std::string::npos || copies == element_copies_.end() ? "" : declared_class(root);
  if (cls.empty()) return {};
  std::vector<OwnCopy> out;
  for (const ElementCopy& copy : copies->second)
    if (owner_of(copy.function) == cls)
      out.push_back(OwnCopy{cls, copy.origin + rest.substr(close + 1), copy.function});
  return out;
}

// A field of the function's class followed to what the class's own code writes into it (non-null
// values; a field also written through its address keeps its own path too). False when nothing does.
bool BufferFlow::follow_member(const std::string& path, const std::string& function, std::size_t at, int depth,
                               Resolution& out, std::vector<std::string>& stack) const {
  const auto [root, rest] = split_root(path);
  // The class of the function at `at` (several classes may have a function of this name).
  const std::string owner =
      at < owner_.size() && owner_[at] >= 0 && functions_[(std::size_t)owner_[at]].name == function
          ? functions_[(std::size_t)owner_[at]].owner
          : owner_of(function);
  auto writes = owner.empty() ? member_writes_.end() : member_writes_.find(owner + "::" + root);
  if (writes == member_writes_.end()) return false;
  std::vector<const MemberWrite*> values;
  for (const MemberWrite& w : writes->second)
    if (!null_value(w.expr)) values.push_back(&w);
  if (values.empty()) return false;
  for (const MemberWrite* w : values) {
    out.via.push_back(fmt::format("field {} of {} <- {} ({} of {}(), line {})", root, owner, w->expr,
                                  w->initialiser ? "member-initialiser list" : "assigned in the body", w->function,
                                  w->line));
    resolve_into(w->expr + rest, w->function, w->token, depth - 1, out, stack);
    if (!out.reason.empty()) return true;
  }
  if (member_addressed_.count(owner + "::" + root)) out.paths.push_back(path);
  return true;
}

}  // namespace braid::convert
