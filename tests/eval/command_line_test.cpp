#include "braid/util/command_line.hpp"

#include <gtest/gtest.h>

#include "braid/eval/diagnostics.hpp"

namespace braid {
namespace {

using Words = std::vector<std::string>;

TEST(CommandLine, SplitsLikeAShell) {
  EXPECT_EQ(*split_command_words("g++ -O2  -o {artifact}\t{program}"), (Words{"g++", "-O2", "-o", "{artifact}", "{program}"}));
  EXPECT_EQ(*split_command_words(R"(run 'a b' "c \"d\"" e\ f '')"), (Words{"run", "a b", "c \"d\"", "e f", ""}));
  EXPECT_EQ(*split_command_words(R"(x "it's" 'say "hi"')"), (Words{"x", "it's", "say \"hi\""}));
  std::string error;
  EXPECT_FALSE(split_command_words("echo 'open", &error));
  EXPECT_NE(error.find("unterminated single quote"), std::string::npos);
  EXPECT_FALSE(split_command_words("   ", &error));
  EXPECT_EQ(error, "empty command");
}

TEST(CommandLine, PlaceholdersStayInsideTheirWord) {
  EXPECT_EQ(placeholders_in("{artifact} --seed {seed} {{literal}}"), (Words{"artifact", "seed"}));
  std::map<std::string, std::string> values = {{"artifact", "/tmp/with space/p.out"}, {"seed", "7"}};
  EXPECT_EQ(command_argv("{artifact} --seed={seed} {{x}} {unknown}", values),
            (Words{"/tmp/with space/p.out", "--seed=7", "{x}", "{unknown}"}));
}

TEST(Diagnostics, KeepsFirstErrorsAndDropsNotes) {
  const std::string out =
      "In file included from /work/gen_3/program.cpp:2:\n"
      "/work/gen_3/program.cpp: In function 'void matmul_kernel(const float*, const float*, float*, int, float*)':\n"
      "/work/gen_3/program.cpp:40:3: error: 'undeclared_name' was not declared in this scope\n"
      "   40 |   undeclared_name(C);\n"
      "      |   ^~~~~~~~~~~~~~~\n"
      "/usr/include/c++/12/bits/stl_algo.h:100:5: note: candidate: 'template<class T> void f(T)'\n"
      "  100 |     f(T x)\n"
      "      |     ^\n"
      "/work/gen_3/program.cpp:41:10: warning: unused variable 'q' [-Wunused-variable]\n"
      "   41 |   int q;\n"
      "/work/gen_3/program.cpp:42:5: error: expected ';' before '}' token\n"
      "   42 |   x = 1\n"
      "      |        ^\n"
      "      |        ;\n";
  std::string trimmed = trim_compiler_errors(out, "/work/gen_3/program.cpp", "program.cpp");
  EXPECT_EQ(trimmed,
            "program.cpp:40:3: error: 'undeclared_name' was not declared in this scope\n"
            "   40 |   undeclared_name(C);\n"
            "      |   ^~~~~~~~~~~~~~~\n"
            "program.cpp:42:5: error: expected ';' before '}' token\n"
            "   42 |   x = 1\n"
            "      |        ^\n"
            "      |        ;\n");
}

TEST(Diagnostics, CapsManyErrorsAndBytes) {
  std::string out;
  for (int i = 1; i <= 50; ++i)
    out += "p.cu(" + std::to_string(i) + "): error: identifier \"x" + std::to_string(i) + "\" is undefined\n" +
           std::string(300, 'y') + "\n";
  std::string trimmed = trim_compiler_errors(out, "", "", 4, 3072);
  EXPECT_NE(trimmed.find("p.cu(1): error"), std::string::npos);
  EXPECT_NE(trimmed.find("p.cu(4): error"), std::string::npos);
  EXPECT_EQ(trimmed.find("p.cu(5): error"), std::string::npos);
  std::string small = trim_compiler_errors(out, "", "", 50, 1000);
  EXPECT_LE(small.size(), 1000u);
  EXPECT_NE(small.find("[... trimmed ...]"), std::string::npos);
}

TEST(Diagnostics, LinkerErrorsFallBackToMentions) {
  const std::string out =
      "/usr/bin/ld: /tmp/ccX.o: in function `main':\n"
      "program.cpp:(.text+0x1c): undefined reference to `missing_function()'\n"
      "collect2: error: ld returned 1 exit status\n";
  std::string trimmed = trim_compiler_errors(out);
  EXPECT_NE(trimmed.find("undefined reference to `missing_function()'"), std::string::npos);
  EXPECT_NE(trimmed.find("ld returned 1"), std::string::npos);
  EXPECT_EQ(trimmed.find("in function `main'"), std::string::npos);
}

TEST(Diagnostics, TailAndReplace) {
  EXPECT_EQ(replace_all("a/x/b/x", "/x", "Y"), "aY/bY");
  std::string text;
  for (int i = 0; i < 100; ++i) text += "line " + std::to_string(i) + "\n";
  std::string tail = tail_text(text, 40);
  EXPECT_EQ(tail.rfind("[...]\n", 0), 0u);
  EXPECT_NE(tail.find("line 99\n"), std::string::npos);
  EXPECT_EQ(tail_text("short", 40), "short");
}

}  // namespace
}  // namespace braid
