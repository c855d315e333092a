// Token helpers of the analyzer's passes (analyzer_passes.hpp) and the public ones of analyzer.hpp:
// NCCL signatures, argument splitting, integer constants, base variables, statement ranges.
#include <optional>

#include "braid/convert/analyzer_passes.hpp"

namespace braid::convert {
namespace {

const NcclSignature kSignatures[] = {
    // name, arity, send, recv, count, dtype, op, root, peer, comm, stream
    {"ncclAllGather", 6, 0, 1, 2, 3, -1, -1, -1, 4, 5},    {"ncclAllReduce", 7, 0, 1, 2, 3, 4, -1, -1, 5, 6},
    {"ncclReduceScatter", 7, 0, 1, 2, 3, 4, -1, -1, 5, 6}, {"ncclBroadcast", 7, 0, 1, 2, 3, -1, 4, -1, 5, 6},
    {"ncclBcast", 6, 0, 0, 1, 2, -1, 3, -1, 4, 5},         {"ncclReduce", 8, 0, 1, 2, 3, 4, 5, -1, 6, 7},
    {"ncclAlltoAll", 6, 0, 1, 2, 3, -1, -1, -1, 4, 5},     {"ncclGather", 7, 0, 1, 2, 3, -1, 4, -1, 5, 6},
    {"ncclScatter", 7, 0, 1, 2, 3, -1, 4, -1, 5, 6},       {"ncclSend", 6, 0, -1, 1, 2, -1, -1, 3, 4, 5},
    {"ncclRecv", 6, -1, 0, 1, 2, -1, -1, 3, 4, 5},
};

// Recursive descent over one integer expression: shift > additive > multiplicative > unary > primary.
class IntegerExpression {
 public:
  IntegerExpression(std::vector<Token> tokens, const std::map<std::string, int64_t>& constants)
      : t_(std::move(tokens)), constants_(constants) {}

  std::optional<int64_t> value() {
    auto v = shift();
    if (!v || i_ != t_.size()) return std::nullopt;
    return v;
  }

 private:
  std::optional<int64_t> primary() {
    if (i_ >= t_.size()) return std::nullopt;
    const Token& k = t_[i_];
    if (k.text == "(") return parenthesised();
    if (k.kind == TokenKind::Number) return number(k.text);
    if (k.text == "sizeof" && i_ + 1 < t_.size() && t_[i_ + 1].text == "(") return size_of();
    if (k.kind == TokenKind::Identifier) return constant();
    return std::nullopt;
  }

  // `(expr)`, or a cast to an integer type: (size_t)x, (int64_t)(x).
  std::optional<int64_t> parenthesised() {
    if (i_ + 2 < t_.size() && t_[i_ + 2].text == ")" && t_[i_ + 1].kind == TokenKind::Identifier &&
        element_size(t_[i_ + 1].text) != 0 && t_[i_ + 1].text != "float" && t_[i_ + 1].text != "double") {
      i_ += 3;
      return unary();
    }
    ++i_;
    auto v = shift();
    if (!v || i_ >= t_.size() || t_[i_].text != ")") return std::nullopt;
    ++i_;
    return v;
  }

  std::optional<int64_t> number(const std::string& text) {
    std::string s;
    for (char c : text)
      if (c != '\'') s += c;
    while (!s.empty() && (s.back() == 'u' || s.back() == 'U' || s.back() == 'l' || s.back() == 'L')) s.pop_back();
    try {
      std::size_t used = 0;
      int64_t v = std::stoll(s, &used, 0);
      if (used != s.size()) return std::nullopt;
      ++i_;
      return v;
    } catch (...) {
      return std::nullopt;
    }
  }

  std::optional<int64_t> size_of() {
    std::size_t close = i_ + 1;
    while (close < t_.size() && t_[close].text != ")") ++close;
    std::string ty;
    for (std::size_t j = i_ + 2; j < close; ++j) ty += t_[j].text;
    if (ty.rfind("std::", 0) == 0) ty = ty.substr(5);
    std::size_t sz = element_size(ty);
    if (ty.find('*') != std::string::npos) sz = 8;
    if (sz == 0 || close >= t_.size()) return std::nullopt;
    i_ = close + 1;
    return (int64_t)sz;
  }

  std::optional<int64_t> constant() {
    std::string name = t_[i_].text;
    ++i_;
    while (i_ + 1 < t_.size() && t_[i_].text == "::" && t_[i_ + 1].kind == TokenKind::Identifier) {
      name = t_[i_ + 1].text;  // a qualified constant: its last component names it here
      i_ += 2;
    }
    auto it = constants_.find(name);
    if (it == constants_.end()) return std::nullopt;
    return it->second;
  }

  std::optional<int64_t> unary() {
    if (i_ < t_.size() && (t_[i_].text == "-" || t_[i_].text == "+")) {
      const bool neg = t_[i_].text == "-";
      ++i_;
      auto v = unary();
      if (!v) return v;
      return neg ? -*v : *v;
    }
    return primary();
  }

  std::optional<int64_t> multiplicative() {
    auto v = unary();
    while (v && i_ < t_.size() && (t_[i_].text == "*" || t_[i_].text == "/" || t_[i_].text == "%")) {
      const std::string op = t_[i_++].text;
      auto r = unary();
      if (!r) return r;
      if ((op == "/" || op == "%") && *r == 0) return std::nullopt;
      v = op == "*" ? *v * *r : op == "/" ? *v / *r : *v % *r;
    }
    return v;
  }

  std::optional<int64_t> additive() {
    auto v = multiplicative();
    while (v && i_ < t_.size() && (t_[i_].text == "+" || t_[i_].text == "-")) {
      const std::string op = t_[i_++].text;
      auto r = multiplicative();
      if (!r) return r;
      v = op == "+" ? *v + *r : *v - *r;
    }
    return v;
  }

  std::optional<int64_t> shift() {
    auto v = additive();
    while (v && i_ < t_.size() && (t_[i_].text == "<<" || t_[i_].text == ">>")) {
      const std::string op = t_[i_++].text;
      auto r = additive();
      if (!r || *r < 0 || *r > 62) return std::nullopt;
      v = op == "<<" ? *v << *r : *v >> *r;
    }
    return v;
  }

  const std::vector<Token> t_;
  const std::map<std::string, int64_t>& constants_;
  std::size_t i_ = 0;
};

}  // namespace

std::span<const NcclSignature> nccl_signatures() { return kSignatures; }

const NcclSignature* nccl_signature(const std::string& name) {
  for (const NcclSignature& s : kSignatures)
    if (name == s.name) return &s;
  return nullptr;
}

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

std::size_t element_size(const std::string& type) {
  static const std::map<std::string, std::size_t> sizes = {
      {"float", 4},         {"double", 8},   {"int", 4},    {"unsigned", 4},    {"int32_t", 4}, {"uint32_t", 4},
      {"int64_t", 8},       {"uint64_t", 8}, {"size_t", 8}, {"char", 1},        {"int8_t", 1},  {"uint8_t", 1},
      {"__nv_bfloat16", 2}, {"half", 2},     {"__half", 2}, {"nv_bfloat16", 2}, {"short", 2},   {"long", 8},
      {"void*", 8},         {"float2", 8},   {"float4", 16}};
  auto it = sizes.find(type);
  return it == sizes.end() ? 0 : it->second;
}

std::optional<int64_t> evaluate_integer(const std::string& expr, const std::map<std::string, int64_t>& constants) {
  LexResult lr = lex(expr);
  if (!lr.error.empty()) return std::nullopt;
  return IntegerExpression(code_tokens(lr.tokens), constants).value();
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
          if (t[k].text == "*" || t[k].text == "const" || element_size(t[k].text) != 0 || t[k].text == "void")
            cast = true;
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

}  // namespace braid::convert
