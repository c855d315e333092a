#include "braid/convert/macros.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <functional>
#include <optional>
#include <set>

namespace braid::convert {
namespace {

bool ident_char(char c) { return std::isalnum((unsigned char)c) || c == '_'; }

// The directive's text with line splices joined: `#define A(x) \` + newline + `body` -> one line.
std::string joined_directive(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 1 < text.size() && (text[i + 1] == '\n' || text[i + 1] == '\r')) {
      i += text[i + 1] == '\r' && i + 2 < text.size() && text[i + 2] == '\n' ? 2 : 1;
      out += ' ';
      continue;
    }
    out += text[i];
  }
  return out;
}

// `#define` / `#undef` and the text after the keyword; "" for other directives.
std::pair<std::string, std::string> directive_keyword(const std::string& line) {
  std::size_t p = line.find_first_not_of(" \t", line.find('#') + 1);
  if (p == std::string::npos) return {};
  std::size_t e = p;
  while (e < line.size() && ident_char(line[e])) ++e;
  const std::string keyword = line.substr(p, e - p);
  if (keyword != "define" && keyword != "undef") return {};
  return {keyword, line.substr(e)};
}

// A #define's name, parameters and body from the text after `define`.
bool parse_definition(const std::string& rest, MacroDefinition& m) {
  std::size_t p = rest.find_first_not_of(" \t");
  if (p == std::string::npos) return false;
  std::size_t e = p;
  while (e < rest.size() && ident_char(rest[e])) ++e;
  if (e == p) return false;
  m.name = rest.substr(p, e - p);
  std::string body = rest.substr(e);
  if (e < rest.size() && rest[e] == '(') {  // function-like: no blank between the name and '('
    const std::size_t close = rest.find(')', e);
    if (close == std::string::npos) return false;
    m.function_like = true;
    std::string params = rest.substr(e + 1, close - e - 1);
    for (std::size_t b = 0; b <= params.size();) {
      std::size_t c = params.find(',', b);
      if (c == std::string::npos) c = params.size();
      std::string param = params.substr(b, c - b);
      param.erase(0, param.find_first_not_of(" \t"));
      param.erase(param.find_last_not_of(" \t") + 1);
      if (param == "...") m.variadic = true;
      else if (!param.empty()) m.params.push_back(param);
      b = c + 1;
    }
    body = rest.substr(close + 1);
  }
  m.body = code_tokens(lex(body).tokens);
  return true;
}

bool same_definition(const MacroDefinition& a, const MacroDefinition& b) {
  return a.function_like == b.function_like && a.variadic == b.variadic && a.params == b.params &&
         join_tokens(a.body) == join_tokens(b.body);
}

// Top-level comma-separated arguments between code[open] '(' and code[close] ')' (only parentheses nest).
std::vector<std::vector<Token>> split_macro_args(const std::vector<Token>& code, std::size_t open, std::size_t close) {
  std::vector<std::vector<Token>> out(1);
  int depth = 0;
  for (std::size_t i = open + 1; i < close; ++i) {
    const std::string& x = code[i].text;
    if (x == "," && depth == 0) {
      out.emplace_back();
      continue;
    }
    if (x == "(") ++depth;
    else if (x == ")") --depth;
    out.back().push_back(code[i]);
  }
  return out;
}

std::size_t close_paren(const std::vector<Token>& code, std::size_t open) {
  int depth = 0;
  for (std::size_t i = open; i < code.size(); ++i) {
    if (code[i].text == "(") ++depth;
    else if (code[i].text == ")" && --depth == 0) return i;
  }
  return code.size();
}

Token make_token(TokenKind kind, std::string text) {
  Token t;
  t.kind = kind;
  t.text = std::move(text);
  return t;
}

// One expansion: the tokens in, the macros that `expands` accepts replaced, recursively.
class Expander {
 public:
  Expander(const MacroTable& table, std::size_t offset, const MacroTable::Expands& expands)
      : table_(table), offset_(offset), expands_(expands) {}

  std::vector<Token> run(const std::vector<Token>& in, int depth) {
    std::vector<Token> out;
    if (depth > 32) {
      fail("expands more than 32 levels deep");
      return out;
    }
    for (std::size_t i = 0; i < in.size() && error_.empty(); ++i) {
      const Token& t = in[i];
      const MacroDefinition* m =
          t.kind == TokenKind::Identifier && !disabled(t.text) ? table_.at(t.text, offset_) : nullptr;
      const bool call = m && m->function_like && i + 1 < in.size() && in[i + 1].text == "(";
      if (!m || !expands_(*m) || (m->function_like && !call)) {
        out.push_back(t);
        continue;
      }
      if (m->ambiguous) {
        fail(
            fmt::format("`{}` is defined more than once with no #undef between (alternatives under #if): which "
                        "body applies depends on the build",
                        m->name));
        break;
      }
      std::vector<Token> body = m->body;
      if (call) {
        const std::size_t close = close_paren(in, i + 1);
        if (close >= in.size()) {
          fail(fmt::format("the use of `{}(` is not closed", m->name));
          break;
        }
        std::vector<std::vector<Token>> args = split_macro_args(in, i + 1, close);
        if (args.size() == 1 && args[0].empty() && m->params.empty()) args.clear();
        if (args.size() < m->params.size() || (!m->variadic && args.size() != m->params.size())) {
          fail(fmt::format("`{}` takes {} argument(s), the use passes {}", m->name, m->params.size(), args.size()));
          break;
        }
        body = substitute(*m, args, depth);
        i = close;
      }
      disabled_.push_back(m->name);
      for (Token& x : run(body, depth + 1)) out.push_back(std::move(x));
      disabled_.pop_back();
      if (out.size() > 100000) fail("expands to more than 100000 tokens");
    }
    return out;
  }

  const std::string& error() const { return error_; }

 private:
  bool disabled(const std::string& name) const {
    return std::find(disabled_.begin(), disabled_.end(), name) != disabled_.end();
  }
  void fail(const std::string& why) {
    if (error_.empty()) error_ = why;
  }

  // The argument a parameter name stands for; __VA_ARGS__ is the arguments past the named ones.
  std::optional<std::vector<Token>> argument(const MacroDefinition& m, const std::vector<std::vector<Token>>& args,
                                             const std::string& name) const {
    auto p = std::find(m.params.begin(), m.params.end(), name);
    if (p != m.params.end()) return args[(std::size_t)(p - m.params.begin())];
    if (!m.variadic || name != "__VA_ARGS__") return std::nullopt;
    std::vector<Token> rest;
    for (std::size_t k = m.params.size(); k < args.size(); ++k) {
      if (k > m.params.size()) rest.push_back(make_token(TokenKind::Punct, ","));
      rest.insert(rest.end(), args[k].begin(), args[k].end());
    }
    return rest;
  }

  // The body with parameters replaced: `#p` stringised, `p` next to `##` as written, other uses expanded.
  std::vector<Token> substitute(const MacroDefinition& m, const std::vector<std::vector<Token>>& args, int depth) {
    std::vector<Token> out;
    std::size_t glue = 0;  // out[glue - 1] and out[glue] are pasted once the right operand is in
    const std::vector<Token>& b = m.body;
    for (std::size_t j = 0; j < b.size(); ++j) {
      const auto arg = b[j].kind == TokenKind::Identifier ? argument(m, args, b[j].text) : std::nullopt;
      if (b[j].text == "#" && j + 1 < b.size()) {
        if (auto raw = argument(m, args, b[j + 1].text)) {
          std::string s;
          for (char c : join_tokens(*raw)) s += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
          out.push_back(make_token(TokenKind::String, "\"" + s + "\""));
          ++j;
          continue;
        }
      }
      if (b[j].text == "##") {
        glue = out.size();
        continue;
      }
      const bool pasted = (j > 0 && b[j - 1].text == "##") || (j + 1 < b.size() && b[j + 1].text == "##");
      if (arg) {
        const std::vector<Token> value = pasted ? *arg : run(*arg, depth + 1);
        out.insert(out.end(), value.begin(), value.end());
      } else {
        out.push_back(b[j]);
      }
      if (glue > 0 && glue < out.size()) {
        out[glue - 1].text += out[glue].text;
        if (out[glue - 1].kind != TokenKind::Identifier) out[glue - 1].kind = out[glue].kind;
        out.erase(out.begin() + (long)glue);
      }
      if (b[j].text != "##") glue = 0;
    }
    return out;
  }

  const MacroTable& table_;
  const std::size_t offset_;
  const MacroTable::Expands& expands_;
  std::vector<std::string> disabled_;  // macros being expanded: not expanded again inside themselves
  std::string error_;
};

}  // namespace

namespace {

// Whether a conditional branch is compiled: known from the macros defined so far, or not.
enum class Tri { No, Yes, Unknown };
Tri tri_not(Tri a) { return a == Tri::Unknown ? a : a == Tri::Yes ? Tri::No : Tri::Yes; }
Tri tri_and(Tri a, Tri b) {
  return a == Tri::No || b == Tri::No ? Tri::No : a == Tri::Yes && b == Tri::Yes ? Tri::Yes : Tri::Unknown;
}
Tri tri_or(Tri a, Tri b) {
  return a == Tri::Yes || b == Tri::Yes ? Tri::Yes : a == Tri::No && b == Tri::No ? Tri::No : Tri::Unknown;
}

// `#if`/`#elif` conditions made of defined(X), !, &&, ||, parentheses and 0/1; anything else
// (values, comparisons, a macro of a system header) is Unknown.
class Condition {
 public:
  Condition(const std::vector<Token>& t, const std::function<Tri(const std::string&)>& defined,
            const std::function<Tri(const std::string&)>& value)
      : t_(t), defined_(defined), value_(value) {}
  Tri run() {
    const Tri r = any();
    return i_ == t_.size() ? r : Tri::Unknown;
  }

 private:
  bool take(const char* x) {
    if (i_ < t_.size() && t_[i_].text == x) return ++i_, true;
    return false;
  }
  Tri any() {
    Tri r = all();
    while (take("||")) r = tri_or(r, all());
    return r;
  }
  Tri all() {
    Tri r = one();
    while (take("&&")) r = tri_and(r, one());
    return r;
  }
  Tri one() {
    if (i_ >= t_.size()) return Tri::Unknown;
    if (take("!")) return tri_not(one());
    if (take("(")) {
      const Tri r = any();
      return take(")") ? r : (i_ = t_.size(), Tri::Unknown);
    }
    if (take("defined")) {
      const bool paren = take("(");
      if (i_ >= t_.size() || t_[i_].kind != TokenKind::Identifier) return i_ = t_.size(), Tri::Unknown;
      const Tri r = defined_(t_[i_++].text);
      if (paren && !take(")")) i_ = t_.size();
      return r;
    }
    const Token& x = t_[i_++];
    if (x.kind == TokenKind::Number && (x.text == "0" || x.text == "1")) return x.text == "1" ? Tri::Yes : Tri::No;
    if (x.kind == TokenKind::Identifier && i_ == t_.size() && i_ == 1) return value_(x.text);  // `#if MULTI_GPU`
    i_ = t_.size();
    return Tri::Unknown;
  }
  const std::vector<Token>& t_;
  const std::function<Tri(const std::string&)>& defined_;
  const std::function<Tri(const std::string&)>& value_;  // a condition that is one macro's name: its 0/1 value
  std::size_t i_ = 0;
};

}  // namespace

MacroTable::MacroTable(const std::vector<Token>& all) {
  // #if/#ifdef/#elif/#else/#endif: a definition in a branch known not to be compiled is no
  // definition (`#ifdef USE_BF16 ... #else ... #endif` under -DUSE_BF16 keeps one body). A name
  // is known defined by a definition made outside unknown branches; an undefined name is unknown
  // (a system header may define it), so without the build's -D both bodies stay (ambiguous).
  struct Frame {
    Tri active, taken;
  };
  std::vector<Frame> frames;
  const auto compiled = [&] {
    Tri r = Tri::Yes;
    for (const Frame& f : frames) r = tri_and(r, f.active);
    return r;
  };
  const std::function<Tri(const std::string&)> defined = [&](const std::string& name) {
    for (const MacroDefinition& d : defs_)
      if (d.name == name && d.undefined_at == SIZE_MAX) return d.uncertain ? Tri::Unknown : Tri::Yes;
    return Tri::Unknown;
  };
  // `#if NAME` alone: NAME's value when it is known to be defined as 0 or 1 (`-DMULTI_GPU` is 1).
  const std::function<Tri(const std::string&)> value = [&](const std::string& name) {
    for (const MacroDefinition& d : defs_)
      if (d.name == name && d.undefined_at == SIZE_MAX && !d.uncertain && !d.function_like && d.body.size() == 1 &&
          (d.body[0].text == "0" || d.body[0].text == "1"))
        return d.body[0].text == "1" ? Tri::Yes : Tri::No;
    return Tri::Unknown;
  };
  // Code in a branch known not to be compiled (`#if 0`, the `#else` of a -D the build gives) is
  // no code: its byte ranges are kept so the analysis can drop its tokens.
  std::size_t skip_from = SIZE_MAX;
  const auto note_branch = [&](const Token& t) {
    const bool off = compiled() == Tri::No;
    if (off && skip_from == SIZE_MAX) skip_from = t.end;
    if (!off && skip_from != SIZE_MAX) {
      skipped_.push_back({skip_from, t.offset});
      skip_from = SIZE_MAX;
    }
  };
  for (const Token& t : all) {
    if (t.kind != TokenKind::Preprocessor) continue;
    const std::string line = joined_directive(t.text);
    const std::vector<Token> words = code_tokens(lex(line.substr(line.find('#') + 1)).tokens);
    const std::string kw = words.empty() ? "" : words[0].text;
    const std::vector<Token> cond(words.begin() + (words.empty() ? 0 : 1), words.end());
    if (kw == "if" || kw == "ifdef" || kw == "ifndef") {
      Tri c = kw == "if" ? Condition(cond, defined, value).run() : cond.empty() ? Tri::Unknown : defined(cond[0].text);
      if (kw == "ifndef") c = tri_not(c);
      frames.push_back(Frame{c, c});
      note_branch(t);
      continue;
    }
    if ((kw == "elif" || kw == "else") && !frames.empty()) {
      Frame& f = frames.back();
      const Tri c = kw == "else" ? Tri::Yes : Condition(cond, defined, value).run();
      f.active = tri_and(tri_not(f.taken), c);
      f.taken = tri_or(f.taken, c);
      note_branch(t);
      continue;
    }
    if (kw == "endif" && !frames.empty()) {
      frames.pop_back();
      note_branch(t);
      continue;
    }
    const Tri here = compiled();
    if (here == Tri::No) continue;
    const auto [keyword, rest] = directive_keyword(line);
    if (keyword == "undef") {
      std::string name = rest.substr(std::min(rest.size(), rest.find_first_not_of(" \t")));
      name =
          name.substr(0, std::find_if(name.begin(), name.end(), [](char c) { return !ident_char(c); }) - name.begin());
      for (MacroDefinition& d : defs_)
        if (d.name == name && d.undefined_at == SIZE_MAX) d.undefined_at = t.offset;
      continue;
    }
    MacroDefinition m;
    if (keyword != "define" || !parse_definition(rest, m)) continue;
    m.line = t.line;
    m.defined_at = t.offset;
    m.uncertain = here == Tri::Unknown;
    bool repeated = false;  // an identical redefinition is allowed and changes nothing
    for (MacroDefinition& d : defs_) {
      if (d.name != m.name || d.undefined_at != SIZE_MAX) continue;
      if (same_definition(d, m)) repeated = true;
      else d.ambiguous = m.ambiguous = true;
    }
    if (!repeated) defs_.push_back(std::move(m));
  }
  if (skip_from != SIZE_MAX) skipped_.push_back({skip_from, SIZE_MAX});  // an #if left open
  for (std::size_t i = 0; i < defs_.size(); ++i) by_name_[defs_[i].name].push_back(i);
}

std::vector<Token> MacroTable::compiled_only(const std::vector<Token>& code) const {
  if (skipped_.empty()) return code;
  std::vector<Token> out;
  std::size_t r = 0;
  for (const Token& t : code) {
    while (r < skipped_.size() && skipped_[r].second <= t.offset) ++r;
    if (r < skipped_.size() && skipped_[r].first <= t.offset) continue;
    out.push_back(t);
  }
  return out;
}

const MacroDefinition* MacroTable::at(const std::string& name, std::size_t offset) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return nullptr;
  for (std::size_t i : it->second)
    if (defs_[i].defined_at < offset && offset < defs_[i].undefined_at) return &defs_[i];
  return nullptr;
}

MacroExpansion MacroTable::expand_use(const std::vector<Token>& code, std::size_t i, const Expands& expands) const {
  MacroExpansion out;
  const MacroDefinition* m = at(code[i].text, code[i].offset);
  out.close = i;
  if (m && m->function_like) {
    out.close = i + 1 < code.size() && code[i + 1].text == "(" ? close_paren(code, i + 1) : code.size();
    if (out.close >= code.size()) {
      out.error = fmt::format("the use of `{}` has no closed argument list", code[i].text);
      return out;
    }
  }
  Expander e(*this, code[i].offset, expands);
  const std::vector<Token> result =
      e.run(std::vector<Token>(code.begin() + (long)i, code.begin() + (long)out.close + 1), 0);
  out.error = e.error();
  out.text = join_tokens(result);
  return out;
}

std::string MacroTable::expand_text(const std::string& text, std::size_t offset) const {
  const LexResult lr = lex(text);
  if (!lr.error.empty() || defs_.empty()) return text;
  const Expands all = [](const MacroDefinition&) { return true; };
  Expander e(*this, offset, all);
  const std::vector<Token> result = e.run(code_tokens(lr.tokens), 0);
  return e.error().empty() ? join_tokens(result) : text;
}

bool MacroTable::calls_any(const MacroDefinition& m, const std::vector<std::string>& names) const {
  std::set<std::string> seen;
  std::vector<const MacroDefinition*> pending = {&m};
  while (!pending.empty()) {
    const MacroDefinition* d = pending.back();
    pending.pop_back();
    if (!seen.insert(d->name).second) continue;
    // `#define AR ncclAllReduce`: the call's parentheses follow the use.
    if (!d->function_like && !d->body.empty() &&
        std::find(names.begin(), names.end(), d->body.back().text) != names.end())
      return true;
    for (std::size_t k = 0; k < d->body.size(); ++k) {
      const std::string& x = d->body[k].text;
      if (std::find(names.begin(), names.end(), x) != names.end() && k + 1 < d->body.size() &&
          d->body[k + 1].text == "(")
        return true;
      if (auto it = by_name_.find(x); it != by_name_.end() && d->body[k].kind == TokenKind::Identifier)
        for (std::size_t i : it->second) pending.push_back(&defs_[i]);
    }
  }
  return false;
}

std::string join_tokens(const std::vector<Token>& toks) {
  static const std::set<std::string> kTightBefore = {",", ")", "]", ";", ".", "->", "::"};
  static const std::set<std::string> kTightAfter = {"(", "[", ".", "->", "::", "!", "~"};
  static const std::set<std::string> kKeywords = {"if", "for", "while", "switch", "return", "catch"};  // `if (`
  std::string out;
  for (std::size_t i = 0; i < toks.size(); ++i) {
    if (i > 0) {
      const Token& prev = toks[i - 1];
      const Token& cur = toks[i];
      bool tight =
          kTightBefore.count(cur.text) || kTightAfter.count(prev.text) ||
          ((cur.text == "(" || cur.text == "[") && prev.kind == TokenKind::Identifier && !kKeywords.count(prev.text));
      if (tight) {  // only where the two still read as the same two tokens
        const std::vector<Token> relexed = code_tokens(lex(prev.text + cur.text).tokens);
        tight = relexed.size() == 2 && relexed[0].text == prev.text && relexed[1].text == cur.text;
      }
      if (!tight) out += ' ';
    }
    out += toks[i].text;
  }
  return out;
}

}  // namespace braid::convert
