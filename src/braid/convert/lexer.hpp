// A lexer for C++/CUDA source: enough of the language to follow calls and their arguments
// without being fooled by comments, strings, raw strings, character literals, preprocessor
// lines (with continuations) or kernel launches (`<<<` / `>>>` are single tokens).
#pragma once
#include <string>
#include <vector>

namespace braid::convert {

enum class TokenKind { Identifier, Number, String, Char, Punct, Preprocessor, Comment, LaunchOpen, LaunchClose };

struct Token {
  TokenKind kind = TokenKind::Punct;
  std::string text;
  int line = 0;            // 1-based line of the first character
  std::size_t offset = 0;  // byte offset of the first character in the source
  std::size_t end = 0;     // one past the last character
};

struct LexResult {
  std::vector<Token> tokens;  // every token including comments and preprocessor lines
  std::string error;          // "" or "line N: problem" (unterminated comment/string, stray byte)
  int error_line = 0;
};

LexResult lex(const std::string& source);

// Tokens without comments and preprocessor lines: what the analyzer walks.
std::vector<Token> code_tokens(const std::vector<Token>& all);

const char* token_kind_name(TokenKind k);

}  // namespace braid::convert
