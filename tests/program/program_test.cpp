#include "braid/program/program.hpp"

#include <gtest/gtest.h>

#include "sample_programs.hpp"

namespace braid {
namespace {

using testing::kCppProgram;
using testing::kPythonProgram;
using testing::kTwoBlockProgram;

std::string error_of(const std::string& text, const std::string& origin = "seed.cu") {
  Program p = Program::parse(text, origin);
  EXPECT_FALSE(p.ok()) << "expected a parse error for:\n" << text;
  return p.ok() ? std::string() : p.error()->message;
}

TEST(Program, ParsesCppBlockKnobsAndConstraint) {
  Program p = Program::parse(kCppProgram, "seed.cu");
  ASSERT_TRUE(p.ok()) << p.error()->message;
  ASSERT_EQ(p.blocks().size(), 1u);
  EXPECT_EQ(p.blocks()[0].name, "pipeline");
  EXPECT_EQ(p.blocks()[0].start_line, 4u);
  ASSERT_EQ(p.knobs().size(), 4u);

  const Knob* chunks = p.find_knob("kChunks");
  ASSERT_NE(chunks, nullptr);
  EXPECT_EQ(chunks->kind, KnobKind::Int);
  EXPECT_EQ(chunks->value, "4");
  EXPECT_EQ(chunks->domain, (std::vector<std::string>{"1", "2", "4", "8", "16"}));
  EXPECT_EQ(chunks->line, 5u);
  EXPECT_EQ(p.text().substr(chunks->value_offset, 1), "4");

  const Knob* strategy = p.find_knob("kStrategy");
  ASSERT_NE(strategy, nullptr);
  EXPECT_EQ(strategy->kind, KnobKind::Enum);
  EXPECT_EQ(strategy->value, "Strategy::Pipelined");
  EXPECT_EQ(strategy->domain, (std::vector<std::string>{"Strategy::Serial", "Strategy::Pipelined"}));

  const Knob* push = p.find_knob("kPush");
  ASSERT_NE(push, nullptr);
  EXPECT_EQ(push->kind, KnobKind::Bool);
  EXPECT_EQ(push->domain, (std::vector<std::string>{"true", "false"}));

  ASSERT_EQ(p.constraints().size(), 1u);
  EXPECT_EQ(p.constraints()[0].expr, "kChunks * kCommCtas <= 132");
  EXPECT_EQ(p.constraints()[0].line, 9u);
  EXPECT_EQ(p.find_knob("kMissing"), nullptr);
}

TEST(Program, BlockTextIsBetweenMarkers) {
  Program p = Program::parse(kCppProgram);
  ASSERT_TRUE(p.ok());
  std::string_view block = p.block_text(0);
  EXPECT_EQ(block.substr(0, 26), "constexpr int kChunks = 4;");
  EXPECT_EQ(block.substr(block.size() - 2), "}\n");
  EXPECT_EQ(block.find("EVOLVE-BLOCK"), std::string_view::npos);
  EXPECT_TRUE(p.block_text(5).empty());
}

TEST(Program, TwoNamedBlocks) {
  Program p = Program::parse(kTwoBlockProgram);
  ASSERT_TRUE(p.ok()) << p.error()->message;
  ASSERT_EQ(p.blocks().size(), 2u);
  EXPECT_EQ(p.blocks()[0].name, "setup");
  EXPECT_EQ(p.blocks()[1].name, "schedule");
  EXPECT_EQ(p.find_knob("kStreams")->block, 0u);
  EXPECT_EQ(p.find_knob("kTile")->block, 1u);
}

TEST(Program, UnnamedBlocksAreNumbered) {
  Program p = Program::parse("a\n// EVOLVE-BLOCK-START\nx\n// EVOLVE-BLOCK-END\nb\n// EVOLVE-BLOCK-START\n// EVOLVE-BLOCK-END\n");
  ASSERT_TRUE(p.ok()) << p.error()->message;
  ASSERT_EQ(p.blocks().size(), 2u);
  EXPECT_EQ(p.blocks()[0].name, "block0");
  EXPECT_EQ(p.blocks()[1].name, "block1");
  EXPECT_EQ(p.block_text(0), "x\n");
  EXPECT_EQ(p.block_text(1), "");
  EXPECT_TRUE(p.knobs().empty());
  EXPECT_EQ(p.knob_key(), "");
}

TEST(Program, PythonHashCommentsAndKnobs) {
  Program p = Program::parse(kPythonProgram, "workload.py");
  ASSERT_TRUE(p.ok()) << p.error()->message;
  ASSERT_EQ(p.knobs().size(), 3u);
  EXPECT_EQ(p.find_knob("K_CHUNKS")->kind, KnobKind::Int);
  const Knob* push = p.find_knob("USE_PUSH");
  EXPECT_EQ(push->kind, KnobKind::Bool);
  EXPECT_EQ(push->domain, (std::vector<std::string>{"True", "False"}));
  const Knob* algo = p.find_knob("ALGO");
  EXPECT_EQ(algo->kind, KnobKind::Enum);
  EXPECT_EQ(algo->value, "\"ring\"");
  ASSERT_EQ(p.constraints().size(), 1u);
  EXPECT_FALSE(p.violated_constraint({{"K_CHUNKS", "8"}, {"ALGO", "\"tree\""}}).has_value());
  EXPECT_TRUE(p.violated_constraint({{"K_CHUNKS", "8"}}).has_value());
}

TEST(Program, PythonAnnotatedKnob) {
  Program p = Program::parse("# EVOLVE-BLOCK-START\nK_TILE: int = 64  # braid:knob 32|64\n# EVOLVE-BLOCK-END\n", "w.py");
  ASSERT_TRUE(p.ok()) << p.error()->message;
  EXPECT_EQ(p.knobs()[0].name, "K_TILE");
  EXPECT_EQ(p.knobs()[0].value, "64");
  EXPECT_EQ(with_knobs(p, {{"K_TILE", "32"}}).text, "# EVOLVE-BLOCK-START\nK_TILE: int = 32  # braid:knob 32|64\n# EVOLVE-BLOCK-END\n");
}

TEST(Program, BlockCommentMarkersAndKnobs) {
  const std::string text =
      "int frozen = 1;\n"
      "/* EVOLVE-BLOCK-START kernel */\n"
      "constexpr int kUnroll = 2; /* braid:knob 1|2|4 */\n"
      "#pragma unroll\n"
      "for (;;) {}\n"
      "/* EVOLVE-BLOCK-END */\n";
  Program p = Program::parse(text);
  ASSERT_TRUE(p.ok()) << p.error()->message;
  EXPECT_EQ(p.blocks()[0].name, "kernel");
  ASSERT_EQ(p.knobs().size(), 1u);
  EXPECT_EQ(p.knobs()[0].domain, (std::vector<std::string>{"1", "2", "4"}));
}

TEST(Program, DashDashCommentsAndExplicitBoolDomain) {
  const std::string text =
      "-- EVOLVE-BLOCK-START\n"
      "local fast = false -- braid:knob true|false\n"
      "-- EVOLVE-BLOCK-END\n";
  Program p = Program::parse(text);
  ASSERT_TRUE(p.ok()) << p.error()->message;
  EXPECT_EQ(p.knobs()[0].name, "fast");
  EXPECT_EQ(p.knobs()[0].kind, KnobKind::Bool);
}

TEST(Program, ProseMentioningTagsIsNotAKnob) {
  const std::string text =
      "// Knobs are lines tagged braid:knob; see the README.\n"
      "// EVOLVE-BLOCK-START\n"
      "int x = 1;  // set by hand, not a braid:knob\n"
      "// EVOLVE-BLOCK-END\n";
  Program p = Program::parse(text);
  ASSERT_TRUE(p.ok()) << p.error()->message;
  EXPECT_TRUE(p.knobs().empty());
}

TEST(Program, DirectiveInBlockIsAnError) {
  std::string text = kCppProgram;
  text.replace(text.find("int run() {"), 0, "#define kChunks 3\n");
  std::string err = error_of(text);
  EXPECT_NE(err.find("seed.cu:10:"), std::string::npos) << err;
  EXPECT_NE(err.find("#define"), std::string::npos) << err;
  EXPECT_NE(err.find("'pipeline'"), std::string::npos) << err;

  std::string include = kCppProgram;
  include.replace(include.find("int run() {"), 0, "  #  include <vector>\n");
  EXPECT_NE(error_of(include).find("#include"), std::string::npos);

  std::string pragma = kCppProgram;
  pragma.replace(pragma.find("  for (int i"), 0, "  #pragma unroll\n");
  EXPECT_TRUE(Program::parse(pragma).ok());
}

TEST(Program, DirectivesOutsideBlocksAreFine) {
  Program p = Program::parse("#define N 4\n#if N > 2\n#endif\n// EVOLVE-BLOCK-START\nint x;\n// EVOLVE-BLOCK-END\n");
  EXPECT_TRUE(p.ok());
}

TEST(Program, MarkerErrors) {
  EXPECT_NE(error_of("// EVOLVE-BLOCK-START a\n// EVOLVE-BLOCK-START b\n// EVOLVE-BLOCK-END\n").find("seed.cu:2: nested"),
            std::string::npos);
  EXPECT_NE(error_of("int x;\n// EVOLVE-BLOCK-END\n").find("seed.cu:2: EVOLVE-BLOCK-END without"), std::string::npos);
  EXPECT_NE(error_of("int x;\n// EVOLVE-BLOCK-START a\nint y;\n").find("seed.cu:2: EVOLVE-BLOCK-START of block 'a' has no"),
            std::string::npos);
  EXPECT_NE(error_of("int main() { return 0; }\n").find("seed.cu: no EVOLVE-BLOCK"), std::string::npos);
  EXPECT_NE(error_of("// EVOLVE-BLOCK-START a\n// EVOLVE-BLOCK-END\n// EVOLVE-BLOCK-START a\n// EVOLVE-BLOCK-END\n")
                .find("named 'a'"),
            std::string::npos);
}

TEST(Program, KnobErrors) {
  auto with_line = [](const std::string& line) {
    return "int a;\n// EVOLVE-BLOCK-START\n" + line + "\n// EVOLVE-BLOCK-END\n";
  };
  std::string out_of_domain = error_of(with_line("constexpr int kChunks = 3;  // braid:knob 1|2|4"));
  EXPECT_EQ(out_of_domain, "seed.cu:3: knob kChunks = 3 is outside its domain 1|2|4");
  EXPECT_NE(error_of(with_line("constexpr int kChunks = 3;  // braid:knob")).find("has no domain"), std::string::npos);
  EXPECT_NE(error_of(with_line("constexpr int kChunks = 1;  // braid:knob 1||2")).find("empty value"), std::string::npos);
  EXPECT_NE(error_of(with_line("constexpr int kChunks = 1;  // braid:knob 1|2|1")).find("twice"), std::string::npos);
  EXPECT_NE(error_of(with_line("constexpr int kChunks;  // braid:knob 1|2")).find("knob line looks like"),
            std::string::npos);
  EXPECT_NE(error_of("int a;\n// EVOLVE-BLOCK-START\nconstexpr int kA = 1; // braid:knob 1|2\n"
                     "constexpr int kA = 2; // braid:knob 1|2\n// EVOLVE-BLOCK-END\n")
                .find("seed.cu:4: knob kA is declared twice"),
            std::string::npos);
  EXPECT_NE(error_of("constexpr int kA = 1; // braid:knob 1|2\n// EVOLVE-BLOCK-START\n// EVOLVE-BLOCK-END\n")
                .find("seed.cu:1: braid:knob outside every evolve block"),
            std::string::npos);
}

TEST(Program, ConstraintErrors) {
  std::string violated = kCppProgram;
  violated.replace(violated.find("<= 132"), 6, "<= 16");
  EXPECT_NE(error_of(violated).find("seed.cu:9: knob values violate braid:require kChunks * kCommCtas <= 16"),
            std::string::npos);
  std::string unknown = kCppProgram;
  unknown.replace(unknown.find("kCommCtas <= 132"), 9, "kCtas");
  EXPECT_NE(error_of(unknown).find("unknown name 'kCtas'"), std::string::npos);
  std::string empty = kCppProgram;
  empty.replace(empty.find("kChunks * kCommCtas <= 132"), 26, "");
  EXPECT_NE(error_of(empty).find("braid:require without an expression"), std::string::npos);
}

TEST(Program, KnobKeyIsSortedByName) {
  Program p = Program::parse(kCppProgram);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p.knob_key(), "kChunks=4;kCommCtas=8;kPush=true;kStrategy=Strategy::Pipelined");
  EXPECT_EQ(knob_key_of(p.knob_values()), p.knob_key());
}

TEST(Program, FingerprintCoversOnlyFrozenText) {
  Program parent = Program::parse(kCppProgram);
  std::string block_edit = kCppProgram;
  block_edit.replace(block_edit.find("total += i * kCommCtas;"), 23, "total += i;");
  Program child = Program::parse(block_edit);
  ASSERT_TRUE(child.ok());
  EXPECT_EQ(parent.frozen_fingerprint(), child.frozen_fingerprint());
  EXPECT_EQ(parent.frozen_fingerprint().size(), 16u);

  std::string frozen_edit = kCppProgram;
  frozen_edit.replace(frozen_edit.find("return 0;"), 9, "return 1;");
  EXPECT_NE(parent.frozen_fingerprint(), Program::parse(frozen_edit).frozen_fingerprint());

  // Moving a line across a marker changes what is frozen.
  std::string moved = kCppProgram;
  moved.replace(moved.find("// EVOLVE-BLOCK-END\n"), 20, "");
  moved.replace(moved.find("int main()"), 0, "// EVOLVE-BLOCK-END\n");
  Program moved_program = Program::parse(moved);
  ASSERT_TRUE(moved_program.ok());
  EXPECT_NE(parent.frozen_fingerprint(), moved_program.frozen_fingerprint());
}

TEST(Program, ViolatedConstraintUsesOverrides) {
  Program p = Program::parse(kCppProgram);
  EXPECT_FALSE(p.violated_constraint({}).has_value());
  EXPECT_FALSE(p.violated_constraint({{"kChunks", "16"}}).has_value());
  auto bad = p.violated_constraint({{"kChunks", "16"}, {"kCommCtas", "16"}});
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(*bad, "kChunks * kCommCtas <= 132");
  auto unevaluable = p.violated_constraint({{"kChunks", "Strategy::Serial"}});
  ASSERT_TRUE(unevaluable.has_value());
  EXPECT_NE(unevaluable->find("needs a number"), std::string::npos) << *unevaluable;
}

TEST(Program, WithKnobsChangesOnlyValueTokens) {
  Program p = Program::parse(kCppProgram, "seed.cu");
  EditResult r = with_knobs(p, {{"kChunks", "16"}, {"kStrategy", "Strategy::Serial"}, {"kPush", "false"}});
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_NE(r.text.find("constexpr int kChunks = 16;  // braid:knob 1|2|4|8|16\n"), std::string::npos);
  EXPECT_NE(r.text.find("constexpr Strategy kStrategy = Strategy::Serial;  // braid:knob"), std::string::npos);
  EXPECT_NE(r.text.find("constexpr bool kPush = false;  // braid:knob\n"), std::string::npos);
  Program child = Program::parse(r.text, "seed.cu");
  ASSERT_TRUE(child.ok()) << child.error()->message;
  EXPECT_EQ(child.knob_key(), "kChunks=16;kCommCtas=8;kPush=false;kStrategy=Strategy::Serial");
  EXPECT_EQ(child.frozen_fingerprint(), p.frozen_fingerprint());
  EXPECT_EQ(r.text.size(), kCppProgram.size() + 1 - 3 + 1);

  EXPECT_EQ(with_knobs(p, {{"kNope", "1"}}).error, "unknown knob kNope");
  EXPECT_EQ(with_knobs(p, {{"kChunks", "3"}}).error, "value 3 of knob kChunks is outside its domain 1|2|4|8|16");
  EXPECT_EQ(with_knobs(p, {}).text, kCppProgram);
}

TEST(Program, CrLfLines) {
  std::string text = "int a;\r\n// EVOLVE-BLOCK-START x\r\nconstexpr int kA = 2;  // braid:knob 1|2\r\n// EVOLVE-BLOCK-END\r\n";
  Program p = Program::parse(text);
  ASSERT_TRUE(p.ok()) << p.error()->message;
  EXPECT_EQ(p.blocks()[0].name, "x");
  EXPECT_EQ(p.knobs()[0].domain, (std::vector<std::string>{"1", "2"}));
}

}  // namespace
}  // namespace braid
