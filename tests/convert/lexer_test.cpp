#include <gtest/gtest.h>

#include "braid/convert/lexer.hpp"

using namespace braid::convert;

namespace {
std::vector<std::string> texts(const std::vector<Token>& t) {
  std::vector<std::string> out;
  for (auto& x : t) out.push_back(x.text);
  return out;
}
}  // namespace

TEST(Lexer, CommentsStringsAndCharsAreSingleTokens) {
  LexResult r = lex(
      "int a = 1; // ncclSend(x)\n/* ncclRecv(\n y) */ const char* s = \"ncclAllReduce(\\\"q\\\")\"; char c = ';';\n");
  ASSERT_EQ(r.error, "");
  std::vector<Token> code = code_tokens(r.tokens);
  EXPECT_EQ(texts(code), (std::vector<std::string>{"int", "a", "=", "1", ";", "const", "char", "*", "s", "=",
                                                   "\"ncclAllReduce(\\\"q\\\")\"", ";", "char", "c", "=", "';'", ";"}));
  int comments = 0;
  for (auto& t : r.tokens) comments += t.kind == TokenKind::Comment;
  EXPECT_EQ(comments, 2);
  EXPECT_EQ(code[5].line, 3);  // `const` after the two-line block comment
}

TEST(Lexer, RawStringsWithDelimiters) {
  LexResult r = lex("auto s = R\"x(a )\" ncclSend( \n )x\"; int b;");
  ASSERT_EQ(r.error, "");
  std::vector<Token> code = code_tokens(r.tokens);
  ASSERT_GE(code.size(), 5u);
  EXPECT_EQ(code[3].kind, TokenKind::String);
  EXPECT_EQ(code[3].text, "R\"x(a )\" ncclSend( \n )x\"");
  EXPECT_EQ(code[5].text, "int");
  EXPECT_EQ(code[5].line, 2);
}

TEST(Lexer, PreprocessorLinesWithContinuations) {
  LexResult r = lex("#define CHECK(x) \\\n  do { x; } while (0)\n#include <nccl.h>\nint main() { return 0; }\n");
  ASSERT_EQ(r.error, "");
  ASSERT_EQ(r.tokens[0].kind, TokenKind::Preprocessor);
  EXPECT_NE(r.tokens[0].text.find("while (0)"), std::string::npos);
  EXPECT_EQ(r.tokens[1].kind, TokenKind::Preprocessor);
  EXPECT_EQ(r.tokens[1].line, 3);
  EXPECT_EQ(code_tokens(r.tokens).front().line, 4);
}

TEST(Lexer, KernelLaunchBracketsAndShifts) {
  LexResult r = lex("k<float><<<grid, 256, 0, s>>>(x, n << 2, m >> 1); a <<= 3;");
  ASSERT_EQ(r.error, "");
  std::vector<Token> code = code_tokens(r.tokens);
  int opens = 0, closes = 0, shifts = 0;
  for (auto& t : code) {
    opens += t.kind == TokenKind::LaunchOpen;
    closes += t.kind == TokenKind::LaunchClose;
    shifts += t.text == "<<" || t.text == ">>" || t.text == "<<=";
  }
  EXPECT_EQ(opens, 1);
  EXPECT_EQ(closes, 1);
  EXPECT_EQ(shifts, 3);
}

TEST(Lexer, NumbersWithSeparatorsSuffixesAndExponents) {
  LexResult r = lex("x = 1'000'000ull + 1.5e-3f + 0x1F;");
  ASSERT_EQ(r.error, "");
  std::vector<Token> code = code_tokens(r.tokens);
  EXPECT_EQ(code[2].text, "1'000'000ull");
  EXPECT_EQ(code[4].text, "1.5e-3f");
  EXPECT_EQ(code[6].text, "0x1F");
}

TEST(Lexer, UnterminatedConstructsAreErrorsWithLines) {
  EXPECT_EQ(lex("int a;\n/* open").error, "line 2: unterminated /* comment");
  EXPECT_EQ(lex("int a;\n\nconst char* s = \"abc\n\";").error_line, 3);
  EXPECT_NE(lex("auto s = R\"x(abc)y\";").error.find("unterminated raw string"), std::string::npos);
  EXPECT_NE(lex("int a = `b`;").error.find("unexpected character"), std::string::npos);
}

// Files written on Windows: a macro continued by backslash-CR-LF is one directive, and a splice
// in code or in a string is a splice, with lines counted alike.
TEST(Lexer, WindowsLineEndingsSpliceLikeNewlines) {
  const LexResult lr =
      lex("#define CHECK(c) do { \\\r\n  f(c); \\\r\n} while (0)\r\nint a = 1;\r\nconst char* s = \"x\\\r\ny\";\r\nint "
          "b;\r\n");
  ASSERT_EQ(lr.error, "");
  ASSERT_FALSE(lr.tokens.empty());
  EXPECT_EQ(lr.tokens[0].kind, TokenKind::Preprocessor);
  EXPECT_NE(lr.tokens[0].text.find("while (0)"), std::string::npos);
  const Token& b = lr.tokens.back().text == ";" ? lr.tokens[lr.tokens.size() - 2] : lr.tokens.back();
  EXPECT_EQ(b.text, "b");
  EXPECT_EQ(b.line, 7);
}
