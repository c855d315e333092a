#include "braid/convert/lexer.hpp"

#include <cctype>
#include <cstring>

namespace braid::convert {
namespace {

bool ident_start(char c) { return std::isalpha((unsigned char)c) || c == '_'; }
bool ident_char(char c) { return std::isalnum((unsigned char)c) || c == '_'; }

// Longest first, so that `<<=` is not split into `<<` `=`.
const char* const kPuncts[] = {"<<<", ">>>", "<<=", ">>=", "...", "->*", "<=>", "::", "->", "++", "--", "<<", ">>", "<=", ">=",
                               "==", "!=", "&&", "||", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", ".*", "##"};

// A string literal prefix (u8, u, U, L) immediately followed by a quote or R".
bool is_string_prefix(const std::string& id) { return id == "u8" || id == "u" || id == "U" || id == "L"; }

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

LexResult lex(const std::string& s) {
  LexResult out;
  std::size_t i = 0, n = s.size();
  int line = 1;
  bool line_start = true;  // only whitespace since the last newline: `#` starts a directive
  auto fail = [&](int at, const std::string& what) {
    out.error = "line " + std::to_string(at) + ": " + what;
    out.error_line = at;
  };
  auto push = [&](TokenKind k, std::size_t b, std::size_t e, int l) {
    out.tokens.push_back(Token{k, s.substr(b, e - b), l, b, e});
  };
  while (i < n) {
    char c = s[i];
    if (c == '\n') {
      ++line;
      line_start = true;
      ++i;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
      ++i;
      continue;
    }
    if (c == '\\' && i + 1 < n && s[i + 1] == '\n') {  // line splice outside a directive
      i += 2;
      ++line;
      continue;
    }
    const std::size_t b = i;
    const int l = line;
    if (c == '/' && i + 1 < n && s[i + 1] == '/') {
      while (i < n && s[i] != '\n') ++i;
      push(TokenKind::Comment, b, i, l);
      continue;
    }
    if (c == '/' && i + 1 < n && s[i + 1] == '*') {
      i += 2;
      while (i + 1 < n && !(s[i] == '*' && s[i + 1] == '/')) {
        if (s[i] == '\n') ++line;
        ++i;
      }
      if (i + 1 >= n) {
        fail(l, "unterminated /* comment");
        return out;
      }
      i += 2;
      push(TokenKind::Comment, b, i, l);
      continue;
    }
    if (c == '#' && line_start) {
      // A directive runs to the end of the line, continued by backslash-newline; comments in it
      // end it for our purposes only at the newline.
      while (i < n && s[i] != '\n') {
        if (s[i] == '\\' && i + 1 < n && s[i + 1] == '\n') {
          ++line;
          i += 2;
          continue;
        }
        if (s[i] == '/' && i + 1 < n && s[i + 1] == '*') {
          i += 2;
          while (i + 1 < n && !(s[i] == '*' && s[i + 1] == '/')) {
            if (s[i] == '\n') ++line;
            ++i;
          }
          i = i + 2 > n ? n : i + 2;
          continue;
        }
        ++i;
      }
      push(TokenKind::Preprocessor, b, i, l);
      continue;
    }
    line_start = false;
    if (ident_start(c)) {
      while (i < n && ident_char(s[i])) ++i;
      std::string id = s.substr(b, i - b);
      // Raw string: R"delim( ... )delim", optionally prefixed.
      bool raw = (id == "R" || id == "u8R" || id == "uR" || id == "UR" || id == "LR") && i < n && s[i] == '"';
      if (raw) {
        std::size_t p = i + 1;
        while (p < n && s[p] != '(' && s[p] != '\n' && p - i <= 17) ++p;
        if (p >= n || s[p] != '(') {
          fail(l, "malformed raw string delimiter");
          return out;
        }
        const std::string close = ")" + s.substr(i + 1, p - i - 1) + "\"";
        std::size_t e = s.find(close, p + 1);
        if (e == std::string::npos) {
          fail(l, "unterminated raw string");
          return out;
        }
        for (std::size_t k = i; k < e; ++k)
          if (s[k] == '\n') ++line;
        i = e + close.size();
        push(TokenKind::String, b, i, l);
        continue;
      }
      if (is_string_prefix(id) && i < n && (s[i] == '"' || s[i] == '\'')) {
        c = s[i];  // fall through to the quoted literal below, keeping the prefix in the token
      } else {
        push(TokenKind::Identifier, b, i, l);
        continue;
      }
    }
    if (c == '"' || c == '\'') {
      const char q = s[i];
      ++i;
      while (i < n && s[i] != q) {
        if (s[i] == '\\' && i + 1 < n) {
          if (s[i + 1] == '\n') ++line;
          i += 2;
          continue;
        }
        if (s[i] == '\n') {
          fail(l, q == '"' ? "unterminated string literal" : "unterminated character literal");
          return out;
        }
        ++i;
      }
      if (i >= n) {
        fail(l, q == '"' ? "unterminated string literal" : "unterminated character literal");
        return out;
      }
      ++i;
      push(q == '"' ? TokenKind::String : TokenKind::Char, b, i, l);
      continue;
    }
    if (std::isdigit((unsigned char)c) || (c == '.' && i + 1 < n && std::isdigit((unsigned char)s[i + 1]))) {
      // pp-number: digits, letters, dots, digit separators, exponent signs.
      ++i;
      while (i < n) {
        char d = s[i];
        if (ident_char(d) || d == '.') {
          ++i;
        } else if (d == '\'' && i + 1 < n && std::isalnum((unsigned char)s[i + 1])) {
          i += 2;
        } else if ((d == '+' || d == '-') && (s[i - 1] == 'e' || s[i - 1] == 'E' || s[i - 1] == 'p' || s[i - 1] == 'P')) {
          ++i;
        } else {
          break;
        }
      }
      push(TokenKind::Number, b, i, l);
      continue;
    }
    bool matched = false;
    for (const char* p : kPuncts) {
      const std::size_t len = std::strlen(p);
      if (s.compare(i, len, p) == 0) {
        i += len;
        TokenKind k = TokenKind::Punct;
        if (std::strcmp(p, "<<<") == 0) k = TokenKind::LaunchOpen;
        if (std::strcmp(p, ">>>") == 0) k = TokenKind::LaunchClose;
        push(k, b, i, l);
        matched = true;
        break;
      }
    }
    if (matched) continue;
    if (std::strchr("{}[]()<>;:,.?~!+-*/%^&|=#", c) != nullptr) {
      ++i;
      push(TokenKind::Punct, b, i, l);
      continue;
    }
    if ((unsigned char)c >= 0x80) {  // UTF-8 in identifiers is not used by CUDA code; a NUL-free
      ++i;                            // multi-byte sequence outside strings is passed through
      continue;
    }
    fail(l, std::string("unexpected character '") + c + "'");
    return out;
  }
  return out;
}

std::vector<Token> code_tokens(const std::vector<Token>& all) {
  std::vector<Token> out;
  out.reserve(all.size());
  for (const Token& t : all)
    if (t.kind != TokenKind::Comment && t.kind != TokenKind::Preprocessor) out.push_back(t);
  return out;
}

}  // namespace braid::convert
