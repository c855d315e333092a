// BufferFlow (buffer_flow.hpp): a std::vector of a class whose every use braid reads. Its elements
// are constructed where it is filled (`grads.emplace_back(n)`, `push_back(Buffer<float>(n))`), so
// those fills are the class's constructions. Sound only when the vector's history is the same on
// every rank: declared empty in a function, only reserved and filled unconditionally (the fills are
// call sites, so a fill under a condition is found like any construction) in `for` loops whose trip
// count is rank-free, otherwise only read. Any other use (resize, insert, assign, a copy, an
// element written, the vector passed to a function) keeps its constructions out of braid's sight.
#include <algorithm>
#include <functional>
#include <set>

#include "braid/convert/buffer_flow.hpp"
#include "braid/convert/buffer_flow_tokens.hpp"

namespace braid::convert {

using namespace flow_tokens;

namespace {

bool writes(const std::string& x) {
  static const std::set<std::string> kWrites = {
      "=", "+=", "-=", "*=", "/=", "%=", "<<=", ">>=", "&=", "|=", "^=", "++", "--"};
  return kWrites.count(x) > 0;
}

// Words a rank-free expression may hold besides variables: types and literals.
bool neutral_word(const std::string& x) {
  static const std::set<std::string> kWords = {
      "int",  "unsigned", "long",    "short",   "size_t",   "auto",     "const",     "constexpr", "float", "double",
      "char", "bool",     "int32_t", "int64_t", "uint32_t", "uint64_t", "ptrdiff_t", "signed",    "true",  "false"};
  return kWords.count(x) > 0;
}

// Calls whose value is their arguments' alone (casts, conversions, min/max), named as called.
bool pure_call(const std::string& x) {
  static const std::set<std::string> kCalls = {"sizeof", "static_cast", "atoi",   "atol", "atoll", "stoi",
                                               "stol",   "stoul",       "stoull", "min",  "max"};
  return kCalls.count(x) > 0;
}

// A member that reads a value or a container without writing it (what follows is checked too).
bool reading_member(const std::string& x) {
  return x == "size" || x == "empty" || x == "length" || x == "capacity" || x == "front" || x == "back" || x == "at";
}

bool jump(const std::string& x) {
  return x == "break" || x == "continue" || x == "return" || x == "goto" || x == "throw" || x == "exit" ||
         x == "abort" || x == "MPI_Abort";
}

}  // namespace

// True when the value of tokens [b, e) is the same on every rank: numbers, neutral words, the loop's
// own variables (written only in its header) and rank-free names. Strings and unknown calls are not.
bool BufferFlow::rank_free_expression(std::size_t b, std::size_t e, const std::set<std::string>& loop_vars,
                                      int depth) const {
  for (std::size_t i = b; i < e; ++i) {
    const Token& t = code_[i];
    if (t.kind == TokenKind::String) return false;
    if (t.kind == TokenKind::Punct && writes(t.text)) {
      const bool own =
          (i > b && loop_vars.count(code_[i - 1].text)) || (i + 1 < e && loop_vars.count(code_[i + 1].text));
      if (!own) return false;
    }
    if (t.kind != TokenKind::Identifier) continue;
    if (i > b && is_member_step(code_[i - 1])) {
      // `cfg.layers`: the object was read above; the field is rank-free when only its default sets it.
      const bool call = i + 1 < e && code_[i + 1].text == "(";
      if (!reading_member(t.text) && (call || !rank_free_field(t.text, depth - 1))) return false;
      continue;
    }
    const std::string& next = i + 1 < e ? code_[i + 1].text : "";
    if (neutral_word(t.text) || loop_vars.count(t.text) || next == "::" ||
        (pure_call(t.text) && (next == "(" || next == "<")))
      continue;
    if (next == "(") return false;  // an unknown call
    if (!rank_free_name(t.text, depth - 1)) return false;
  }
  return true;
}

// A field (`layers` of `cfg.layers`) that nothing in the file sets but its declaration's default
// (`int layers = 4;`, itself rank-free): no assignment, increment, read into or address of it by any
// object, no constructor's initialiser list. Fields are matched by name, whatever their class.
bool BufferFlow::rank_free_field(const std::string& field, int depth) const {
  if (depth <= 0) return false;
  for (const auto& [key, writes] : member_writes_)
    if (key.ends_with("::" + field)) return false;
  for (std::size_t k = 1; k + 1 < code_.size(); ++k) {
    if (code_[k].text != field || code_[k].kind != TokenKind::Identifier) continue;
    const std::string& next = code_[k + 1].text;
    if (owner_[k] < 0 && !is_member_step(code_[k - 1])) {  // its declaration in a class body
      const std::size_t e = next == "="   ? statement_end(code_, k + 2, code_.size())
                            : next == "{" ? match_forward(code_, k + 1, code_.size())
                                          : k + 2;
      if (e > k + 2 && !rank_free_expression(k + 2, e, {}, depth)) return false;
      continue;
    }
    std::size_t first = k;  // where the access starts: `&w.cfg.layers` is at `w`
    while (first >= 2 && is_member_step(code_[first - 1]) && code_[first - 2].kind == TokenKind::Identifier) first -= 2;
    const std::string& before = code_[first - 1].text;
    if (writes(next) || before == "&" || before == "++" || before == "--" || before == ">>") return false;
  }
  return true;
}

// An occurrence of a variable at k that only reads it: not written (assigned, incremented, read
// into, its address taken, an element or `front()` assigned, bound to a non-const reference), not
// given whole to a function other than those below (a reference parameter could write it).
bool BufferFlow::read_only_use(std::size_t k) const {
  const std::string& prev = code_[k - 1].text;
  if (prev == "++" || prev == "--" || prev == "&" || prev == ">>" || k + 1 >= code_.size()) return false;
  // Bound to a reference that may write it: `auto& s = name;`, `for (auto& x : name)` (unless const).
  if (prev == "=" && k >= 3 && (code_[k - 3].text == "&" || code_[k - 3].text == "&&")) return false;
  if (prev == ":") {
    bool reference = false, constant = false;
    for (std::size_t j = k - 1; j > 0 && code_[j].text != "("; --j) {
      reference = reference || code_[j].text == "&" || code_[j].text == "&&";
      constant = constant || code_[j].text == "const";
    }
    if (reference && !constant) return false;
  }
  std::size_t next = k + 1;
  if (code_[next].text == "[") next = match_forward(code_, next, code_.size()) + 1;
  if (code_[next].text == "." && next + 2 < code_.size()) {
    // A field read (`cfg.layers`, whether the field is rank-free is rank_free_field's) or a reading call.
    while (is_member_step(code_[next]) && next + 2 < code_.size() && code_[next + 1].kind == TokenKind::Identifier &&
           code_[next + 2].text != "(")
      next += 2;
    if (code_[next].text == "." && next + 2 < code_.size()) {
      if (!reading_member(code_[next + 1].text) || code_[next + 2].text != "(") return false;
      next = match_forward(code_, next + 2, code_.size()) + 1;
    }
  }
  if (next >= code_.size() || writes(code_[next].text)) return false;
  if ((prev == "(" || prev == ",") && (code_[k + 1].text == ")" || code_[k + 1].text == ",")) {
    const std::size_t open = enclosing_open(code_, k);                          // the bracket the whole argument is in
    if (open == SIZE_MAX || open == 0 || code_[open].text != "(") return true;  // a braced list copies
    // Given by value: to a kernel, printf, or a constructor of the file's classes, directly or
    // through a vector's fill (a constructor taking its size by non-const reference is not met).
    const Token& callee = code_[open - 1];
    const std::string cls = callee.text == ">" ? template_name_before(code_, open - 1) : callee.text;
    // `Model model(cfg)`: the constructor of the declared variable's class.
    const bool declared_object = callee.kind == TokenKind::Identifier && open >= 2 &&
                                 (is_class(code_[open - 2].text) ||
                                  (code_[open - 2].text == ">" && is_class(template_name_before(code_, open - 2))));
    return callee.kind == TokenKind::LaunchClose || callee.text == "printf" || callee.text == "fprintf" ||
           callee.text == "emplace_back" || callee.text == "push_back" || is_class(cls) || declared_object ||
           cls == "make_unique" || cls == "make_shared";
  }
  return true;
}

// True when `name` holds the same value on every rank: declared once with a rank-free initialiser
// (`const int layers = 4;`, `const std::vector<size_t> sizes = {4096, 1024};`) and then only read,
// or main's argc/argv, never written (mpirun gives every rank the same command line).
bool BufferFlow::rank_free_name(const std::string& name, int depth) const {
  if (depth <= 0) return false;
  const FunctionDef* main = function_named("main");
  bool parameter = main && std::find(main->params.begin(), main->params.end(), name) != main->params.end();
  // A parameter of the file's other functions (`Model(const std::vector<size_t>& shapes)`): rank-free
  // when every call gives it a rank-free argument (`Model m({4096, 1 << 20})`).
  std::vector<const FunctionDef*> takers;
  for (const FunctionDef& f : functions_)
    if (&f != main && std::find(f.params.begin(), f.params.end(), name) != f.params.end()) takers.push_back(&f);
  for (const FunctionDef* f : takers) {
    const std::size_t index = std::size_t(std::find(f->params.begin(), f->params.end(), name) - f->params.begin());
    auto sites = calls_.find(f->name);
    if (value_uses_.count(f->name)) return false;
    if (sites == calls_.end()) continue;  // never called in sight (a class the program never makes)
    for (const CallSite& c : sites->second) {
      if (index >= c.args.size()) return false;  // a default argument
      const std::vector<Token> arg = code_tokens(lex(c.args[index]).tokens);
      for (std::size_t i = 0; i < arg.size(); ++i) {
        if (arg[i].kind == TokenKind::String) return false;
        if (arg[i].kind != TokenKind::Identifier || neutral_word(arg[i].text)) continue;
        if (i > 0 && is_member_step(arg[i - 1])) {  // as rank_free_expression reads a member
          if (!reading_member(arg[i].text)) return false;
          continue;
        }
        const bool called = i + 1 < arg.size() && (arg[i + 1].text == "(" || arg[i + 1].text == "<");
        if (!called && arg[i].text == name) continue;  // `Model m(cfg)` for `Model(const Config& cfg)`: checked here
        if (called ? !pure_call(arg[i].text) : !rank_free_name(arg[i].text, depth - 1)) return false;
      }
    }
  }
  const auto in_a_head = [&](std::size_t k) {
    if (parameter && k > main->name_token && k < main->body_open) return true;
    return std::any_of(takers.begin(), takers.end(),
                       [&](const FunctionDef* f) { return k > f->name_token && k < f->body_open; });
  };
  int declarations = 0;
  for (std::size_t k = 1; k + 1 < code_.size(); ++k) {
    if (code_[k].text != name || code_[k].kind != TokenKind::Identifier || is_member_step(code_[k - 1]) ||
        code_[k - 1].text == "::")
      continue;
    if (in_a_head(k)) continue;  // its declaration as a parameter
    const Token& prev = code_[k - 1];
    const std::string& next = code_[k + 1].text;
    const bool declared = (prev.text == ">" || declaring_word(prev)) && (next == "=" || next == "{" || next == "(");
    // `Config cfg;`: default-constructed (a class's defaults, rank-free or not, are its fields').
    if (!declared && prev.kind == TokenKind::Identifier && declaring_word(prev) && next == ";" && is_class(prev.text)) {
      if (++declarations > 1 || parameter) return false;
      continue;
    }
    if (!declared) {
      if (!read_only_use(k)) return false;
      continue;
    }
    if (++declarations > 1 || parameter) return false;
    const std::size_t b = k + 2;
    const std::size_t e =
        next == "=" ? statement_end(code_, b, code_.size()) : match_forward(code_, k + 1, code_.size());
    if (next == "=" &&
        std::any_of(code_.begin() + (long)b, code_.begin() + (long)e,
                    [](const Token& t) {
                      return t.text == ",";  // `int a = x, b = y;`: the declarator list is not split here
                    }) &&
        code_[b].text != "{")
      return false;
    if (!rank_free_expression(b, e, {}, depth)) return false;
  }
  return declarations == 1 || parameter || (declarations == 0 && !takers.empty());
}

// True when every loop of `function` holding code token `at` runs the same number of times on every
// rank: a `for` whose header is rank-free and whose own variables its body does not write, with no
// jump out of its body (a `break` under a condition would end it early on some ranks).
bool BufferFlow::rank_free_loops(std::size_t at, const FunctionDef& function) const {
  for (std::size_t k = function.body_open + 1; k < at; ++k) {
    const std::string& x = code_[k].text;
    if (x != "for" && x != "while" && x != "do") continue;
    std::size_t body = k + 1, close = k;
    if (x != "do") {
      if (code_[k + 1].text != "(") continue;
      close = match_forward(code_, k + 1, function.body_close);
      body = close + 1;
    }
    const std::size_t end = code_[body].text == "{" ? match_forward(code_, body, function.body_close)
                                                    : statement_end(code_, body, function.body_close);
    if (at <= k || at > end) continue;
    if (x != "for" || at <= close) return false;  // a while or do-while: its trip count is its condition's
    std::set<std::string> vars;
    std::size_t colon = 0;
    for (std::size_t j = k + 2; j < close; ++j) {
      if (code_[j].text == "(" || code_[j].text == "[" || code_[j].text == "{") j = match_forward(code_, j, close);
      else if (code_[j].text == ";") break;
      else if (code_[j].text == ":" && colon == 0) colon = j;
      else if (code_[j].kind == TokenKind::Identifier && (code_[j + 1].text == "=" || code_[j + 1].text == "{"))
        vars.insert(code_[j].text);
    }
    if (colon > 0 && code_[colon - 1].kind == TokenKind::Identifier) vars.insert(code_[colon - 1].text);
    if (!rank_free_expression(colon > 0 ? colon + 1 : k + 2, close, vars, 4)) return false;
    for (std::size_t j = body; j < end; ++j) {
      if (jump(code_[j].text)) return false;
      if (vars.count(code_[j].text) && !read_only_use(j)) return false;
    }
  }
  return true;
}

// `[std ::] vector < [ns ::]* cls [<...>] > name ;` at code token k (`vector`): the name's token, or 0;
// `cls` is set to the class's token.
std::size_t BufferFlow::vector_of_class(std::size_t k, std::size_t& cls) const {
  if (code_[k].text != "vector" || k + 3 >= code_.size() || code_[k + 1].text != "<") return 0;
  std::size_t start = k >= 2 && code_[k - 1].text == "::" && code_[k - 2].text == "std" ? k - 2 : k;
  const auto access = [&](std::size_t colon) {  // `public:` in a class body
    return code_[colon].text == ":" && colon > 0 &&
           (code_[colon - 1].text == "public" || code_[colon - 1].text == "private" ||
            code_[colon - 1].text == "protected");
  };
  if (start == 0 || (code_[start - 1].text != ";" && code_[start - 1].text != "{" && code_[start - 1].text != "}" &&
                     !access(start - 1)))
    return 0;
  std::size_t c = k + 2;
  while (c + 2 < code_.size() && code_[c + 1].text == "::") c += 2;
  if (code_[c].kind != TokenKind::Identifier || !is_class(code_[c].text)) return 0;
  const std::size_t after = after_template_args(code_, k + 1, code_.size());
  if (after == SIZE_MAX || after + 1 >= code_.size() || code_[after].kind != TokenKind::Identifier) return 0;
  // `std::vector<Buffer> a;` or several declarators with no value: `std::vector<Buffer> a, b;`.
  for (std::size_t p = after;; p += 2) {
    if (p + 1 >= code_.size() || code_[p].kind != TokenKind::Identifier) return 0;
    if (code_[p + 1].text == ";") break;
    if (code_[p + 1].text != ",") return 0;
  }
  // Nothing but the class and its own template arguments between `<` and the list's end.
  const std::size_t own = c + 1 < after && code_[c + 1].text == "<" ? after_template_args(code_, c + 1, after) : c + 1;
  const bool closes_both = own == SIZE_MAX && code_[after - 1].text == ">>";  // `vector<Buffer<float>>`
  if (!closes_both && own + 1 != after) return 0;
  cls = c;
  return after;
}

// One use of a container of class `cls` at code token j (its name), whose access starts at `first`
// (`this->grads`: at `this`): a fill (`emplace_back`, `push_back` of a temporary, `reserve`) in
// `f`, recorded in `emplaced` and counted in `fills`, or a read. `f` null: a use through another
// object (`model.grads`), which may only read. False when the use keeps the fills out of sight.
bool BufferFlow::container_use(std::size_t j, std::size_t first, const FunctionDef* f, const std::string& cls,
                               std::vector<CallSite>& emplaced, int& fills) const {
  const std::string& prev = code_[first - 1].text;
  const bool statement = prev == ";" || prev == "{" || prev == "}" || prev == ")" || prev == "else";
  const std::string& member = code_[j + 2].text;
  if (code_[j + 1].text == "." && code_[j + 3].text == "(" &&
      (member == "emplace_back" || member == "push_back" || member == "reserve")) {
    if (f == nullptr) return false;
    const std::size_t close = match_forward(code_, j + 3, code_.size());
    bool visible = statement && close + 1 < code_.size() && code_[close + 1].text == ";" && close > j + 4 &&
                   rank_free_loops(j, *f);
    if (member == "reserve") return visible && !conditional(j) && rank_free_expression(j + 4, close, {}, 4);
    ++fills;
    if (member == "push_back") {  // a temporary of the class, already a construction
      std::size_t c = j + 4;
      while (c + 2 < close && code_[c + 1].text == "::") c += 2;
      const std::size_t args =
          c + 1 < close && code_[c + 1].text == "<" ? after_template_args(code_, c + 1, close) : c + 1;
      visible = visible && code_[c].text == cls && args < close &&
                (code_[args].text == "(" || code_[args].text == "{") && match_forward(code_, args, close) + 1 == close;
      // Also at the token before its arguments: the rank pass reads a call site's arguments
      // after it, and `Buffer<float>(n)` is recorded at `Buffer`.
      if (visible && code_[args].text == "(")
        emplaced.push_back(CallSite{f->name, split_top(code_, args, close - 1), args - 1, code_[j + 2].line});
      return visible;
    }
    emplaced.push_back(CallSite{f->name, split_top(code_, j + 3, close), j + 2, code_[j + 2].line});
    return visible;
  }
  // Read: counted (`size()`), iterated by reference (`for (auto& g : grads)`: a copy would run the
  // class's copy constructor), or an element used through a member (`grads[l].data()`), never whole.
  std::size_t element = 0;
  if (code_[j + 1].text == "[") element = match_forward(code_, j + 1, code_.size()) + 1;
  else if (code_[j + 1].text == "." && code_[j + 3].text == "(" &&
           (member == "at" || member == "front" || member == "back"))
    element = match_forward(code_, j + 3, code_.size()) + 1;
  // `auto& w = grads[i];`: a reference to an element constructs nothing.
  if (element > 0 && element < code_.size() && code_[element].text == ";" && prev == "=" && first >= 3 &&
      (code_[first - 3].text == "&" || code_[first - 3].text == "&&"))
    return true;
  if (element > 0)
    return prev != "&" && element + 2 < code_.size() && is_member_step(code_[element]) &&
           code_[element + 1].kind == TokenKind::Identifier && !writes(code_[element + 2].text);
  // Reads, and what makes no element: `reserve` (room only), `clear`/`pop_back` (destructions: a
  // release is no collective step, and each goes to its own allocator).
  if (code_[j + 1].text == ".")
    return member == "size" || member == "empty" || member == "capacity" || member == "reserve" || member == "clear" ||
           member == "pop_back";
  return prev == ":" && code_[j + 1].text == ")" && first >= 3 &&
         (code_[first - 3].text == "&" || code_[first - 3].text == "&&");
}

// Each vector of a class whose every use is read above: its declaration's class token is no hidden
// construction, and each `emplace_back` is a construction of the class (a call site with its
// arguments, so the rank pass sees a size given by the rank). A vector declared in a function is
// used in its block only; one that is a data member of a class (`struct Model { std::vector<Tensor>
// grads; }`) is filled in that class's constructors and only read elsewhere (`model.grads[l]`,
// `for (auto& g : model.grads)`): its fills then run with each construction of its holder.
void BufferFlow::collect_visible_containers() {
  for (std::size_t k = 0; k < code_.size(); ++k) {
    std::size_t cls_token = 0;
    const std::size_t decl = vector_of_class(k, cls_token);
    if (decl == 0) continue;
    const ClassBody* holder = nullptr;
    std::size_t block = 0, block_close = 0;  // a function's: the block the vector is declared in
    if (owner_[decl] >= 0) {
      const FunctionDef& f = functions_[(std::size_t)owner_[decl]];
      block = decl;
      for (int d = 0; block-- > f.body_open;)
        if (code_[block].text == "}") ++d;
        else if (code_[block].text == "{" && d-- == 0) break;
      block_close = match_forward(code_, block, f.body_close);
    } else {
      for (const ClassBody& c : classes_)
        if (decl > c.open && decl < c.close && (holder == nullptr || c.open > holder->open)) holder = &c;
      if (holder == nullptr) continue;
    }
    const std::string& cls = code_[cls_token].text;
    std::vector<CallSite> emplaced;
    bool visible = true;
    int fills = 0;
    // Every declarator of the declaration (`std::vector<Buffer> act_in, act_out;`), each used in sight.
    for (std::size_t d = decl; visible && d < code_.size() && code_[d].kind == TokenKind::Identifier; d += 2) {
      const std::string& name = code_[d].text;
      for (std::size_t j = 1; visible && j + 3 < code_.size(); ++j) {
        if (j == d || code_[j].text != name || code_[j].kind != TokenKind::Identifier || code_[j - 1].text == "::")
          continue;
        const bool through_this = j >= 2 && code_[j - 1].text == "->" && code_[j - 2].text == "this";
        if (is_member_step(code_[j - 1]) && !through_this) {
          if (holder == nullptr) continue;  // another object's field of that name
          std::size_t first = j - 1;        // `a.b.grads`: the access starts at `a`
          while (first >= 2 && code_[first - 1].kind == TokenKind::Identifier && is_member_step(code_[first - 2]))
            first -= 2;
          visible = first >= 2 && container_use(j, first - 1, nullptr, cls, emplaced, fills);
          continue;
        }
        const std::size_t first = through_this ? j - 2 : j;
        if (holder == nullptr) {
          visible = j > decl && j < block_close && owner_[j] == owner_[decl] &&
                    container_use(j, first, &functions_[(std::size_t)owner_[decl]], cls, emplaced, fills);
          continue;
        }
        // A member's own use: in a member function of its class, filled only by a constructor.
        const FunctionDef* f = owner_[j] >= 0 ? &functions_[(std::size_t)owner_[j]] : nullptr;
        if (f == nullptr || f->owner != holder->name) {
          visible = false;
          continue;
        }
        const int before = fills;
        visible = container_use(j, first, f, cls, emplaced, fills) && (fills == before || f->name == holder->name);
      }
      if (code_[d + 1].text != ",") break;
    }
    if (!visible) continue;  // never filled, and only read: it constructs nothing
    visible_containers_.insert(cls_token);
    for (CallSite& c : emplaced) calls_[cls].push_back(std::move(c));
  }
}

// The element type of a container declared `std::vector<T> name` (or any `Template<T> name`,
// `ns::T` included), "" when the file does not say.
std::string BufferFlow::element_type(const std::string& container) const {
  for (std::size_t k = 3; k < code_.size(); ++k)
    if (code_[k].text == container && code_[k - 1].text == ">" && code_[k - 2].kind == TokenKind::Identifier &&
        (code_[k - 3].text == "<" || code_[k - 3].text == "::"))
      return code_[k - 2].text;
  return "";
}

bool BufferFlow::element_type_names(const std::string& container,
                                    const std::function<bool(const std::string&)>& wanted) const {
  static const std::set<std::string> kSequences = {"vector", "deque", "list", "array"};
  for (std::size_t k = 1; k < code_.size(); ++k) {
    if (code_[k].text != container || (code_[k - 1].text != ">" && code_[k - 1].text != ">>")) continue;
    for (std::size_t j = k - 1; j > 0 && j + 16 > k; --j) {
      if (wanted(code_[j].text)) return true;
      if (kSequences.count(code_[j].text)) break;
    }
  }
  return false;
}

bool BufferFlow::holds_smart_pointers(const std::string& container) const {
  return element_type_names(container, [&](const std::string& w) { return smart_types_.count(w) > 0; });
}

// Whether `container` is declared as a map (`std::map<K, V> name`, unordered too): its elements
// are (key, value) pairs, and `.second` of one is the value stored with `name[key] = v`.
bool BufferFlow::is_map(const std::string& container) const {
  for (std::size_t k = 1; k < code_.size(); ++k)
    if (code_[k].text == container && code_[k - 1].text == ">") {
      const std::string name = template_name_before(code_, k - 1);
      return name == "map" || name == "unordered_map" || name == "multimap";
    }
  return false;
}

std::string BufferFlow::map_value_path(const std::string& path) const {
  const auto [root, rest] = split_root(path);
  if (rest.rfind("[].second", 0) != 0 || !is_map(root)) return "";
  return root + "[]" + rest.substr(9);
}

std::string BufferFlow::iterator_element(std::size_t b, std::size_t e) const {
  static const std::set<std::string> kIterators = {"find", "begin", "lower_bound", "upper_bound", "rbegin"};
  if (e < b + 5 || code_[b].kind != TokenKind::Identifier || code_[b + 1].text != "." ||
      !kIterators.count(code_[b + 2].text) || code_[b + 3].text != "(" || match_forward(code_, b + 3, e) + 1 != e ||
      !standard_container(code_[b].text))
    return "";
  return "& " + code_[b].text + " [ i ]";
}

bool BufferFlow::holds_pairs(const std::string& container) const {
  return element_type_names(container, [](const std::string& w) { return w == "pair"; });
}

std::vector<std::string> BufferFlow::element_fields(const std::string& container) const {
  if (is_map(container) || holds_pairs(container)) return {"first", "second"};
  return struct_fields(element_type(container));
}

// Whether `name` is declared as a standard library container (`std::queue<Job> q_`): a member
// call on it is the library's, whatever functions of the same name the file defines.
bool BufferFlow::standard_container(const std::string& name) const {
  static const std::set<std::string> kContainers = {
      "vector", "deque",         "list",          "forward_list", "queue", "priority_queue", "stack",   "map",
      "set",    "unordered_map", "unordered_set", "multimap",     "array", "span",           "optional"};
  for (std::size_t k = 1; k < code_.size(); ++k)
    if (code_[k].text == name && code_[k - 1].text == ">")
      return kContainers.count(template_name_before(code_, k - 1)) > 0;
  return false;
}

int BufferFlow::sequence_fill_line(const std::string& name) const {
  for (std::size_t k = 0; k < code_.size(); ++k) {
    if (code_[k].text != name || (k > 0 && is_member_step(code_[k - 1]))) continue;
    std::size_t j = k + 1;
    while (j < code_.size() && code_[j].text == "[") j = match_forward(code_, j, code_.size()) + 1;
    if (j + 2 < code_.size() && is_member_step(code_[j]) && sequence_fill(code_[j + 1].text) &&
        code_[j + 2].text == "(")
      return code_[k].line;
  }
  return 0;
}

std::vector<BufferFlow::OwnCopy> BufferFlow::parameter_container_copies(const std::string& path) const {
  // `C[].grads[].x` -> object `C[]`, container `grads`, after the element `.x`.
  std::size_t dot = path.find('.');
  while (dot != std::string::npos) {
    std::size_t e = dot + 1;
    while (e < path.size() && (std::isalnum((unsigned char)path[e]) || path[e] == '_')) ++e;
    if (e < path.size() && e > dot + 1 && path[e] == '[') break;
    dot = path.find('.', dot + 1);
  }
  if (dot == std::string::npos) return {};
  const std::size_t open = path.find('[', dot), close = path.find(']', open);
  const auto copies = element_copies_.find(path.substr(dot + 1, open - dot - 1));
  if (close == std::string::npos || copies == element_copies_.end()) return {};
  const std::string object = path.substr(0, dot), after = path.substr(close + 1);
  std::vector<OwnCopy> out;
  for (const ElementCopy& copy : copies->second) {
    if (copy.object.empty()) continue;
    const auto calls = calls_.find(copy.function);
    const auto f = std::find_if(functions_.begin(), functions_.end(),
                                [&](const FunctionDef& d) { return d.name == copy.function; });
    if (calls == calls_.end() || f == functions_.end()) continue;
    const auto param = std::find(f->params.begin(), f->params.end(), copy.object);
    if (param == f->params.end()) continue;
    const std::size_t index = (std::size_t)(param - f->params.begin());
    const auto [begin, end] = parameter_tokens(code_, *f, index);
    bool by_reference = false, by_pointer = false;
    for (std::size_t j = begin; j < end; ++j) {
      by_reference = by_reference || code_[j].text == "&";
      by_pointer = by_pointer || code_[j].text == "*";
    }
    if (!by_reference && !by_pointer) continue;  // a copy of the object: the caller's is not filled
    // A reference is given the object (`alloc(B)`, `alloc(C[c])`), a pointer its address (`alloc(&B)`).
    if (std::any_of(calls->second.begin(), calls->second.end(),
                    [&](const CallSite& c) { return argument_names(c, index, by_pointer && !by_reference, object); }))
      out.push_back(OwnCopy{"", copy.origin + after, copy.function});
  }
  return out;
}

namespace flow_tokens {

// The code tokens [begin, end) of f's parameter `index` in its declaration; {0, 0} when absent.
std::pair<std::size_t, std::size_t> parameter_tokens(const std::vector<Token>& code, const FunctionDef& f,
                                                     std::size_t index) {
  if (f.name_token + 1 >= f.body_open) return {0, 0};
  const std::size_t open = f.name_token + 1, close = match_forward(code, open, f.body_open);
  std::size_t n = 0, piece = open + 1;
  for (std::size_t k = open + 1; k <= close; ++k) {
    if (k < close && code[k].text != ",") continue;
    if (n++ == index) return {piece, k};
    piece = k + 1;
  }
  return {0, 0};
}

// `&h->send` (under casts) -> `h->send`; "" when the argument is not an address taken.
std::string strip_address(const std::string& arg) {
  bool addr = false;
  const std::vector<Token> t = strip(code_tokens(lex(arg).tokens), addr);
  return addr ? join(t, 0, t.size()) : "";
}

}  // namespace flow_tokens

}  // namespace braid::convert
