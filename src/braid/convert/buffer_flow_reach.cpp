// BufferFlow (buffer_flow.hpp): what helpers and fields carry between statements: fields written
// with a helper's result, a variable or its address, or through an array of their addresses
// (llm.c's `*(ptrs[i]) = it`), the pointer fields of a struct indexed as an array, element copies
// between arrays, helpers that return a buffer, and which functions statements reach (the reach a
// converted call needs to be proven on every rank; which statements run conditionally:
// buffer_flow_conditions.cpp).
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <set>

#include "braid/convert/buffer_flow.hpp"
#include "braid/convert/buffer_flow_tokens.hpp"

namespace braid::convert {

using namespace flow_tokens;

// `a.b = v;` / `a->b.c = v;` starting at code token k (a statement of its own): a field written
// with a value that is no allocation of it (`model.params = alloc_params(n)`).
void BufferFlow::record_field_write(std::size_t k, const std::string& function, std::size_t end) {
  const std::string& before = code_[k - 1].text;
  if (before != ";" && before != "{" && before != "}") return;
  std::size_t eq = k + 1;
  bool field = false;
  for (; eq < end && code_[eq].text != "=" && code_[eq].text != ";"; ++eq) {
    const std::string& x = code_[eq].text;
    if (x == "(" || x == "{") return;  // a call or a declaration with braces, not an access path
    if (x == "[") eq = match_forward(code_, eq, end);
    field = field || x == "." || x == "->";
  }
  if (eq >= end || code_[eq].text != "=") return;
  const std::size_t e = statement_end(code_, eq + 1, end);
  // A whole struct given a factory's result (`multi_gpu_config = multi_gpu_config_init(..)`): its fields.
  if (!field && (eq != k + 1 || !returning_helper(join(code_, eq + 1, e)) || declared_class(code_[k].text).empty()))
    return;  // (declared_class reads the whole file: asked last)
  field_writes_.push_back(FieldWrite{function, join(code_, k, eq), join(code_, eq + 1, e), k, ""});
}

// llm.c's `T** ptrs[] = {&p->wte, &p->ln1w, ...}; for (i) { *(ptrs[i]) = it; it += n[i]; }` (or
// `*ptrs[i] = v;`) at code token k (ptrs): every field the array holds the address of is written
// with v (a pointer into one allocation, whatever the element). Not recorded under a condition
// (some fields might keep another value on some ranks) or when an element is no `&field`.
void BufferFlow::record_pointer_array_store(std::size_t k, const std::string& function, std::size_t body_open,
                                            std::size_t end) {
  if (k < 2 || k + 1 >= end || code_[k + 1].text != "[" || conditional(k)) return;
  const bool parenthesised = code_[k - 1].text == "(" && code_[k - 2].text == "*";
  const std::size_t star = parenthesised ? k - 2 : k - 1;
  if (code_[star].text != "*" || star == 0) return;
  const std::string& before = code_[star - 1].text;
  if (before != ";" && before != "{" && before != "}" && before != ")") return;
  std::size_t eq = match_forward(code_, k + 1, end) + 1;
  if (parenthesised) eq = eq < end && code_[eq].text == ")" ? eq + 1 : end;
  if (eq >= end || code_[eq].text != "=") return;
  // The array's declaration in this function: `T* * name [ N? ] = { ... }`.
  std::size_t open = SIZE_MAX;
  for (std::size_t d = body_open + 1; d < star; ++d)
    if (code_[d].text == code_[k].text && code_[d - 1].text == "*" && code_[d + 1].text == "[") {
      const std::size_t close = match_forward(code_, d + 1, star);
      if (close + 2 < star && code_[close + 1].text == "=" && code_[close + 2].text == "{") open = close + 2;
    }
  if (open == SIZE_MAX) return;
  std::vector<std::string> fields;
  for (const std::string& element : split_top(code_, open, match_forward(code_, open, star))) {
    const std::vector<Token> t = code_tokens(lex(element).tokens);
    const std::string lhs = t.size() > 1 && t[0].text == "&" ? join(t, 1, t.size()) : "";
    if (access_path(lhs, false).find('.') == std::string::npos) return;  // `&p->f` (or `&(p->f)`) only
    fields.push_back(lhs);
  }
  const std::size_t e = statement_end(code_, eq + 1, end);
  const std::string through = join(code_, star, eq);
  for (const std::string& lhs : fields)
    field_writes_.push_back(FieldWrite{function, lhs, join(code_, eq + 1, e), k, through});
}

// What the file writes into the field at `path`, or into a field `path` indexes or reads through
// (`args.grads = g_grads;` makes `args.grads[]` an element of `g_grads`).
BufferFlow::Resolution BufferFlow::written_to(const std::string& path) const {
  Resolution out;
  for (const FieldWrite& w : field_writes_) {
    if (w.value == "NULL" || w.value == "nullptr" || w.value == "0") continue;  // a reset points at no buffer
    const Resolution lhs = resolve(w.lhs, w.lhs_function.empty() ? w.function : w.lhs_function,
                                   w.lhs_function.empty() ? w.token : w.lhs_token);
    // `path` after the written field: "", or "[]..." / ".x..." when the value is a whole variable.
    std::optional<std::string> rest;
    const bool address = w.value.rfind("& ", 0) == 0 && !access_path(w.value.substr(2), false).empty();
    // A whole variable's value, or a whole struct a factory returns (`cfg = multi_gpu_config_init(..)`).
    const bool whole = address || !access_path(w.value, false).empty() || returning_helper(w.value) != nullptr;
    for (const std::string& p : lhs.paths)
      for (std::size_t i = 1; !rest && i <= path.size(); ++i)
        if ((i == path.size() || (whole && (path[i] == '[' || path[i] == '.'))) && path_matches(p, path.substr(0, i)))
          rest = path.substr(i);
    if (!rest) continue;
    out.via.push_back(fmt::format("{} = {} (line {}{}, in {}())", w.lhs, w.value, code_[w.token].line,
                                  w.through.empty() ? "" : ", by `" + w.through + "`", w.function));
    std::vector<std::string> stack;
    // `w.model = &model` reads through to the variable: `w.model->grads[l]` is `model.grads[l]`.
    const std::string value = address && rest->starts_with(".") ? w.value.substr(2) : w.value;
    if (const FunctionDef* helper = returning_helper(value)) follow_namesakes_returns(*helper, *rest, 6, out, stack);
    else resolve_into(value + *rest, w.function, w.token, 6, out, stack);
    if (!out.reason.empty()) {
      out.paths.clear();
      return out;
    }
  }
  std::sort(out.paths.begin(), out.paths.end());
  out.paths.erase(std::unique(out.paths.begin(), out.paths.end()), out.paths.end());
  return out;
}

// `C . push_back|emplace_back|push|emplace|push_front|emplace_front ( [std :: move (] v [)] )` (a
// vector, deque, list, queue or stack), `C [ ... ] = [std::move(] v [)] ;`, or
// for a map `C . emplace|try_emplace|insert_or_assign ( key , v )` at code token k (C): v a whole
// variable (a struct's copy: its fields), or a view into a buffer (`flat + offsets[l]`,
// `(float*)ws + off`, `&buf[i]`: the element is in that allocation).
void BufferFlow::record_element_copy(std::size_t k, const std::string& function, std::size_t end) {
  const auto is = [&](std::size_t i, const char* text) { return i < end && code_[i].text == text; };
  std::size_t v = 0, v_end = 0;
  // `std::move(v)` is v.
  const auto unwrap_move = [&]() {
    if (is(v, "std") && is(v + 1, "::") && is(v + 2, "move") && is(v + 3, "(")) {
      v_end = match_forward(code_, v + 3, end);
      v += 4;
    }
  };
  // `std::array<float*, 2> io = {x, out}` / `io{x, out}`: given a list, as `float* io[] = {...}` is.
  if (k > 0 && code_[k - 1].text == ">" && template_name_before(code_, k - 1) == "array" &&
      ((is(k + 1, "{") && !is(k + 2, "}")) || (is(k + 1, "=") && is(k + 2, "{"))))
    listed_containers_.insert(code_[k].text);
  if (is(k + 1, ".") && k + 3 < end && sequence_fill(code_[k + 2].text) && !is_map(code_[k].text) && is(k + 3, "(")) {
    v = k + 4;
    v_end = match_forward(code_, k + 3, end);
    unwrap_move();
    // An element owning a pointer: `emplace_back(p, deleter)`, `push_back(std::unique_ptr<T, D>(p))`.
    if (v < v_end && holds_smart_pointers(code_[k].text)) {
      std::size_t w = v + (is(v, "std") && is(v + 1, "::") ? 2 : 0);
      if (w < v_end && smart_types_.count(code_[w].text)) {
        w = is(w + 1, "<") ? after_template_args(code_, w + 1, v_end) : w + 1;
        if (w != SIZE_MAX && is(w, "(") && match_forward(code_, w, v_end) + 1 == v_end) {
          v = w + 1;
          v_end -= 1;
        }
      }
      const std::vector<std::string> args = split_top(code_, v - 1, v_end);
      if (args.size() > 1)
        for (std::size_t c = v, depth = 0; c < v_end; ++c) {
          depth += code_[c].text == "(" || code_[c].text == "[" || code_[c].text == "{";
          depth -= code_[c].text == ")" || code_[c].text == "]" || code_[c].text == "}";
          if (depth == 0 && code_[c].text == ",") {
            v_end = c;
            break;
          }
        }
    }
  } else if (is(k + 1, "[") && (k == 0 || (code_[k - 1].text != "." && code_[k - 1].text != "->"))) {
    const std::size_t close = match_forward(code_, k + 1, end);
    if (close + 2 < end && code_[close + 1].text == "=" && code_[close + 2].text == "{")
      listed_containers_.insert(code_[k].text);
    else if (close + 2 < end && code_[close + 1].text == "=") {
      v = close + 2;
      v_end = statement_end(code_, v, end);
      if (is(v, "std") && is(v + 1, "::") && is(v + 2, "move") && is(v + 3, "(") &&
          match_forward(code_, v + 3, end) + 1 == v_end) {
        v_end = match_forward(code_, v + 3, end);
        v += 4;
      }
    }
  } else if (is(k + 1, ".") && k + 3 < end && is(k + 3, "(") &&
             (code_[k + 2].text == "emplace" || code_[k + 2].text == "try_emplace" ||
              code_[k + 2].text == "insert_or_assign") &&
             is_map(code_[k].text)) {
    const std::size_t close = match_forward(code_, k + 3, end);
    const std::vector<std::string> args = split_top(code_, k + 3, close);
    std::size_t comma = k + 4;  // the value: the second argument, to the call's `)`
    for (int depth = 0; comma < close && !(code_[comma].text == "," && depth == 0); ++comma)
      depth += code_[comma].text == "(" || code_[comma].text == "{" || code_[comma].text == "["   ? 1
               : code_[comma].text == ")" || code_[comma].text == "}" || code_[comma].text == "]" ? -1
                                                                                                  : 0;
    if (args.size() == 2 && comma < close) {
      v = comma + 1;
      v_end = close;
      unwrap_move();
    }
  }
  if (v == 0 || v >= v_end || v_end >= end) return;
  std::string origin;
  if (v + 1 == v_end) origin = code_[v].kind == TokenKind::Identifier ? code_[v].text : "";
  else if (const std::string view = access_path(join(code_, v, v_end), false); view.find('[') == std::string::npos)
    origin = view;  // a view into a variable's or field's buffer (not an element of another container)
  if (origin.empty() || split_root(origin).first == code_[k].text) return;
  // The object of a member container (`b.grads.push_back(p)`, `b->grads`): one name, not a field of another.
  std::string object;
  if (k >= 2 && (code_[k - 1].text == "." || code_[k - 1].text == "->") && code_[k - 2].kind == TokenKind::Identifier &&
      (k < 3 || (code_[k - 3].text != "." && code_[k - 3].text != "->" && code_[k - 3].text != "::")))
    object = code_[k - 2].text;
  auto& vars = element_copies_[code_[k].text];
  if (std::none_of(vars.begin(), vars.end(),
                   [&](const ElementCopy& c) { return c.origin == origin && c.object == object; }))
    vars.push_back(ElementCopy{origin, function, object});
}

// The token ending the body of a `for (...)` whose `)` is code_[close]: its block's `}`, or its one
// statement's `;` (before `limit`).
std::size_t BufferFlow::for_body_end(std::size_t close, std::size_t limit) const {
  std::size_t end = close + 1;
  if (end < limit && code_[end].text == "{") return match_forward(code_, end, limit);
  for (int depth = 0; end < limit && !(code_[end].text == ";" && depth == 0); ++end)
    depth += code_[end].text == "(" || code_[end].text == "{"   ? 1
             : code_[end].text == ")" || code_[end].text == "}" ? -1
                                                                : 0;
  return end;
}

// `for (auto& [a, b] : C)` at code token k (`auto`): each name an alias of its part of C's element,
// in scope for the loop's body: of a map's element, `.first` and `.second`; of a struct's, its fields
// in declaration order.
void BufferFlow::record_binding_aliases(std::size_t k, const FunctionDef& f) {
  if (code_[k].text != "auto" || k < 2 || code_[k - 1].text == "=") return;
  std::size_t lb = k + 1;
  while (lb < f.body_close && (code_[lb].text == "&" || code_[lb].text == "&&")) ++lb;
  if (lb >= f.body_close || code_[lb].text != "[") return;
  const std::size_t rb = match_forward(code_, lb, f.body_close);
  std::size_t open = k;
  while (open > f.body_open && code_[open].text != "(") --open;
  std::string container;
  std::size_t scope_end = 0;
  if (rb + 1 < f.body_close && code_[rb + 1].text == ":" && open > 0 && code_[open - 1].text == "for") {
    const std::size_t close = match_forward(code_, open, f.body_close);
    container = join(code_, rb + 2, close);
    scope_end = for_body_end(close, f.body_close);
  } else if (rb + 4 < f.body_close && code_[rb + 1].text == "=" && code_[rb + 2].kind == TokenKind::Identifier &&
             code_[rb + 3].text == "[") {  // `auto [p, n] = chunks[i];`: one element, to the end of the block
    const std::size_t index_end = match_forward(code_, rb + 3, f.body_close);
    const std::size_t brace = enclosing_open(code_, k);
    if (index_end + 1 >= f.body_close || code_[index_end + 1].text != ";" || brace == SIZE_MAX ||
        code_[brace].text != "{")
      return;
    container = code_[rb + 2].text;
    scope_end = match_forward(code_, brace, f.body_close);
  } else {
    record_tuple_binding(k, lb, rb, f);  // `auto [send, recv] = make_buffers(n);`
    return;
  }
  const std::vector<std::string> fields = element_fields(container);
  std::size_t j = 0;
  for (std::size_t i = lb + 1; i < rb; ++i) {
    if (code_[i].kind != TokenKind::Identifier) continue;
    if (j < fields.size())
      aliases_[f.name].push_back(Alias{code_[i].text, container + " [ i ] . " + fields[j], i, scope_end, true});
    ++j;
  }
}

// `C . push_back|emplace_back|push|emplace|... ( { a, b } | T { a, b } | a, b )` at code token k (C): an element
// built from its fields, given in the order the struct declares them (a struct with a constructor
// of its own in the file maps arguments to fields its own way: not recorded).
void BufferFlow::record_element_fields(std::size_t k, const std::string& function, std::size_t end) {
  const auto is = [&](std::size_t i, const char* text) { return i < end && code_[i].text == text; };
  if (!is(k + 1, ".") || k + 4 >= end || !is(k + 3, "(")) return;
  if (!sequence_fill(code_[k + 2].text) || is_map(code_[k].text)) return;
  const bool emplace = code_[k + 2].text.rfind("emplace", 0) == 0;
  const std::size_t close = match_forward(code_, k + 3, end);
  if (const std::string made = join(code_, k + 4, close); returning_helper(made) != nullptr) {
    element_made_[code_[k].text].push_back(ElementMade{function, made, k});  // `grads.push_back(empty(n))`
    return;
  }
  std::string type;             // the declared element type, looked up only for the forms that need it
  std::size_t open = SIZE_MAX;  // the brace or parenthesis holding the field values
  if (is(k + 4, "{") && match_forward(code_, k + 4, end) + 1 == close) {
    open = k + 4;
  } else if (code_[k + 4].kind == TokenKind::Identifier && is(k + 5, "{") &&
             match_forward(code_, k + 5, end) + 1 == close) {
    type = code_[k + 4].text;
    open = k + 5;
  } else if (emplace && close > k + 4) {
    open = k + 3;
  }
  const bool pairs = open != SIZE_MAX && type.empty() && holds_pairs(code_[k].text);
  if (open != SIZE_MAX && type.empty()) type = element_type(code_[k].text);
  if (open == SIZE_MAX || (type.empty() && !pairs)) return;
  if (!pairs && std::any_of(functions_.begin(), functions_.end(),
                            [&](const FunctionDef& f) { return f.name == type && f.owner == type; }))
    return;
  const std::vector<std::string> fields = pairs ? element_fields(code_[k].text) : struct_fields(type);
  const std::vector<std::string> values = split_top(code_, open, match_forward(code_, open, end));
  if (fields.empty() || values.size() > fields.size() || (open == k + 3 && values.size() == 1))
    return;  // emplace_back(b): a copy
  ElementFields e{function, k, {}};
  for (std::size_t i = 0; i < values.size(); ++i) e.values[fields[i]] = values[i];
  element_fields_[code_[k].text].push_back(std::move(e));
}

std::vector<std::string> BufferFlow::element_origins(const std::string& path) const {
  const auto [root, rest] = split_root(path);
  if (rest.empty() || rest[0] != '[' || listed_containers_.count(root)) return {};
  const std::size_t close = rest.find(']');
  if (close == std::string::npos) return {};
  std::string after = rest.substr(close + 1);                             // `.buf` (and deeper)
  if (after.rfind(".second", 0) == 0 && is_map(root)) after.erase(0, 7);  // a map element's value
  std::vector<std::string> out;
  if (auto it = element_copies_.find(root); it != element_copies_.end())
    for (const ElementCopy& copy : it->second) out.push_back(copy.origin + after);
  if (auto it = element_made_.find(root); it != element_made_.end())
    for (const ElementMade& e : it->second) {
      Resolution r;
      std::vector<std::string> stack;
      if (const FunctionDef* helper = returning_helper(e.expr)) follow_namesakes_returns(*helper, after, 6, r, stack);
      if (r.reason.empty()) out.insert(out.end(), r.paths.begin(), r.paths.end());
    }
  if (auto it = element_fields_.find(root); it != element_fields_.end() && after.size() > 1 && after[0] == '.') {
    const std::size_t stop = after.find_first_of(".[", 1);
    const std::string field = after.substr(1, stop == std::string::npos ? std::string::npos : stop - 1);
    const std::string deeper = stop == std::string::npos ? "" : after.substr(stop);
    for (const ElementFields& e : it->second)
      if (auto v = e.values.find(field); v != e.values.end())
        for (const std::string& p : resolve(v->second + deeper, e.function, e.token).paths) out.push_back(p);
  }
  return out;
}

namespace {

// How a parameter's declaration (code tokens [begin, end)) lets a helper fill its caller's pointer:
// `T*& p` (a reference to a pointer), `T** p` (a pointer to one), or neither.
enum class PointerFill { None, Reference, Pointer };
PointerFill pointer_fill(const std::vector<Token>& code, std::size_t begin, std::size_t end) {
  for (std::size_t j = begin; j + 1 < end; ++j) {
    if (code[j].text == "*" && code[j + 1].text == "&") return PointerFill::Reference;
    if (code[j].text == "*" && code[j + 1].text == "*") return PointerFill::Pointer;
  }
  return PointerFill::None;
}

// Whether an allocation in f's body takes `name` itself as its target (`cudaMalloc((void**)name, ..)`).
bool allocates_into(const std::vector<Token>& code, const FunctionDef& f, const std::string& name) {
  for (std::size_t j = f.body_open + 1; j + 1 < f.body_close; ++j) {
    if (!(code[j].text.rfind("cudaMalloc", 0) == 0 || code[j].text == "ncclMemAlloc") || code[j + 1].text != "(")
      continue;
    std::size_t e = j + 2;
    for (int depth = 0; e < f.body_close && !(depth == 0 && (code[e].text == "," || code[e].text == ")")); ++e)
      depth += code[e].text == "(" ? 1 : code[e].text == ")" ? -1 : 0;
    if (access_path(join(code, j + 2, e), false) == name) return true;
  }
  return false;
}

// `*out = (float*)p;` (or `out[0] = p;`) in f's body, for pointer-to-pointer parameter `name`: the
// local `p` the helper hands out through it (`int dmalloc(float** out, size_t n)` allocating into a
// local and storing it on success); "" when there is no such statement.
std::string handed_out(const std::vector<Token>& code, const FunctionDef& f, const std::string& name) {
  for (std::size_t j = f.body_open + 1; j + 3 < f.body_close; ++j) {
    const std::string& before = code[j - 1].text;
    if (before != ";" && before != "{" && before != "}" && before != ")" && before != "else") continue;
    std::size_t eq = 0;
    if (code[j].text == "*" && code[j + 1].text == name && code[j + 2].text == "=") eq = j + 2;
    if (code[j].text == name && code[j + 1].text == "[" && j + 4 < f.body_close && code[j + 2].text == "0" &&
        code[j + 3].text == "]" && code[j + 4].text == "=")
      eq = j + 4;
    if (eq == 0) continue;
    const std::string value = access_path(join(code, eq + 1, statement_end(code, eq + 1, f.body_close)), false);
    if (!value.empty() && value.find_first_of(".[") == std::string::npos) return value;
  }
  return "";
}

}  // namespace

bool BufferFlow::argument_names(const CallSite& c, std::size_t index, bool address, const std::string& path) const {
  if (index >= c.args.size()) return false;
  // A reference is given the variable (`alloc(g, n)`), a pointer its address (`dev_alloc(&g, n)`).
  const std::string given = access_path(c.args[index], address);
  if (given.empty()) return false;
  if (path_matches(given, path)) return true;
  if (given == path) return false;
  // Or what the argument names through the caller's aliases (`halo_t* h = &H[d]; dmalloc(&h->send, n)`).
  const std::string pointee = address ? strip_address(c.args[index]) : c.args[index];
  const Resolution r = pointee.empty() ? Resolution{} : resolve(pointee, c.caller, c.token);
  return r.reason.empty() &&
         std::any_of(r.paths.begin(), r.paths.end(), [&](const std::string& p) { return path_matches(p, path); });
}

std::vector<BufferFlow::Fill> BufferFlow::reference_fills(const std::string& path) const {
  std::vector<Fill> out;
  for (const FunctionDef& f : functions_) {
    auto calls = calls_.find(f.name);
    if (calls == calls_.end()) continue;
    for (std::size_t index = 0; index < f.params.size(); ++index) {
      const std::string& name = f.params[index];
      const auto [begin, end] = parameter_tokens(code_, f, index);
      const PointerFill kind = begin < end ? pointer_fill(code_, begin, end) : PointerFill::None;
      if (name.empty() || kind == PointerFill::None) continue;
      bool fills = false;  // `cudaMalloc(&name` / `ncclMemAlloc((void**)&name` in its body
      for (std::size_t j = f.body_open + 1; kind == PointerFill::Reference && j + 2 < f.body_close && !fills; ++j)
        fills =
            code_[j].text == "&" && code_[j + 1].text == name && (code_[j + 2].text == "," || code_[j + 2].text == ")");
      fills = fills || (kind == PointerFill::Pointer && allocates_into(code_, f, name));
      const std::string through = !fills && kind == PointerFill::Pointer ? handed_out(code_, f, name) : "";
      if (!fills && through.empty()) continue;
      for (const CallSite& c : calls->second)
        if (argument_names(c, index, kind == PointerFill::Pointer, path)) {
          out.push_back({f.name, through.empty() ? name : through});
          break;
        }
    }
  }
  return out;
}

std::string BufferFlow::pointer_parameter_target(const std::string& target, std::size_t at) const {
  if (at >= owner_.size() || owner_[at] < 0) return "";
  const FunctionDef& f = functions_[(std::size_t)owner_[at]];
  const std::string name = access_path(target, false);
  const auto it = std::find(f.params.begin(), f.params.end(), name);
  if (name.empty() || it == f.params.end()) return "";
  const auto [begin, end] = parameter_tokens(code_, f, (std::size_t)(it - f.params.begin()));
  return begin < end && pointer_fill(code_, begin, end) == PointerFill::Pointer ? name : "";
}

// The function of this file that `expr` calls and nothing more (`make<T>(n)`, `alloc(n)`,
// `util::make_device<float>(n)`), if any.
const FunctionDef* BufferFlow::returning_helper(const std::string& expr) const {
  bool addr = false;  // under a cast (`(T*)malloc(size)`, `static_cast<T*>(make(n))`): the call's value
  const std::vector<Token> t = strip(code_tokens(lex(expr).tokens), addr);
  const std::size_t name = addr ? SIZE_MAX : qualified_call(t).first;
  if (name == SIZE_MAX) return nullptr;
  for (const FunctionDef& f : functions_)
    if (f.name == t[name].text) return &f;
  return nullptr;
}

void BufferFlow::follow_namesakes_returns(const FunctionDef& helper, const std::string& rest, int depth,
                                          Resolution& out, std::vector<std::string>& stack, int element) const {
  for (const FunctionDef& f : functions_) {
    if (f.name != helper.name) continue;
    follow_returns(f, rest, depth, out, stack, element);
    if (!out.reason.empty()) return;
  }
}

// Every `return X;` of helper `f`, followed in f's terms. A helper called under a condition
// somewhere would make its allocations rank-dependent (window registration is collective).
void BufferFlow::follow_returns(const FunctionDef& f, const std::string& rest, int depth, Resolution& out,
                                std::vector<std::string>& stack, int element) const {
  bool allocates = false;  // a getter's calls under conditions allocate nothing
  for (std::size_t k = f.body_open + 1; k < f.body_close && !allocates; ++k)
    allocates = code_[k].text.rfind("cudaMalloc", 0) == 0 || code_[k].text == "ncclMemAlloc";
  if (auto calls = calls_.find(f.name); allocates && calls != calls_.end())
    for (const CallSite& c : calls->second)
      if (conditional(c.token)) {
        out.reason = fmt::format("the allocation helper {}() is called under a condition at line {}", f.name, c.line);
        return;
      }
  bool any = false;
  for (std::size_t k : return_statements(f)) {  // its own, not those of lambdas in it
    std::size_t e = k + 1;
    while (e < f.body_close && code_[e].text != ";") ++e;
    any = true;
    out.via.push_back(fmt::format("{}() returns {} (line {})", f.name, join(code_, k + 1, e), code_[k].line));
    std::string tail = rest;  // `p.first` of a returned pair: its element, the rest after it
    const std::string value = element < 0 ? pair_member(k + 1, e, tail) : returned_element(k + 1, e, element);
    if (value.empty()) out.reason = fmt::format("{}() returns no tuple braid can take element {} of", f.name, element);
    else resolve_into(value + tail, f.name, k, depth - 1, out, stack);
    if (!out.reason.empty()) return;
  }
  if (!any) out.reason = fmt::format("{}() returns nothing braid can follow", f.name);
}

std::string BufferFlow::callers_reach(const std::string& function, const std::set<std::string>& roots) const {
  std::set<std::string> seen;
  std::vector<std::string> pending = {function};
  while (!pending.empty()) {
    const std::string f = pending.back();
    pending.pop_back();
    if (f.empty() || !seen.insert(f).second) continue;
    if (roots.count(f)) return f;
    if (auto it = calls_.find(f); it != calls_.end())
      for (const CallSite& c : it->second) pending.push_back(c.caller);
  }
  return "";
}

std::pair<std::string, int> BufferFlow::conditional_caller(const std::string& function,
                                                           const std::function<bool(std::size_t)>& counts) const {
  std::set<std::string> seen;
  std::vector<std::string> pending = {function};
  while (!pending.empty()) {
    const std::string f = pending.back();
    pending.pop_back();
    if (f.empty() || !seen.insert(f).second) continue;
    if (is_class(f)) {  // a constructor also runs where its class is a member, or an element
      if (const int line = hidden_construction(f)) return {f, line};
      for (const std::string& holder : classes_holding(f)) pending.push_back(holder);
    }
    if (auto it = calls_.find(f); it != calls_.end())
      for (const CallSite& c : it->second) {
        if (counts ? counts(c.token) : conditional(c.token)) return {f, c.line};
        pending.push_back(c.caller);
      }
  }
  return {"", 0};
}

std::vector<std::size_t> BufferFlow::call_sites_of(const std::string& function) const {
  std::vector<std::size_t> sites;
  if (auto it = calls_.find(function); it != calls_.end())
    for (const CallSite& c : it->second) sites.push_back(c.token);
  return sites;
}

std::vector<std::pair<std::size_t, std::vector<std::string>>> BufferFlow::call_arguments_of(
    const std::string& function) const {
  std::vector<std::pair<std::size_t, std::vector<std::string>>> out;
  if (auto it = calls_.find(function); it != calls_.end())
    for (const CallSite& c : it->second) out.emplace_back(c.token, c.args);
  return out;
}

std::set<std::string> BufferFlow::reached_between(std::size_t from, std::size_t to) const {
  std::set<std::string> reached;
  std::vector<std::string> pending;
  for (const auto& [callee, sites] : calls_)
    for (const CallSite& c : sites)
      if (c.token > from && c.token < to) pending.push_back(callee);
  while (!pending.empty()) {
    const std::string f = pending.back();
    pending.pop_back();
    if (!reached.insert(f).second) continue;
    for (const auto& [callee, sites] : calls_)
      for (const CallSite& c : sites)
        if (c.caller == f) pending.push_back(callee);
  }
  return reached;
}

std::pair<std::string, int> BufferFlow::reached_through_value(const std::string& function) const {
  std::set<std::string> roots;
  for (const auto& [name, line] : value_uses_) roots.insert(name);
  const std::string via = callers_reach(function, roots);
  return {via, via.empty() ? 0 : value_uses_.at(via)};
}

std::string BufferFlow::function_at(std::size_t at) const {
  return at < owner_.size() && owner_[at] >= 0 ? functions_[(std::size_t)owner_[at]].name : "";
}

// The fields of the struct that path's last name is declared with, when every member is a pointer
// (`ParameterTensors grads;` of `typedef struct { float* wte; float *ln1w, *fcw; } ParameterTensors;`):
// what `(float**)&model->grads` indexes as an array. Empty when the name is declared with more than
// one such type, the type's body is not found once, or it has any other member.
std::vector<std::string> BufferFlow::pointer_fields(const std::string& path) const {
  const std::size_t dot = path.find_last_of('.');
  const std::string name = dot == std::string::npos ? path : path.substr(dot + 1);
  if (name.empty() || name.find('[') != std::string::npos) return {};
  // The type's body: `struct|class T {` or `typedef struct [tag] { ... } T ;`.
  const auto body_of = [&](const std::string& type) -> std::pair<std::size_t, std::size_t> {
    std::set<std::pair<std::size_t, std::size_t>> found;
    for (const ClassBody& c : classes_)
      if (c.name == type) found.emplace(c.open, c.close);
    for (std::size_t k = 1; k + 1 < code_.size(); ++k) {
      if (code_[k].text != "struct" || code_[k - 1].text != "typedef") continue;
      const std::size_t open = code_[k + 1].text == "{" ? k + 1 : k + 2;
      if (open >= code_.size() || code_[open].text != "{") continue;
      const std::size_t close = match_forward(code_, open, code_.size());
      if (close + 2 < code_.size() && code_[close + 1].text == type && code_[close + 2].text == ";")
        found.emplace(open, close);
    }
    return found.size() == 1 ? *found.begin() : std::pair<std::size_t, std::size_t>{0, 0};
  };
  std::map<std::string, std::pair<std::size_t, std::size_t>> bodies;  // each declaring type's body, looked up once
  for (std::size_t k = 1; k + 1 < code_.size(); ++k) {
    const std::string& next = code_[k + 1].text;
    if (code_[k].text == name && code_[k - 1].kind == TokenKind::Identifier &&
        (next == ";" || next == "=" || next == "," || next == ")") && !bodies.count(code_[k - 1].text))
      bodies[code_[k - 1].text] = body_of(code_[k - 1].text);
  }
  std::erase_if(bodies, [](const auto& tb) { return tb.second.second == 0; });  // a type with no body here
  if (bodies.size() != 1) return {};
  const auto [open, close] = bodies.begin()->second;
  std::vector<std::string> fields;
  std::size_t start = open;
  for (std::size_t k = open + 1; k < close; ++k) {
    if (code_[k].text == "(" || code_[k].text == "[" || code_[k].text == "{" || code_[k].text == ":") return {};
    if (code_[k].text != ";") continue;
    for (const std::string& piece : split_top(code_, start, k)) {
      const std::vector<Token> t = code_tokens(lex(piece).tokens);
      if (t.size() < 2 || t.back().kind != TokenKind::Identifier || t[t.size() - 2].text != "*") return {};
      fields.push_back(t.back().text);
    }
    start = k;
  }
  return start + 1 == close ? fields : std::vector<std::string>{};
}

}  // namespace braid::convert
