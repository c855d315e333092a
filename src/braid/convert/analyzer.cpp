#include "braid/convert/analyzer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "braid/convert/buffer_flow.hpp"
#include "braid/util/error.hpp"

namespace braid::convert {
namespace {

const NcclSignature kSignatures[] = {
    // name, arity, send, recv, count, dtype, op, root, peer, comm, stream
    {"ncclAllGather", 6, 0, 1, 2, 3, -1, -1, -1, 4, 5},
    {"ncclAllReduce", 7, 0, 1, 2, 3, 4, -1, -1, 5, 6},
    {"ncclReduceScatter", 7, 0, 1, 2, 3, 4, -1, -1, 5, 6},
    {"ncclBroadcast", 7, 0, 1, 2, 3, -1, 4, -1, 5, 6},
    {"ncclBcast", 6, 0, 0, 1, 2, -1, 3, -1, 4, 5},
    {"ncclReduce", 8, 0, 1, 2, 3, 4, 5, -1, 6, 7},
    {"ncclAlltoAll", 6, 0, 1, 2, 3, -1, -1, -1, 4, 5},
    {"ncclGather", 7, 0, 1, 2, 3, -1, 4, -1, 5, 6},
    {"ncclScatter", 7, 0, 1, 2, 3, -1, 4, -1, 5, 6},
    {"ncclSend", 6, 0, -1, 1, 2, -1, -1, 3, 4, 5},
    {"ncclRecv", 6, -1, 0, 1, 2, -1, -1, 3, 4, 5},
};

bool is(const Token& t, const char* text) { return t.text == text; }

std::string normalise(const std::vector<Token>& toks, std::size_t b, std::size_t e) {
  std::string out;
  for (std::size_t i = b; i < e; ++i) {
    const Token& t = toks[i];
    if (!out.empty()) {
      const char last = out.back();
      const bool word = t.kind == TokenKind::Identifier || t.kind == TokenKind::Number;
      const bool last_word = std::isalnum((unsigned char)last) || last == '_';
      if (word && last_word) out += ' ';
      else if (t.text == "*" || t.text == "+" || t.text == "-" || t.text == "/" || t.text == "%" || t.text == "<<" ||
               t.text == ">>")
        out += ' ';
      else if (last == '*' || last == '+' || last == '-' || last == '/' || last == '%') {
        if (out.size() >= 2 && out[out.size() - 2] == ' ') out += ' ';
      }
    }
    out += t.text;
  }
  return out;
}

// Index of the token closing the bracket opened at `open`, or toks.size().
std::size_t matching(const std::vector<Token>& toks, std::size_t open) {
  const std::string o = toks[open].text;
  const std::string c = o == "(" ? ")" : o == "[" ? "]" : o == "{" ? "}" : ">>>";
  int depth = 0;
  for (std::size_t i = open; i < toks.size(); ++i) {
    if (toks[i].text == o) ++depth;
    else if (toks[i].text == c && --depth == 0) return i;
  }
  return toks.size();
}

// Splits (open, close) into top-level comma-separated arguments.
std::vector<Argument> split_args(const std::vector<Token>& toks, std::size_t open, std::size_t close) {
  std::vector<Argument> out;
  if (close == open + 1) return out;
  int depth = 0, angle = 0;
  std::size_t start = open + 1;
  for (std::size_t i = open + 1; i <= close; ++i) {
    const std::string& t = toks[i].text;
    if (i == close || (t == "," && depth == 0 && angle == 0)) {
      out.push_back(Argument{normalise(toks, start, i), toks[start].offset, toks[i - 1].end});
      start = i + 1;
      continue;
    }
    if (t == "(" || t == "[" || t == "{") ++depth;
    else if (t == ")" || t == "]" || t == "}") --depth;
    // Template arguments: `static_cast<T*>(x)` / `f<a, b>(...)`; a `<` right after an identifier
    // followed later by `>` before any `;`. Comparisons in arguments are rare in NCCL calls.
    else if (t == "<" && i > 0 && toks[i - 1].kind == TokenKind::Identifier &&
             (toks[i - 1].text.find("cast") != std::string::npos || toks[i - 1].text == "sizeof"))
      ++angle;
    else if (t == ">" && angle > 0) --angle;
  }
  return out;
}

const std::set<std::string> kKeywordsBeforeParen = {"if", "for", "while", "switch", "catch", "return", "sizeof", "decltype",
                                                    "static_assert", "alignof", "noexcept", "defined"};

bool harness_buffer_call(const std::string& s) { return s == "buffer" || s == "alloc" || s == "alloc_window"; }

}  // namespace

const char* call_kind_name(CallKind k) {
  switch (k) {
    case CallKind::Nccl: return "nccl";
    case CallKind::Kernel: return "kernel";
    case CallKind::Cublas: return "cublas";
    case CallKind::Stream: return "stream";
    case CallKind::Event: return "event";
    case CallKind::Memory: return "memory";
    case CallKind::Other: return "other";
  }
  return "?";
}

const NcclSignature* nccl_signature(const std::string& name) {
  for (const NcclSignature& s : kSignatures)
    if (name == s.name) return &s;
  return nullptr;
}

std::size_t element_size(const std::string& type) {
  static const std::map<std::string, std::size_t> sizes = {
      {"float", 4}, {"double", 8}, {"int", 4}, {"unsigned", 4}, {"int32_t", 4}, {"uint32_t", 4}, {"int64_t", 8},
      {"uint64_t", 8}, {"size_t", 8}, {"char", 1}, {"int8_t", 1}, {"uint8_t", 1}, {"__nv_bfloat16", 2}, {"half", 2},
      {"__half", 2}, {"nv_bfloat16", 2}, {"short", 2}, {"long", 8}, {"void*", 8}, {"float2", 8}, {"float4", 16}};
  auto it = sizes.find(type);
  return it == sizes.end() ? 0 : it->second;
}

std::optional<int64_t> evaluate_integer(const std::string& expr, const std::map<std::string, int64_t>& constants) {
  LexResult lr = lex(expr);
  if (!lr.error.empty()) return std::nullopt;
  std::vector<Token> t = code_tokens(lr.tokens);
  std::size_t i = 0;
  // Recursive descent: shift > additive > multiplicative > unary > primary.
  std::function<std::optional<int64_t>()> shift, additive, multiplicative, unary, primary;
  primary = [&]() -> std::optional<int64_t> {
    if (i >= t.size()) return std::nullopt;
    const Token& k = t[i];
    if (k.text == "(") {
      // A cast to an integer type: (size_t)x, (int64_t)(x).
      if (i + 2 < t.size() && t[i + 2].text == ")" && t[i + 1].kind == TokenKind::Identifier && element_size(t[i + 1].text) != 0 &&
          t[i + 1].text != "float" && t[i + 1].text != "double") {
        i += 3;
        return unary();
      }
      ++i;
      auto v = shift();
      if (!v || i >= t.size() || t[i].text != ")") return std::nullopt;
      ++i;
      return v;
    }
    if (k.kind == TokenKind::Number) {
      std::string s;
      for (char c : k.text)
        if (c != '\'') s += c;
      while (!s.empty() && (s.back() == 'u' || s.back() == 'U' || s.back() == 'l' || s.back() == 'L')) s.pop_back();
      try {
        std::size_t used = 0;
        int64_t v = std::stoll(s, &used, 0);
        if (used != s.size()) return std::nullopt;
        ++i;
        return v;
      } catch (...) {
        return std::nullopt;
      }
    }
    if (k.text == "sizeof" && i + 1 < t.size() && t[i + 1].text == "(") {
      std::size_t close = i + 1;
      while (close < t.size() && t[close].text != ")") ++close;
      std::string ty;
      for (std::size_t j = i + 2; j < close; ++j) ty += t[j].text;
      if (ty.rfind("std::", 0) == 0) ty = ty.substr(5);
      std::size_t sz = element_size(ty);
      if (ty.find('*') != std::string::npos) sz = 8;
      if (sz == 0 || close >= t.size()) return std::nullopt;
      i = close + 1;
      return (int64_t)sz;
    }
    if (k.kind == TokenKind::Identifier) {
      std::string name = k.text;
      ++i;
      while (i + 1 < t.size() && t[i].text == "::" && t[i + 1].kind == TokenKind::Identifier) {
        name = t[i + 1].text;  // a qualified constant: its last component names it here
        i += 2;
      }
      auto it = constants.find(name);
      if (it == constants.end()) return std::nullopt;
      return it->second;
    }
    return std::nullopt;
  };
  unary = [&]() -> std::optional<int64_t> {
    if (i < t.size() && (t[i].text == "-" || t[i].text == "+")) {
      const bool neg = t[i].text == "-";
      ++i;
      auto v = unary();
      if (!v) return v;
      return neg ? -*v : *v;
    }
    return primary();
  };
  multiplicative = [&]() -> std::optional<int64_t> {
    auto v = unary();
    while (v && i < t.size() && (t[i].text == "*" || t[i].text == "/" || t[i].text == "%")) {
      const std::string op = t[i++].text;
      auto r = unary();
      if (!r) return r;
      if ((op == "/" || op == "%") && *r == 0) return std::nullopt;
      v = op == "*" ? *v * *r : op == "/" ? *v / *r : *v % *r;
    }
    return v;
  };
  additive = [&]() -> std::optional<int64_t> {
    auto v = multiplicative();
    while (v && i < t.size() && (t[i].text == "+" || t[i].text == "-")) {
      const std::string op = t[i++].text;
      auto r = multiplicative();
      if (!r) return r;
      v = op == "+" ? *v + *r : *v - *r;
    }
    return v;
  };
  shift = [&]() -> std::optional<int64_t> {
    auto v = additive();
    while (v && i < t.size() && (t[i].text == "<<" || t[i].text == ">>")) {
      const std::string op = t[i++].text;
      auto r = additive();
      if (!r || *r < 0 || *r > 62) return std::nullopt;
      v = op == "<<" ? *v << *r : *v >> *r;
    }
    return v;
  };
  auto v = shift();
  if (!v || i != t.size()) return std::nullopt;
  return v;
}

std::string base_variable(const std::string& arg_text) {
  LexResult lr = lex(arg_text);
  if (!lr.error.empty()) return "";
  std::vector<Token> t = code_tokens(lr.tokens);
  std::size_t i = 0;
  // Skip casts and address-of: (void*)x, static_cast<T*>(x), reinterpret_cast<...>(x), &x[...].
  for (;;) {
    if (i < t.size() && (t[i].text == "&" || t[i].text == "*")) {
      ++i;
      continue;
    }
    if (i < t.size() && t[i].text == "(") {
      // `(type*)` cast or a parenthesised expression: both are skipped to the first identifier
      // that is not a type keyword.
      std::size_t j = i + 1;
      bool cast = false;
      while (j < t.size() && t[j].text != ")") ++j;
      if (j < t.size()) {
        for (std::size_t k = i + 1; k < j; ++k)
          if (t[k].text == "*" || t[k].text == "const" || element_size(t[k].text) != 0 || t[k].text == "void") cast = true;
      }
      i = cast ? j + 1 : i + 1;
      continue;
    }
    if (i < t.size() && t[i].text.find("_cast") != std::string::npos) {
      while (i < t.size() && t[i].text != "(") ++i;
      ++i;
      continue;
    }
    break;
  }
  if (i >= t.size() || t[i].kind != TokenKind::Identifier) return "";
  std::string name = t[i].text;
  if (name == "nullptr" || name == "NULL") return "";
  return name;
}

std::vector<std::size_t> Analysis::nccl_collectives() const {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < calls.size(); ++i)
    if (calls[i].kind == CallKind::Nccl && nccl_signature(calls[i].name) != nullptr) out.push_back(i);
  return out;
}

const Buffer* Analysis::buffer_of_argument(const std::string& arg_text) const {
  const std::string v = base_variable(arg_text);
  auto it = buffers.find(v);
  return it == buffers.end() ? nullptr : &it->second;
}

StatementRange statement_of(const std::vector<Token>& code, std::size_t name_token, std::size_t close_token) {
  auto is_control = [&](std::size_t open_paren) {
    if (open_paren == 0) return false;
    const std::string& k = code[open_paren - 1].text;
    return k == "if" || k == "while" || k == "for" || k == "switch";
  };
  auto open_of = [&](std::size_t close) {  // the '(' matching the ')' at `close`
    int depth = 0;
    for (std::size_t j = close + 1; j-- > 0;) {
      if (code[j].text == ")") ++depth;
      else if (code[j].text == "(" && --depth == 0) return j;
    }
    return code.size();
  };
  StatementRange r;
  int open_wrappers = 0;  // '(' of wrapper macros (BRAID_NCCL(...)) before the call
  std::size_t first = 0;
  for (std::size_t j = name_token; j-- > 0;) {
    const std::string& x = code[j].text;
    if (x == ";" || x == "{" || x == "}" || x == ":") {
      first = j + 1;
      break;
    }
    if (x == "else" || x == "do") {
      first = j + 1;
      r.control_body = true;
      break;
    }
    if (x == ")") {
      const std::size_t open = open_of(j);
      if (open >= code.size()) return {};
      if (is_control(open)) {  // the body of an unbraced if/for/while
        first = j + 1;
        r.control_body = true;
        break;
      }
      j = open;  // a cast or a parenthesised operand: part of this statement
      continue;
    }
    if (x == "(") {
      if (is_control(j)) return {};  // the call sits in a condition, not a statement of its own
      ++open_wrappers;
    }
  }
  int depth = open_wrappers;
  for (std::size_t k = close_token + 1; k < code.size(); ++k) {
    const std::string& x = code[k].text;
    if (x == "{" || x == "}") return {};  // a lambda or an initializer list: not a plain statement
    if (x == "(") ++depth;
    else if (x == ")") --depth;
    else if (x == ";") {
      if (depth != 0) return {};
      r.begin = code[first].offset;
      r.end = code[k].end;
      return r;
    }
  }
  return {};
}

Analysis analyze(const std::string& file, const std::string& source, bool require_collective) {
  Analysis a;
  a.file = file;
  if (source.find('\0') != std::string::npos) throw UserError(file, "is not C++/CUDA source (binary data)");
  LexResult lr = lex(source);
  if (!lr.error.empty()) throw UserError(fmt::format("{}:{}", file, lr.error_line), "not C++/CUDA: " + lr.error.substr(lr.error.find(": ") + 2));
  const std::vector<Token> toks = code_tokens(lr.tokens);
  const BufferFlow flow(toks);
  // A C++/CUDA translation unit has at least one declaration ending in ';' or '}' and identifiers;
  // prose, JSON or YAML fail these checks or the lexer above.
  {
    std::size_t idents = 0, semis = 0, braces = 0;
    for (const Token& t : toks) {
      idents += t.kind == TokenKind::Identifier;
      semis += t.text == ";";
      braces += t.text == "{";
    }
    const bool has_include = std::any_of(lr.tokens.begin(), lr.tokens.end(), [](const Token& t) {
      return t.kind == TokenKind::Preprocessor && t.text.find("include") != std::string::npos;
    });
    if (idents == 0 || semis == 0 || braces == 0 || (!has_include && source.find("int main") == std::string::npos))
      throw UserError(file, "is not C++/CUDA source (no includes, declarations or functions)");
  }
  // Annotations and macro definitions that hide NCCL calls.
  for (const Token& t : lr.tokens) {
    if (t.kind == TokenKind::Comment) {
      for (const char* kind : {"input", "output"}) {
        const std::string marker = std::string("braid:") + kind;
        auto p = t.text.find(marker);
        if (p == std::string::npos) continue;
        std::string rest = t.text.substr(p + marker.size());
        std::size_t b = rest.find_first_not_of(" \t");
        std::size_t e = b == std::string::npos ? b : rest.find_first_of(" \t*", b);
        std::string name = b == std::string::npos ? "" : rest.substr(b, e == std::string::npos ? std::string::npos : e - b);
        if (name.empty()) throw UserError(fmt::format("{}:{}", file, t.line), marker + " names no buffer");
        a.annotations.push_back(Annotation{kind, name, t.line, t.offset, t.end});
      }
    }
    if (t.kind == TokenKind::Preprocessor && t.text.find("define") != std::string::npos) {
      for (const NcclSignature& s : kSignatures)
        if (t.text.find(std::string(s.name) + "(") != std::string::npos || t.text.find(std::string(s.name) + " (") != std::string::npos)
          a.unsupported.push_back(Issue{t.line, s.name, "NCCL call inside a macro definition: expansions are not followed"});
    }
  }

  // Constants: `constexpr T NAME = expr;` and `const T NAME = expr;` (integers).
  for (std::size_t i = 0; i + 3 < toks.size(); ++i) {
    if (!(is(toks[i], "constexpr") || is(toks[i], "const"))) continue;
    std::size_t j = i + 1;
    while (j < toks.size() && (toks[j].kind == TokenKind::Identifier || is(toks[j], "::")) && j + 1 < toks.size() && !is(toks[j + 1], "=")) ++j;
    if (j + 1 >= toks.size() || toks[j].kind != TokenKind::Identifier || !is(toks[j + 1], "=")) continue;
    std::size_t e = j + 2;
    while (e < toks.size() && !is(toks[e], ";") && !is(toks[e], ",")) ++e;
    if (auto v = evaluate_integer(normalise(toks, j + 2, e), a.constants)) a.constants[toks[j].text] = *v;
  }

  // Declared pointer types: `T* name` / `T *name` -> element type.
  std::map<std::string, std::string> pointer_types;
  for (std::size_t i = 1; i + 1 < toks.size(); ++i) {
    if (!is(toks[i], "*") || toks[i + 1].kind != TokenKind::Identifier || toks[i - 1].kind != TokenKind::Identifier) continue;
    if (i + 2 < toks.size() && !(is(toks[i + 2], "=") || is(toks[i + 2], ";") || is(toks[i + 2], ",") || is(toks[i + 2], ")"))) continue;
    if (element_size(toks[i - 1].text) == 0 && toks[i - 1].text != "void") continue;
    pointer_types.emplace(toks[i + 1].text, toks[i - 1].text);
  }

  // Harness buffers: `const Buffer& x = c.buffer("name")` and `c.alloc("name", bytes, ...)`.
  std::map<std::string, std::pair<std::string, int>> harness_alloc;  // harness name -> bytes expr, line
  for (std::size_t i = 0; i + 3 < toks.size(); ++i) {
    if (!(is(toks[i], ".") || is(toks[i], "->")) || !harness_buffer_call(toks[i + 1].text) || !is(toks[i + 2], "(")) continue;
    if (toks[i + 3].kind != TokenKind::String) continue;
    std::string hname = toks[i + 3].text.substr(1, toks[i + 3].text.size() - 2);
    std::size_t close = matching(toks, i + 2);
    auto args = split_args(toks, i + 2, close);
    if (toks[i + 1].text != "buffer" && args.size() >= 2) harness_alloc[hname] = {args[1].text, toks[i].line};
    // Variable bound to it: `Buffer& x = c.buffer("name")` (x precedes `=` precedes object).
    if (i >= 3 && is(toks[i - 2], "=") && toks[i - 3].kind == TokenKind::Identifier) {
      Buffer b;
      b.name = toks[i - 3].text;
      b.harness_name = hname;
      b.allocator = "harness";
      b.line = toks[i].line;
      b.path = b.name;
      a.buffers[b.name] = b;
    }
    a.uses_harness = true;
  }
  for (auto& [name, b] : a.buffers) {
    if (b.allocator != "harness") continue;
    auto it = harness_alloc.find(b.harness_name);
    if (it != harness_alloc.end()) {
      b.bytes_expr = it->second.first;
      b.line = it->second.second;
      b.bytes = evaluate_integer(b.bytes_expr, a.constants);
    } else {
      b.bytes_expr = b.name + ".bytes";  // sized by the workload at run time (Buffer::bytes)
    }
  }

  // Walk: scopes, loops, groups, calls.
  struct Scope {
    enum Kind { Namespace, Function, Loop, Other } kind;
    int loop = -1;
    std::string function;
  };
  std::vector<Scope> scopes;
  int open_group = -1;
  int single_statement_loop = -1;  // loop whose body is one statement without braces
  std::size_t single_statement_end_depth = 0;
  std::string current_function;
  std::map<std::string, std::string> cublas_stream;  // handle -> stream from cublasSetStream
  std::set<std::string> stream_set, event_set;
  for (std::size_t i = 0; i < toks.size(); ++i) {
    const Token& t = toks[i];
    if (is(t, "__global__")) {
      for (std::size_t j = i + 1; j < toks.size() && j < i + 40; ++j)
        if (is(toks[j], "(") && toks[j - 1].kind == TokenKind::Identifier) {
          a.kernels.push_back(toks[j - 1].text);
          break;
        }
    }
    if (is(t, "cudaStream_t") || is(t, "cudaEvent_t")) {
      for (std::size_t j = i + 1; j < toks.size() && !is(toks[j], ";") && !is(toks[j], ")") && !is(toks[j], "="); ++j)
        if (toks[j].kind == TokenKind::Identifier) (is(t, "cudaStream_t") ? stream_set : event_set).insert(toks[j].text);
    }
    if ((is(t, "for") || is(t, "while")) && i + 1 < toks.size() && is(toks[i + 1], "(")) {
      std::size_t close = matching(toks, i + 1);
      // `} while (cond);` closes a do-loop already recorded.
      if (is(t, "while") && i > 0 && is(toks[i - 1], "}") && close + 1 < toks.size() && is(toks[close + 1], ";")) {
        i = close + 1;
        continue;
      }
      a.loops.push_back(Loop{t.text, t.line, normalise(toks, i + 2, close)});
      const int id = (int)a.loops.size() - 1;
      if (close + 1 < toks.size() && is(toks[close + 1], "{")) {
        scopes.push_back(Scope{Scope::Loop, id, current_function});
        i = close + 1;
      } else {
        single_statement_loop = id;
        single_statement_end_depth = scopes.size();
        i = close;
      }
      continue;
    }
    if (is(t, "do") && i + 1 < toks.size() && is(toks[i + 1], "{")) {
      a.loops.push_back(Loop{"do", t.line, ""});
      scopes.push_back(Scope{Scope::Loop, (int)a.loops.size() - 1, current_function});
      ++i;
      continue;
    }
    if (is(t, "{")) {
      Scope s{Scope::Other, -1, current_function};
      std::size_t p = i;
      while (p > 0 && (is(toks[p - 1], "const") || is(toks[p - 1], "noexcept") || is(toks[p - 1], "override"))) --p;
      if (i >= 2 && is(toks[i - 2], "namespace")) s.kind = Scope::Namespace;
      else if (i >= 1 && is(toks[i - 1], "namespace")) s.kind = Scope::Namespace;
      else if (p >= 1 && is(toks[p - 1], ")") && current_function.empty()) {
        int depth = 0;
        std::size_t q = p - 1;
        for (;; --q) {
          if (is(toks[q], ")")) ++depth;
          else if (is(toks[q], "(") && --depth == 0) break;
          if (q == 0) break;
        }
        if (q > 0 && toks[q - 1].kind == TokenKind::Identifier && !kKeywordsBeforeParen.count(toks[q - 1].text)) {
          s.kind = Scope::Function;
          s.function = toks[q - 1].text;
          current_function = s.function;
        }
      }
      scopes.push_back(s);
      continue;
    }
    if (is(t, "}")) {
      if (!scopes.empty()) {
        if (scopes.back().kind == Scope::Function) current_function.clear();
        scopes.pop_back();
      }
      if (!scopes.empty()) current_function = scopes.back().function;
      continue;
    }
    if (is(t, ";") && single_statement_loop >= 0 && scopes.size() == single_statement_end_depth) single_statement_loop = -1;
    if (t.kind != TokenKind::Identifier || i + 1 >= toks.size()) continue;

    int loop = single_statement_loop;
    for (auto it = scopes.rbegin(); it != scopes.rend() && loop < 0; ++it)
      if (it->kind == Scope::Loop) loop = it->loop;

    // Kernel launch: name [<targs>] <<< cfg >>> ( args )
    std::size_t after = i + 1;
    if (is(toks[after], "<") && !current_function.empty()) {
      int depth = 0;
      std::size_t j = after;
      for (; j < toks.size() && j < after + 64; ++j) {
        if (is(toks[j], "<")) ++depth;
        else if (is(toks[j], ">") && --depth == 0) break;
        else if (is(toks[j], ">>") && (depth -= 2) <= 0) break;
        else if (is(toks[j], ";")) break;
      }
      if (j < toks.size() && j + 1 < toks.size() && toks[j + 1].kind == TokenKind::LaunchOpen) after = j + 1;
    }
    if (toks[after].kind == TokenKind::LaunchOpen) {
      std::size_t cfg_close = after + 1;
      while (cfg_close < toks.size() && toks[cfg_close].kind != TokenKind::LaunchClose && !is(toks[cfg_close], ";")) ++cfg_close;
      if (cfg_close + 1 >= toks.size() || !is(toks[cfg_close + 1], "(")) {
        a.unsupported.push_back(Issue{t.line, t.text + "<<<...>>>", "kernel launch whose configuration could not be followed"});
        continue;
      }
      // Configuration args: split between the launch brackets.
      Call c;
      c.kind = CallKind::Kernel;
      c.name = t.text;
      c.line = t.line;
      {
        std::vector<Token> cfg(toks.begin() + after, toks.begin() + cfg_close + 1);
        cfg.front().text = "(";
        cfg.back().text = ")";
        c.launch_config = split_args(cfg, 0, cfg.size() - 1);
      }
      std::size_t close = matching(toks, cfg_close + 1);
      c.args = split_args(toks, cfg_close + 1, close);
      c.stream = c.launch_config.size() >= 4 ? c.launch_config[3].text : "0";
      c.loop = loop;
      c.group = open_group;
      c.function = current_function;
      c.call_begin = t.offset;
      c.call_end = toks[std::min(close, toks.size() - 1)].end;
      a.calls.push_back(c);
      i = close;
      continue;
    }
    if (!is(toks[i + 1], "(")) continue;
    if (i > 0 && (is(toks[i - 1], ".") || is(toks[i - 1], "->")) ) continue;  // member calls are not API calls
    const std::string& name = t.text;
    CallKind kind = CallKind::Other;
    if (name.rfind("nccl", 0) == 0) kind = CallKind::Nccl;
    else if (name.rfind("cublas", 0) == 0 || name.rfind("cublasLt", 0) == 0) kind = CallKind::Cublas;
    else if (name.rfind("cudaStream", 0) == 0) kind = CallKind::Stream;
    else if (name.rfind("cudaEvent", 0) == 0) kind = CallKind::Event;
    else if (name.rfind("cudaMalloc", 0) == 0 || name.rfind("cudaFree", 0) == 0 || name.rfind("cudaMemcpy", 0) == 0 ||
             name.rfind("cudaMemset", 0) == 0 || name == "cudaDeviceSynchronize")
      kind = CallKind::Memory;
    else continue;
    // Declarations (`ncclResult_t ncclFoo(...)` prototypes) are not calls.
    if (i > 0 && (is(toks[i - 1], "ncclResult_t") || is(toks[i - 1], "cudaError_t") || is(toks[i - 1], "cublasStatus_t"))) continue;
    std::size_t close = matching(toks, i + 1);
    if (close >= toks.size()) throw UserError(fmt::format("{}:{}", file, t.line), "unbalanced parentheses in call to " + name);
    Call c;
    c.kind = kind;
    c.name = name;
    c.line = t.line;
    c.args = split_args(toks, i + 1, close);
    c.loop = loop;
    c.function = current_function;
    c.call_begin = t.offset;
    c.call_end = toks[close].end;
    if (name == "ncclGroupStart") {
      if (open_group >= 0)
        throw UserError(fmt::format("{}:{}", file, t.line), fmt::format("nested ncclGroupStart (group opened at line {} is still open)",
                                                                        a.groups[(std::size_t)open_group].start_line));
      a.groups.push_back(Group{t.line, 0, a.calls.size(), 0, {}});
      open_group = (int)a.groups.size() - 1;
    } else if (name == "ncclGroupEnd") {
      if (open_group < 0) throw UserError(fmt::format("{}:{}", file, t.line), "ncclGroupEnd without a matching ncclGroupStart");
      a.groups[(std::size_t)open_group].end_line = t.line;
      a.groups[(std::size_t)open_group].end_call = a.calls.size();
      c.group = open_group;
      open_group = -1;
    } else {
      c.group = open_group;
    }
    if (const NcclSignature* sig = nccl_signature(name)) {
      if ((int)c.args.size() != sig->arity) {
        a.unsupported.push_back(Issue{t.line, name, fmt::format("{} arguments where {} are expected", c.args.size(), sig->arity)});
      } else {
        c.stream = c.args[(std::size_t)sig->stream].text;
        for (int idx : {sig->send, sig->recv}) {
          if (idx < 0) continue;
          const std::string v = base_variable(c.args[(std::size_t)idx].text);
          if (v.empty()) continue;
          if (std::find(c.buffers.begin(), c.buffers.end(), v) == c.buffers.end()) c.buffers.push_back(v);
        }
      }
      if (c.group >= 0) a.groups[(std::size_t)c.group].members.push_back(a.calls.size());
    } else if ((kind == CallKind::Memory && (name == "cudaMalloc" || name == "cudaMallocAsync" || name == "cudaMallocManaged") &&
                c.args.size() >= 2) ||
               (name == "ncclMemAlloc" && c.args.size() == 2)) {
      // Keyed by allocation site: the access path of the target, `path@line` for a second site.
      const std::string path = access_path(c.args[0].text, true);
      if (!path.empty()) {
        Buffer b;
        b.path = path;
        b.name = a.buffers.count(path) ? fmt::format("{}@{}", path, t.line) : path;
        b.allocator = name;
        b.bytes_expr = c.args[1].text;
        b.bytes = evaluate_integer(b.bytes_expr, a.constants);
        b.line = t.line;
        b.alloc_call = a.calls.size();
        b.conditional = flow.conditional(i);
        const std::string last = path.substr(path.find_last_of(".]") == std::string::npos ? 0 : path.find_last_of(".]") + 1);
        auto pt = pointer_types.find(last.empty() ? split_root(path).first : last);
        b.element_type = pt == pointer_types.end() ? "" : pt->second;
        a.buffers[b.name] = b;
      }
    } else if (kind == CallKind::Cublas) {
      if (name == "cublasSetStream" && c.args.size() == 2) cublas_stream[c.args[0].text] = c.args[1].text;
      if (!c.args.empty()) {
        auto it = cublas_stream.find(c.args[0].text);
        c.stream = it == cublas_stream.end() ? "0" : it->second;
      }
    } else if (name == "cudaEventRecord" && c.args.size() >= 1) {
      c.stream = c.args.size() >= 2 ? c.args[1].text : "0";
    } else if (name == "cudaStreamWaitEvent" && c.args.size() >= 2) {
      c.stream = c.args[0].text;
    } else if ((name == "cudaMemcpyAsync" || name == "cudaMemsetAsync") && !c.args.empty()) {
      c.stream = c.args.back().text;
    }
    if (kind == CallKind::Kernel || kind == CallKind::Cublas || kind == CallKind::Memory) {
      for (const Argument& arg : c.args) {
        const std::string v = base_variable(arg.text);
        if (!v.empty() && std::find(c.buffers.begin(), c.buffers.end(), v) == c.buffers.end()) c.buffers.push_back(v);
      }
    }
    a.calls.push_back(c);
  }
  // Kernel-launch buffer arguments (collected above only for API calls).
  for (Call& c : a.calls)
    if (c.kind == CallKind::Kernel)
      for (const Argument& arg : c.args) {
        const std::string v = base_variable(arg.text);
        if (!v.empty() && std::find(c.buffers.begin(), c.buffers.end(), v) == c.buffers.end()) c.buffers.push_back(v);
      }
  // Keep only names that are buffers (allocated or harness-bound) in calls' buffer lists.
  for (Call& c : a.calls) {
    std::vector<std::string> kept;
    for (auto& b : c.buffers)
      if (a.buffers.count(b)) kept.push_back(b);
    c.buffers = kept;
  }
  if (open_group >= 0)
    throw UserError(fmt::format("{}:{}", file, a.groups[(std::size_t)open_group].start_line), "ncclGroupStart without a matching ncclGroupEnd");
  a.streams.assign(stream_set.begin(), stream_set.end());
  a.events.assign(event_set.begin(), event_set.end());

  // Constructs whose effect on ordering or on the communicator the rules do not model.
  static const std::map<std::string, std::string> kNotFollowed = {
            {"ncclCommInitAll", "single-process multi-GPU communicators (several ranks in one process): the converted runtime serves one rank per process, so the file is left untouched"},
      {"ncclCommShrink", "a derived communicator: calls on it run as host NCCL"},
      {"cudaStreamBeginCapture", "CUDA graph capture: first-use window registration must not be captured"},
      {"cudaGraphLaunch", "CUDA graph launch: the graph's contents are not visible to the analysis"},
      {"cudaLaunchKernel", "kernel launched through the runtime API: its buffers and stream are not followed"},
      {"cudaLaunchCooperativeKernel", "kernel launched through the runtime API: its buffers and stream are not followed"},
      {"ncclCommRegister", "user buffer registration: kept as written, the rules register windows themselves"}};
  {
    const std::vector<Token>& all = toks;
    for (std::size_t i = 0; i + 1 < all.size(); ++i) {
      auto it = kNotFollowed.find(all[i].text);
      if (it != kNotFollowed.end() && all[i + 1].text == "(") a.unsupported.push_back(Issue{all[i].line, it->first, it->second});
    }
  }
  const auto collectives = a.nccl_collectives();
  if (collectives.empty() && require_collective)
    throw UserError(file, "has no NCCL collective or point-to-point call (nothing to convert)");
  // Buffer arguments followed to their allocation sites (buffer_flow.hpp); a call whose buffer
  // cannot be followed is kept with the reason and stays host NCCL (never a whole-file refusal).
  {
    std::map<std::size_t, std::size_t> token_at;  // byte offset -> code token index
    for (std::size_t k = 0; k < toks.size(); ++k) token_at[toks[k].offset] = k;
    auto resolve_sites = [&](const std::string& text, std::size_t tok, Call& c) -> std::vector<std::string> {
      // A harness buffer (`const Buffer& kv = c.buffer("kv")`) is used as `kv.ptr` or
      // `kv.as<T>() + off`: the variable is the allocation, whatever member reaches its pointer.
      if (auto h = a.buffers.find(base_variable(text)); h != a.buffers.end() && h->second.allocator == "harness") return {h->first};
      const BufferFlow::Resolution r = flow.resolve(text, flow.function_at(tok), tok);
      for (const std::string& v : r.via) c.via.push_back(v);
      if (!r.reason.empty()) {
        if (c.unresolved.empty()) c.unresolved = r.reason;
        return {};
      }
      std::vector<std::string> keys;
      for (const std::string& path : r.paths) {
        bool found = false;
        for (const auto& [key, b] : a.buffers)
          if (path_matches(path, b.path)) {
            keys.push_back(key);
            found = true;
          }
        if (!found && c.unresolved.empty())
          c.unresolved = fmt::format("buffer `{}` (followed to `{}`) has no cudaMalloc/ncclMemAlloc allocation in this file", text, path);
      }
      return keys;
    };
    for (Call& c : a.calls)
      if (auto tok = token_at.find(c.call_begin); tok != token_at.end()) c.conditional = flow.conditional(tok->second);
    for (std::size_t ci : collectives) {
      Call& c = a.calls[ci];
      const NcclSignature* sig = nccl_signature(c.name);
      if ((int)c.args.size() != sig->arity) continue;
      auto tok = token_at.find(c.call_begin);
      if (tok == token_at.end()) continue;
      c.buffers.clear();
      for (int idx : {sig->send, sig->recv}) {
        if (idx < 0) continue;
        const std::string& text = c.args[(std::size_t)idx].text;
        if (text == "nullptr" || text == "NULL") continue;
        for (const std::string& k : resolve_sites(text, tok->second, c)) {
          c.arg_buffers[idx].push_back(k);
          if (std::find(c.buffers.begin(), c.buffers.end(), k) == c.buffers.end()) c.buffers.push_back(k);
        }
      }
      const BufferFlow::Resolution comm = flow.resolve(c.args[(std::size_t)sig->comm].text, flow.function_at(tok->second), tok->second);
      c.comm_paths = comm.paths;
      // The harness hands every entry point its one communicator (`c.comm`), so the expression
      // as written names it even though run()'s caller is outside this file.
      if (comm.paths.empty() && a.uses_harness)
        if (std::string p = access_path(c.args[(std::size_t)sig->comm].text, false); !p.empty()) c.comm_paths = {p};
    }
    // Communicator creations, and the single-process multi-GPU form.
    for (std::size_t ci = 0; ci < a.calls.size(); ++ci) {
      const Call& c = a.calls[ci];
      int target = -1;
      if ((c.name == "ncclCommInitRank" || c.name == "ncclCommInitRankConfig") && !c.args.empty()) target = 0;
      else if (c.name == "ncclCommSplit" && c.args.size() >= 4) target = 3;
      else if (c.name == "ncclCommInitAll") a.single_process_multi_gpu = true;
      if (target < 0) continue;
      auto tok = token_at.find(c.call_begin);
      const std::string path = access_path(c.args[(std::size_t)target].text, true);
      if (!path.empty() && tok != token_at.end()) a.comm_inits.push_back(CommInit{ci, path, flow.conditional(tok->second)});
    }
    // NCCL collectives named without a call (taken by address, through a function pointer).
    for (std::size_t k = 0; k + 1 < toks.size(); ++k)
      if (nccl_signature(toks[k].text) && toks[k + 1].text != "(" && (k == 0 || toks[k - 1].text != "p" + toks[k].text))
        a.unsupported.push_back(Issue{toks[k].line, toks[k].text + " (not called by name)",
                                      "taken by address: calls through the pointer are not followed and run as host NCCL"});
  }
  for (const Annotation& an : a.annotations)
    if (!a.buffers.count(an.buffer))
      throw UserError(fmt::format("{}:{}", file, an.line), fmt::format("braid:{} names `{}`, which is not an allocated buffer", an.kind, an.buffer));

  // Order: consecutive work on one stream; event record -> wait; buffers shared across streams.
  std::map<std::string, std::size_t> last_on_stream;
  std::map<std::string, std::pair<std::size_t, std::string>> recorded;  // event -> (last op before record, stream)
  std::map<std::string, std::pair<std::size_t, std::string>> last_touch;  // buffer -> (call, stream)
  for (std::size_t i = 0; i < a.calls.size(); ++i) {
    const Call& c = a.calls[i];
    if (c.name == "cudaEventRecord" && !c.args.empty()) {
      auto it = last_on_stream.find(c.stream);
      if (it != last_on_stream.end()) recorded[c.args[0].text] = {it->second, c.stream};
      continue;
    }
    if (c.name == "cudaStreamWaitEvent" && c.args.size() >= 2) {
      auto it = recorded.find(c.args[1].text);
      if (it != recorded.end()) {
        // The edge is attached to the next operation on the waiting stream.
        for (std::size_t j = i + 1; j < a.calls.size(); ++j)
          if (a.calls[j].stream == c.stream && (a.calls[j].kind == CallKind::Kernel || a.calls[j].kind == CallKind::Nccl || a.calls[j].kind == CallKind::Cublas)) {
            a.edges.push_back(Edge{it->second.first, j, fmt::format("event {}: {} -> {}", c.args[1].text, it->second.second, c.stream)});
            break;
          }
      }
      continue;
    }
    const bool work = c.kind == CallKind::Kernel || (c.kind == CallKind::Nccl && nccl_signature(c.name)) ||
                      (c.kind == CallKind::Cublas && c.name.find("Gemm") != std::string::npos) || c.name == "cudaMemcpyAsync";
    if (!work || c.stream.empty()) continue;
    auto it = last_on_stream.find(c.stream);
    if (it != last_on_stream.end()) a.edges.push_back(Edge{it->second, i, "stream " + c.stream});
    last_on_stream[c.stream] = i;
    for (const std::string& b : c.buffers) {
      auto lt = last_touch.find(b);
      if (lt != last_touch.end() && lt->second.second != c.stream)
        a.edges.push_back(Edge{lt->second.first, i, fmt::format("buffer {} across streams {} -> {}", b, lt->second.second, c.stream)});
      last_touch[b] = {i, c.stream};
    }
  }
  // Statement ranges, for tools that insert code after a call (diagnostic_rerun.hpp).
  {
    std::map<std::size_t, std::size_t> token_at;  // byte offset -> code token index
    for (std::size_t k = 0; k < toks.size(); ++k) token_at[toks[k].offset] = k;
    for (Call& c : a.calls) {
      auto name = token_at.find(c.call_begin);
      if (name == token_at.end() || c.call_end == 0) continue;
      auto close = token_at.find(c.call_end - 1);
      if (close == token_at.end()) continue;
      const StatementRange r = statement_of(toks, name->second, close->second);
      c.stmt_begin = r.begin;
      c.stmt_end = r.end;
      c.stmt_is_body = r.control_body;
    }
  }
  return a;
}

json analysis_to_json(const Analysis& a) {
  json j;
  j["file"] = a.file;
  j["uses_harness"] = a.uses_harness;
  j["kernels_defined"] = a.kernels;
  j["streams"] = a.streams;
  j["events"] = a.events;
  json calls = json::array();
  for (std::size_t i = 0; i < a.calls.size(); ++i) {
    const Call& c = a.calls[i];
    json args = json::array();
    for (auto& x : c.args) args.push_back(x.text);
    json cj{{"index", i}, {"kind", call_kind_name(c.kind)}, {"name", c.name}, {"line", c.line}, {"args", args}, {"function", c.function}};
    if (!c.stream.empty()) cj["stream"] = c.stream;
    if (!c.buffers.empty()) cj["buffers"] = c.buffers;
    if (c.group >= 0) cj["group"] = c.group;
    if (c.loop >= 0) cj["loop"] = c.loop;
    if (!c.launch_config.empty()) {
      json cfg = json::array();
      for (auto& x : c.launch_config) cfg.push_back(x.text);
      cj["launch"] = cfg;
    }
    calls.push_back(cj);
  }
  j["calls"] = calls;
  json bufs = json::object();
  for (auto& [name, b] : a.buffers) {
    json bj{{"allocator", b.allocator}, {"bytes_expr", b.bytes_expr}, {"line", b.line}};
    if (b.bytes) bj["bytes"] = *b.bytes;
    if (!b.element_type.empty()) bj["element_type"] = b.element_type;
    if (!b.harness_name.empty()) bj["harness_name"] = b.harness_name;
    bufs[name] = bj;
  }
  j["buffers"] = bufs;
  json groups = json::array();
  for (auto& g : a.groups) groups.push_back({{"start_line", g.start_line}, {"end_line", g.end_line}, {"members", g.members}});
  j["groups"] = groups;
  json loops = json::array();
  for (auto& l : a.loops) loops.push_back({{"kind", l.kind}, {"line", l.line}, {"header", l.header}});
  j["loops"] = loops;
  json ann = json::array();
  for (auto& an : a.annotations) ann.push_back({{"kind", an.kind}, {"buffer", an.buffer}, {"line", an.line}});
  j["annotations"] = ann;
  json edges = json::array();
  for (auto& e : a.edges) edges.push_back({{"from", e.from}, {"to", e.to}, {"reason", e.reason}});
  j["edges"] = edges;
  json un = json::array();
  for (auto& u : a.unsupported) un.push_back({{"line", u.line}, {"construct", u.construct}, {"reason", u.reason}});
  j["unsupported"] = un;
  j["constants"] = a.constants;
  return j;
}

std::string analysis_to_text(const Analysis& a) {
  std::string out = fmt::format("{}: {} calls, {} buffers, {} streams, {} events, {} groups, {} loops{}\n", a.file, a.calls.size(),
                                a.buffers.size(), a.streams.size(), a.events.size(), a.groups.size(), a.loops.size(),
                                a.uses_harness ? " (braid harness program)" : "");
  out += "buffers:\n";
  for (auto& [name, b] : a.buffers)
    out += fmt::format("  {:<14} {:<13} {} bytes = {}{}  (line {})\n", name, b.allocator, b.element_type.empty() ? "?" : b.element_type,
                       b.bytes_expr, b.bytes ? fmt::format(" = {}", *b.bytes) : "", b.line);
  out += "calls:\n";
  for (std::size_t i = 0; i < a.calls.size(); ++i) {
    const Call& c = a.calls[i];
    if (c.kind == CallKind::Other) continue;
    std::string where;
    if (c.group >= 0) where += fmt::format(" [group {}]", c.group);
    if (c.loop >= 0) where += fmt::format(" [loop {} line {}]", a.loops[(std::size_t)c.loop].kind, a.loops[(std::size_t)c.loop].line);
    std::string bufs;
    for (auto& b : c.buffers) bufs += (bufs.empty() ? "" : ",") + b;
    out += fmt::format("  #{:<3} line {:<4} {:<7} {}{}{}{}\n", i, c.line, call_kind_name(c.kind), c.name,
                       c.stream.empty() ? "" : " on " + c.stream, bufs.empty() ? "" : " touches " + bufs, where);
  }
  if (!a.edges.empty()) {
    out += "order:\n";
    for (auto& e : a.edges) out += fmt::format("  #{} -> #{}  ({})\n", e.from, e.to, e.reason);
  }
  for (auto& an : a.annotations) out += fmt::format("annotation line {}: braid:{} {}\n", an.line, an.kind, an.buffer);
  for (auto& u : a.unsupported) out += fmt::format("{}:{}: not followed: {}: {}\n", a.file, u.line, u.construct, u.reason);
  return out;
}

}  // namespace braid::convert
