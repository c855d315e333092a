#include "braid/program/constraint.hpp"

#include <gtest/gtest.h>

namespace braid {
namespace {

bool holds(std::string_view expr, const std::map<std::string, std::string>& values = {},
           const std::vector<std::string>& symbols = {}) {
  ConstraintCheck c = evaluate_constraint(expr, values, symbols);
  EXPECT_TRUE(c.ok()) << expr << ": " << c.error;
  return c.holds;
}

std::string error_of(std::string_view expr, const std::map<std::string, std::string>& values = {}) {
  ConstraintCheck c = evaluate_constraint(expr, values);
  EXPECT_FALSE(c.ok()) << expr;
  EXPECT_FALSE(c.holds);
  return c.error;
}

TEST(Constraint, Arithmetic) {
  EXPECT_TRUE(holds("2 + 3 * 4 == 14"));
  EXPECT_TRUE(holds("(2 + 3) * 4 == 20"));
  EXPECT_TRUE(holds("7 / 2 == 3"));
  EXPECT_TRUE(holds("7 % 3 == 1"));
  EXPECT_TRUE(holds("-7 / 2 == -3"));
  EXPECT_TRUE(holds("10 - 2 - 3 == 5"));
  EXPECT_TRUE(holds("--4 == 4"));
  EXPECT_FALSE(holds("0"));
  EXPECT_TRUE(holds("5"));
}

TEST(Constraint, ComparisonsOverKnobs) {
  std::map<std::string, std::string> v{{"kChunks", "8"}, {"kCommCtas", "16"}};
  EXPECT_TRUE(holds("kChunks * kCommCtas <= 132", v));
  EXPECT_FALSE(holds("kChunks * kCommCtas < 128", v));
  EXPECT_TRUE(holds("kChunks * kCommCtas >= 128", v));
  EXPECT_TRUE(holds("kChunks != kCommCtas", v));
  EXPECT_TRUE(holds("kCommCtas > kChunks", v));
  EXPECT_TRUE(holds("kCommCtas % kChunks == 0", v));
}

TEST(Constraint, Logic) {
  std::map<std::string, std::string> v{{"a", "2"}, {"b", "0"}, {"push", "true"}, {"pull", "False"}};
  EXPECT_TRUE(holds("a > 1 && b < 1", v));
  EXPECT_TRUE(holds("a > 5 || !b", v));
  EXPECT_FALSE(holds("!(a > 1)", v));
  EXPECT_TRUE(holds("push && !pull", v));
  EXPECT_TRUE(holds("push == true && pull == false", v));
  EXPECT_TRUE(holds("a > 5 || b == 0 && push", v));   // && binds tighter than ||
  EXPECT_FALSE(holds("(a > 5 || b == 0) && pull", v));
  // Python spellings; `not` binds looser than comparison.
  EXPECT_TRUE(holds("not a == 3 and b == 0 or pull", v));
  EXPECT_TRUE(holds("push and not pull", v));
}

TEST(Constraint, ShortCircuitSkipsDivisionByZero) {
  std::map<std::string, std::string> v{{"kA", "8"}, {"kB", "0"}};
  EXPECT_FALSE(holds("kB != 0 && kA / kB > 2", v));
  EXPECT_TRUE(holds("kB == 0 || kA / kB > 2", v));
  EXPECT_EQ(error_of("kA / kB > 2", v), "division by zero");
  EXPECT_EQ(error_of("kA % kB > 2", v), "division by zero");
}

TEST(Constraint, Enums) {
  std::map<std::string, std::string> v{{"kS", "Strategy::Serial"}, {"kChunks", "4"}, {"kMode", "Ring"},
                                       {"ALGO", "'tree'"}, {"kPy", "Algo.RING"}};
  EXPECT_TRUE(holds("kS == Strategy::Serial", v));
  EXPECT_FALSE(holds("kS != Strategy::Serial", v));
  EXPECT_TRUE(holds("kS == Strategy::Pipelined || kChunks <= 4", v));
  EXPECT_TRUE(holds("kS != Strategy::Pipelined && kChunks == 4", v));
  EXPECT_TRUE(holds("kPy == Algo.RING", v));
  EXPECT_TRUE(holds("ALGO == \"tree\"", v));  // quotes are normalized
  EXPECT_TRUE(holds("kMode == Ring", v, {"Ring", "Tree"}));
  EXPECT_EQ(error_of("kMode == Tree", v), "unknown name 'Tree' (not a knob)");
}

TEST(Constraint, BadExpressions) {
  std::map<std::string, std::string> v{{"kA", "2"}, {"kS", "Strategy::Serial"}};
  EXPECT_EQ(error_of("", v), "empty expression");
  EXPECT_EQ(error_of("kA *", v), "expression ends too early");
  EXPECT_EQ(error_of("(kA + 1", v), "missing ')' at column 8");
  EXPECT_EQ(error_of("kA 2", v), "unexpected '2' at column 4");
  EXPECT_EQ(error_of("kA @ 2", v), "unexpected character '@'");
  EXPECT_EQ(error_of("1 < kA < 3", v), "chained comparison at column 8: use && between comparisons");
  EXPECT_EQ(error_of("kS + 1", v), "operator + needs a number, got Strategy::Serial");
  EXPECT_EQ(error_of("kS < Strategy::Pipelined", v), "operator < needs a number, got Strategy::Serial");
  EXPECT_EQ(error_of("kS == 1", v), "cannot compare Strategy::Serial with the number 1");
  EXPECT_EQ(error_of("kS", v), "expression is the value Strategy::Serial, not a condition");
  EXPECT_EQ(error_of("kUnknown > 1", v), "unknown name 'kUnknown' (not a knob)");
  EXPECT_EQ(error_of("12abc > 1", v), "bad number '12abc'");
  EXPECT_EQ(error_of("kA == \"x", v), "unterminated string literal");
  EXPECT_EQ(error_of("and kA", v), "'and' needs an operand before it at column 1");
}

}  // namespace
}  // namespace braid
