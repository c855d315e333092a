#include "braid/convert/lexer.hpp"

#include <cctype>
#include <cstring>

namespace braid::convert {
namespace {

bool ident_start(char c) { return std::isalpha((unsigned char)c) || c == '_'; }
bool ident_char(char c) { return std::isalnum((unsigned char)c) || c == '_'; }

// Longest first, so that `<<=` is not split into `<<` `=`.
const char* const kPuncts[] = {"<<<", ">>>", "<<=", ">>=", "...", "->*", "<=>", "::", "->", "++",
                               "--",  "<<",  ">>",  "<=",  ">=",  "==",  "!=",  "&&", "||", "+=",
                               "-=",  "*=",  "/=",  "%=",  "&=",  "|=",  "^=",  ".*", "##"};

// A string literal prefix (u8, u, U, L) immediately followed by a quote or R".
bool is_string_prefix(const std::string& id) { return id == "u8" || id == "u" || id == "U" || id == "L"; }

// One pass over the source: each step reads one token (or skips blanks) at the current position
// and says whether it applied; a failure stops the pass with the error in the result.
class Lexer {
 public:
  explicit Lexer(const std::string& s) : s_(s), n_(s.size()) {}

  LexResult run() {
    while (i_ < n_ && !failed()) {
      if (skip_blank()) continue;
      const std::size_t b = i_;
      const int l = line_;
      if (comment(b, l) || directive(b, l)) continue;
      line_start_ = false;
      if (!word_or_literal(b, l) && !number(b, l) && !punctuation(b, l)) unexpected(l);
    }
    return std::move(out_);
  }

 private:
  bool failed() const { return !out_.error.empty(); }

  void fail(int at, const std::string& what) {
    out_.error = "line " + std::to_string(at) + ": " + what;
    out_.error_line = at;
  }

  // Length of a line splice at i: backslash-newline, or backslash-CR-LF (files written on Windows);
  // 0 when there is none.
  std::size_t splice_at(std::size_t i) const {
    if (i >= n_ || s_[i] != '\\') return 0;
    if (i + 1 < n_ && s_[i + 1] == '\n') return 2;
    if (i + 2 < n_ && s_[i + 1] == '\r' && s_[i + 2] == '\n') return 3;
    return 0;
  }

  void push(TokenKind k, std::size_t b, std::size_t e, int l) {
    out_.tokens.push_back(Token{k, s_.substr(b, e - b), l, b, e});
  }

  // Whitespace, newlines and line splices outside a directive.
  bool skip_blank() {
    const char c = s_[i_];
    if (c == '\n') {
      ++line_;
      line_start_ = true;
      ++i_;
      return true;
    }
    if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
      ++i_;
      return true;
    }
    if (const std::size_t splice = splice_at(i_)) {  // line splice outside a directive
      i_ += splice;
      ++line_;
      return true;
    }
    return false;
  }

  // Moves past `/* ... */` from its opening, counting lines; false when it is not closed.
  bool skip_block_comment() {
    i_ += 2;
    while (i_ + 1 < n_ && !(s_[i_] == '*' && s_[i_ + 1] == '/')) {
      if (s_[i_] == '\n') ++line_;
      ++i_;
    }
    if (i_ + 1 >= n_) return false;
    i_ += 2;
    return true;
  }

  // `// ...` to the end of the line, or `/* ... */`. Comments keep line_start_: a directive may follow.
  bool comment(std::size_t b, int l) {
    if (s_[i_] != '/' || i_ + 1 >= n_) return false;
    if (s_[i_ + 1] == '/') {
      while (i_ < n_ && s_[i_] != '\n') ++i_;
      push(TokenKind::Comment, b, i_, l);
      return true;
    }
    if (s_[i_ + 1] != '*') return false;
    if (!skip_block_comment()) {
      fail(l, "unterminated /* comment");
      return true;
    }
    push(TokenKind::Comment, b, i_, l);
    return true;
  }

  bool directive(std::size_t b, int l) {
    if (s_[i_] != '#' || !line_start_) return false;
    // A directive runs to the end of the line, continued by backslash-newline; comments in it
    // end it for our purposes only at the newline.
    while (i_ < n_ && s_[i_] != '\n') {
      if (const std::size_t splice = splice_at(i_)) {
        ++line_;
        i_ += splice;
        continue;
      }
      if (s_[i_] == '/' && i_ + 1 < n_ && s_[i_ + 1] == '*') {
        if (!skip_block_comment()) i_ = n_;
        continue;
      }
      ++i_;
    }
    push(TokenKind::Preprocessor, b, i_, l);
    return true;
  }

  // An identifier, a raw string (R"delim(...)delim", optionally prefixed) or a quoted literal
  // (with its u8/u/U/L prefix in the token).
  bool word_or_literal(std::size_t b, int l) {
    const char c = s_[i_];
    if (c == '"' || c == '\'') return quoted(b, l);
    if (!ident_start(c)) return false;
    while (i_ < n_ && ident_char(s_[i_])) ++i_;
    const std::string id = s_.substr(b, i_ - b);
    const bool raw = (id == "R" || id == "u8R" || id == "uR" || id == "UR" || id == "LR") && i_ < n_ && s_[i_] == '"';
    if (raw) return raw_string(b, l);
    if (is_string_prefix(id) && i_ < n_ && (s_[i_] == '"' || s_[i_] == '\'')) return quoted(b, l);
    push(TokenKind::Identifier, b, i_, l);
    return true;
  }

  // From the opening quote after R: to the closing )delim".
  bool raw_string(std::size_t b, int l) {
    std::size_t p = i_ + 1;
    while (p < n_ && s_[p] != '(' && s_[p] != '\n' && p - i_ <= 17) ++p;
    if (p >= n_ || s_[p] != '(') {
      fail(l, "malformed raw string delimiter");
      return true;
    }
    const std::string close = ")" + s_.substr(i_ + 1, p - i_ - 1) + "\"";
    std::size_t e = s_.find(close, p + 1);
    if (e == std::string::npos) {
      fail(l, "unterminated raw string");
      return true;
    }
    for (std::size_t k = i_; k < e; ++k)
      if (s_[k] == '\n') ++line_;
    i_ = e + close.size();
    push(TokenKind::String, b, i_, l);
    return true;
  }

  // From the opening quote: a string or character literal, escapes and spliced lines included.
  bool quoted(std::size_t b, int l) {
    const char q = s_[i_];
    const char* unterminated = q == '"' ? "unterminated string literal" : "unterminated character literal";
    ++i_;
    while (i_ < n_ && s_[i_] != q) {
      if (const std::size_t splice = splice_at(i_)) {
        ++line_;
        i_ += splice;
        continue;
      }
      if (s_[i_] == '\\' && i_ + 1 < n_) {
        i_ += 2;
        continue;
      }
      if (s_[i_] == '\n') {
        fail(l, unterminated);
        return true;
      }
      ++i_;
    }
    if (i_ >= n_) {
      fail(l, unterminated);
      return true;
    }
    ++i_;
    push(q == '"' ? TokenKind::String : TokenKind::Char, b, i_, l);
    return true;
  }

  // pp-number: digits, letters, dots, digit separators, exponent signs.
  bool number(std::size_t b, int l) {
    const char c = s_[i_];
    if (!(std::isdigit((unsigned char)c) || (c == '.' && i_ + 1 < n_ && std::isdigit((unsigned char)s_[i_ + 1]))))
      return false;
    ++i_;
    while (i_ < n_) {
      char d = s_[i_];
      if (ident_char(d) || d == '.') {
        ++i_;
      } else if (d == '\'' && i_ + 1 < n_ && std::isalnum((unsigned char)s_[i_ + 1])) {
        i_ += 2;
      } else if ((d == '+' || d == '-') &&
                 (s_[i_ - 1] == 'e' || s_[i_ - 1] == 'E' || s_[i_ - 1] == 'p' || s_[i_ - 1] == 'P')) {
        ++i_;
      } else {
        break;
      }
    }
    push(TokenKind::Number, b, i_, l);
    return true;
  }

  // Multi-character punctuators (`<<<` and `>>>` are kernel launch brackets), then single ones;
  // a UTF-8 byte outside strings is passed over.
  bool punctuation(std::size_t b, int l) {
    for (const char* p : kPuncts) {
      const std::size_t len = std::strlen(p);
      if (s_.compare(i_, len, p) != 0) continue;
      i_ += len;
      TokenKind k = TokenKind::Punct;
      if (std::strcmp(p, "<<<") == 0) k = TokenKind::LaunchOpen;
      if (std::strcmp(p, ">>>") == 0) k = TokenKind::LaunchClose;
      push(k, b, i_, l);
      return true;
    }
    const char c = s_[i_];
    if (std::strchr("{}[]()<>;:,.?~!+-*/%^&|=#", c) != nullptr) {
      ++i_;
      push(TokenKind::Punct, b, i_, l);
      return true;
    }
    if ((unsigned char)c >= 0x80) {  // UTF-8 in identifiers is not used by CUDA code; a NUL-free
      ++i_;                          // multi-byte sequence outside strings is passed through
      return true;
    }
    return false;
  }

  void unexpected(int l) { fail(l, std::string("unexpected character '") + s_[i_] + "'"); }

  const std::string& s_;
  const std::size_t n_;
  std::size_t i_ = 0;
  int line_ = 1;
  bool line_start_ = true;  // only whitespace since the last newline: `#` starts a directive
  LexResult out_;
};

}  // namespace

const char* token_kind_name(TokenKind k) {
  switch (k) {
    case TokenKind::Identifier: return "identifier";
    case TokenKind::Number: return "number";
    case TokenKind::String: return "string";
    case TokenKind::Char: return "char";
    case TokenKind::Punct: return "punct";
    case TokenKind::Preprocessor: return "preprocessor";
    case TokenKind::Comment: return "comment";
    case TokenKind::LaunchOpen: return "launch_open";
    case TokenKind::LaunchClose: return "launch_close";
  }
  return "?";
}

LexResult lex(const std::string& s) { return Lexer(s).run(); }

std::vector<Token> code_tokens(const std::vector<Token>& all) {
  std::vector<Token> out;
  out.reserve(all.size());
  for (const Token& t : all)
    if (t.kind != TokenKind::Comment && t.kind != TokenKind::Preprocessor) out.push_back(t);
  return out;
}

}  // namespace braid::convert
