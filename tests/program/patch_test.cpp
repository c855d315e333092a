#include "braid/program/patch.hpp"

#include <gtest/gtest.h>

#include <random>
#include <sstream>

#include "sample_programs.hpp"

namespace braid {
namespace {

using testing::kCppProgram;
using testing::kTwoBlockProgram;

Program parent_of(const std::string& text) {
  Program p = Program::parse(text, "seed.cu");
  EXPECT_TRUE(p.ok()) << p.error()->message;
  return p;
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

// ------------------------------------------------------------------ diff

TEST(PatchDiff, ExactMatch) {
  Program parent = parent_of(kCppProgram);
  std::string patch =
      "<<<<<<< SEARCH\n"
      "constexpr int kChunks = 4;  // braid:knob 1|2|4|8|16\n"
      "=======\n"
      "constexpr int kChunks = 8;  // braid:knob 1|2|4|8|16\n"
      ">>>>>>> REPLACE\n";
  PatchOutcome out = apply_patch(parent, PatchType::Diff, patch);
  ASSERT_TRUE(out.ok()) << out.error;
  EXPECT_EQ(out.edits, 1);
  EXPECT_EQ(out.text, replaced(kCppProgram, "kChunks = 4;", "kChunks = 8;"));
}

TEST(PatchDiff, SeedStyleMarkers) {
  Program parent = parent_of(kCppProgram);
  std::string patch =
      "<<<< SEARCH\n"
      "    total += i * kCommCtas;\n"
      "==== REPLACE\n"
      "    total += 2 * i * kCommCtas;\n"
      ">>>>\n";
  PatchOutcome out = apply_patch(parent, PatchType::Diff, patch);
  ASSERT_TRUE(out.ok()) << out.error;
  EXPECT_NE(out.text.find("    total += 2 * i * kCommCtas;\n"), std::string::npos);
}

TEST(PatchDiff, WhitespaceTolerantMatchKeepsIndentation) {
  Program parent = parent_of(kCppProgram);
  // The answer lost the indentation and padded SEARCH with a blank line and trailing blanks.
  std::string patch =
      "<<<<<<< SEARCH\n"
      "\n"
      "for (int i = 0; i < kChunks; ++i) {   \n"
      "  total += i * kCommCtas;\n"
      "=======\n"
      "for (int i = kChunks - 1; i >= 0; --i) {\n"
      "  total += i * kCommCtas;\n"
      ">>>>>>> REPLACE\n";
  PatchOutcome out = apply_patch(parent, PatchType::Diff, patch);
  ASSERT_TRUE(out.ok()) << out.error;
  EXPECT_EQ(out.text, replaced(kCppProgram, "  for (int i = 0; i < kChunks; ++i) {\n    total",
                               "  for (int i = kChunks - 1; i >= 0; --i) {\n    total"));
}

TEST(PatchDiff, FencedAnswerWithProseAndSeveralEdits) {
  Program parent = parent_of(kCppProgram);
  std::string patch =
      "I will pipeline more aggressively and drop the push mode.\n\n"
      "```cpp\n"
      "<<<<<<< SEARCH\n"
      "constexpr int kChunks = 4;  // braid:knob 1|2|4|8|16\n"
      "=======\n"
      "constexpr int kChunks = 16;  // braid:knob 1|2|4|8|16\n"
      ">>>>>>> REPLACE\n"
      "```\n\n"
      "And then:\n"
      "```\n"
      "<<<<<<< SEARCH\n"
      "constexpr bool kPush = true;  // braid:knob\n"
      "=======\n"
      "constexpr bool kPush = false;  // braid:knob\n"
      ">>>>>>> REPLACE\n"
      "```\n"
      "This should reduce contention.\n";
  PatchOutcome out = apply_patch(parent, PatchType::Diff, patch);
  ASSERT_TRUE(out.ok()) << out.error;
  EXPECT_EQ(out.edits, 2);
  Program child = Program::parse(out.text);
  ASSERT_TRUE(child.ok());
  EXPECT_EQ(child.find_knob("kChunks")->value, "16");
  EXPECT_EQ(child.find_knob("kPush")->value, "false");
}

TEST(PatchDiff, LaterEditsSeeEarlierOnes) {
  Program parent = parent_of(kCppProgram);
  // The intermediate state (kCommCtas 32 with kChunks 4... then kChunks 2) is checked only at the end.
  std::string patch = make_diff({{"constexpr int kCommCtas = 8;  // braid:knob 4|8|16|32",
                                  "constexpr int kCommCtas = 32;  // braid:knob 4|8|16|32"},
                                 {"constexpr int kCommCtas = 32;  // braid:knob 4|8|16|32",
                                  "constexpr int kCommCtas = 16;  // braid:knob 4|8|16|32"}});
  PatchOutcome out = apply_patch(parent, PatchType::Diff, patch);
  ASSERT_TRUE(out.ok()) << out.error;
  EXPECT_EQ(Program::parse(out.text).find_knob("kCommCtas")->value, "16");
}

TEST(PatchDiff, UnchangedMarkerLinesAreAnchors) {
  Program parent = parent_of(kCppProgram);
  std::string patch = make_diff(
      {{"// EVOLVE-BLOCK-START pipeline\nconstexpr int kChunks = 4;  // braid:knob 1|2|4|8|16",
        "// EVOLVE-BLOCK-START pipeline\nconstexpr int kChunks = 2;  // braid:knob 1|2|4|8|16"},
       {"  return total;\n}\n// EVOLVE-BLOCK-END", "  return total + 1;\n}\n// EVOLVE-BLOCK-END"}});
  PatchOutcome out = apply_patch(parent, PatchType::Diff, patch);
  ASSERT_TRUE(out.ok()) << out.error;
  EXPECT_EQ(out.text, replaced(replaced(kCppProgram, "kChunks = 4;", "kChunks = 2;"), "return total;", "return total + 1;"));
  // A marker that the edit renames or drops is still rejected.
  PatchOutcome renamed = apply_patch(parent, PatchType::Diff,
                                     make_diff({{"// EVOLVE-BLOCK-START pipeline\nconstexpr int kChunks = 4;  // braid:knob 1|2|4|8|16",
                                                 "// EVOLVE-BLOCK-START fast\nconstexpr int kChunks = 2;  // braid:knob 1|2|4|8|16"}}));
  ASSERT_FALSE(renamed.ok());
  EXPECT_NE(renamed.error.find("contains an EVOLVE-BLOCK marker"), std::string::npos) << renamed.error;
}

TEST(PatchDiff, MissingSearchNamesBlockAndShowsNearestText) {
  Program parent = parent_of(kCppProgram);
  std::string patch =
      "<<<<<<< SEARCH\n"
      "    total += i * kCommCta;\n"
      "  }\n"
      "=======\n"
      "    total += i;\n"
      "  }\n"
      ">>>>>>> REPLACE\n";
  PatchOutcome out = apply_patch(parent, PatchType::Diff, patch);
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(out.text.empty());
  EXPECT_NE(out.error.find("edit 1: the SEARCH text was not found in any evolve block"), std::string::npos) << out.error;
  EXPECT_NE(out.error.find("Nearest text, block 'pipeline' line 13:\n        total += i * kCommCtas;\n      }\n"),
            std::string::npos)
      << out.error;
}

TEST(PatchDiff, AmbiguousSearch) {
  std::string text = replaced(kCppProgram, "  return total;\n", "  total += 0;\n  return total;\n");
  text = replaced(text, "  int total = 0;\n", "  int total = 0;\n  total += 0;\n");
  Program parent = parent_of(text);
  PatchOutcome out = apply_patch(parent, PatchType::Diff, make_diff({{"  total += 0;", "  total += 1;"}}));
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.error.find("occurs 2 times in the evolve blocks (block 'pipeline' line 12, block 'pipeline' line 16)"),
            std::string::npos)
      << out.error;
}

TEST(PatchDiff, SearchInFrozenCodeIsRejected) {
  Program parent = parent_of(kCppProgram);
  PatchOutcome out = apply_patch(parent, PatchType::Diff, make_diff({{"  return 0;", "  return 1;"}}));
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.error.find("edit 1: the SEARCH text is in frozen code at line 21, outside every evolve block"),
            std::string::npos)
      << out.error;
}

TEST(PatchDiff, EditAcrossMarkerIsRejected) {
  Program parent = parent_of(kCppProgram);
  PatchOutcome out = apply_patch(parent, PatchType::Diff,
                                 make_diff({{"}\n// EVOLVE-BLOCK-END\n\nint main() {", "}\nint main() {"}}));
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.error.find("crosses a marker of block 'pipeline'"), std::string::npos) << out.error;
}

TEST(PatchDiff, ReplaceWithMarkerIsRejected) {
  Program parent = parent_of(kCppProgram);
  PatchOutcome out =
      apply_patch(parent, PatchType::Diff, make_diff({{"  return total;", "  return total;\n// EVOLVE-BLOCK-END"}}));
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.error.find("contains an EVOLVE-BLOCK marker"), std::string::npos) << out.error;
}

TEST(PatchDiff, ChildIsValidatedAfterEdits) {
  Program parent = parent_of(kCppProgram);
  PatchOutcome directive =
      apply_patch(parent, PatchType::Diff, make_diff({{"int run() {", "#define STEP 2\nint run() {"}}));
  ASSERT_FALSE(directive.ok());
  EXPECT_NE(directive.error.find("the patched program is invalid: seed.cu:10: preprocessor directive #define"),
            std::string::npos)
      << directive.error;

  PatchOutcome domain = apply_patch(parent, PatchType::Diff,
                                    make_diff({{"constexpr int kChunks = 4;  // braid:knob 1|2|4|8|16",
                                                "constexpr int kChunks = 5;  // braid:knob 1|2|4|8|16"}}));
  ASSERT_FALSE(domain.ok());
  EXPECT_NE(domain.error.find("kChunks = 5 is outside its domain"), std::string::npos) << domain.error;

  PatchOutcome constraint = apply_patch(parent, PatchType::Diff,
                                        make_diff({{"constexpr int kChunks = 4;  // braid:knob 1|2|4|8|16",
                                                    "constexpr int kChunks = 16;  // braid:knob 1|2|4|8|16"},
                                                   {"constexpr int kCommCtas = 8;  // braid:knob 4|8|16|32",
                                                    "constexpr int kCommCtas = 32;  // braid:knob 4|8|16|32"}}));
  ASSERT_FALSE(constraint.ok());
  EXPECT_NE(constraint.error.find("violate braid:require kChunks * kCommCtas <= 132"), std::string::npos)
      << constraint.error;
}

TEST(PatchDiff, MalformedAnswers) {
  Program parent = parent_of(kCppProgram);
  EXPECT_NE(apply_patch(parent, PatchType::Diff, "Sure, here is my idea: pipeline it.").error.find(
                "no SEARCH/REPLACE edit found"),
            std::string::npos);
  EXPECT_NE(apply_patch(parent, PatchType::Diff, "<<<<<<< SEARCH\nint run() {\n=======\nint run() {\n").error.find(
                "edit 1 is not closed"),
            std::string::npos);
  EXPECT_NE(apply_patch(parent, PatchType::Diff, "<<<<<<< SEARCH\nint run() {\n>>>>>>> REPLACE\n").error.find(
                "edit 1 has no ======= line"),
            std::string::npos);
  EXPECT_NE(apply_patch(parent, PatchType::Diff, "<<<<<<< SEARCH\n\n=======\nint x;\n>>>>>>> REPLACE\n").error.find(
                "SEARCH part is empty"),
            std::string::npos);
  EXPECT_NE(apply_patch(parent, PatchType::Diff, make_diff({{"int run() {", "int run() {"}})).error.find(
                "leaves the program unchanged"),
            std::string::npos);
}

TEST(PatchDiff, InvalidParentIsReported) {
  Program broken = Program::parse("int x;\n", "p.cu");
  PatchOutcome out = apply_patch(broken, PatchType::Diff, make_diff({{"int x;", "int y;"}}));
  EXPECT_NE(out.error.find("the parent program is invalid: p.cu: no EVOLVE-BLOCK"), std::string::npos) << out.error;
}

// ------------------------------------------------------------------ full / cross

const std::string kNewPipeline =
    "constexpr int kChunks = 2;  // braid:knob 1|2|4|8|16\n"
    "constexpr int kCommCtas = 8;  // braid:knob 4|8|16|32\n"
    "constexpr Strategy kStrategy = Strategy::Serial;  // braid:knob Strategy::Serial|Strategy::Pipelined\n"
    "constexpr bool kPush = true;  // braid:knob\n"
    "// braid:require kChunks * kCommCtas <= 132\n"
    "int run() { return kChunks * kCommCtas; }\n";

std::string expected_child() {
  Program p = Program::parse(kCppProgram);
  std::string text = kCppProgram;
  return text.replace(p.blocks()[0].begin, p.blocks()[0].end - p.blocks()[0].begin, kNewPipeline);
}

TEST(PatchFull, BlocksOnlyAnswerWithProseAndFence) {
  Program parent = parent_of(kCppProgram);
  std::string answer = "Here is a simpler schedule.\n```cpp\n// EVOLVE-BLOCK-START pipeline\n" + kNewPipeline +
                       "// EVOLVE-BLOCK-END\n```\nIt trades overlap for fewer launches.\n";
  PatchOutcome out = apply_patch(parent, PatchType::Full, answer);
  ASSERT_TRUE(out.ok()) << out.error;
  EXPECT_EQ(out.text, expected_child());
}

TEST(PatchFull, WholeProgramAnswer) {
  Program parent = parent_of(kCppProgram);
  std::string whole = "```cpp\n" + expected_child() + "```\n";
  PatchOutcome out = apply_patch(parent, PatchType::Full, whole);
  ASSERT_TRUE(out.ok()) << out.error;
  EXPECT_EQ(out.text, expected_child());
}

TEST(PatchFull, WholeProgramWithChangedFrozenCodeIsRejected) {
  Program parent = parent_of(kCppProgram);
  std::string whole = replaced(expected_child(), "  return 0;", "  return run() > 0 ? 0 : 1;");
  PatchOutcome out = apply_patch(parent, PatchType::Full, whole);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.error.find("the answer is a whole program, but its frozen code differs from the parent's: frozen "
                           "line 21 of the parent `  return 0;` is `  return run() > 0 ? 0 : 1;` in the answer"),
            std::string::npos)
      << out.error;
}

TEST(PatchFull, MissingBlockIsAnError) {
  Program parent = parent_of(kTwoBlockProgram);
  std::string answer = "// EVOLVE-BLOCK-START schedule\nconstexpr int kTile = 32;  // braid:knob 32|64|128|256\n"
                       "constexpr int kDepth = 2;  // braid:knob 1|2|3|4\nint schedule(Context& ctx) { return 1; }\n"
                       "// EVOLVE-BLOCK-END\n";
  PatchOutcome out = apply_patch(parent, PatchType::Full, answer);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.error.find("the answer gives 1 evolve block(s) but the program has 2 ('setup', 'schedule'); missing: "
                           "'setup'"),
            std::string::npos)
      << out.error;
  EXPECT_NE(apply_patch(parent, PatchType::Full, "no code here").error.find("has no EVOLVE-BLOCK-START"),
            std::string::npos);
  EXPECT_NE(apply_patch(parent, PatchType::Full, "// EVOLVE-BLOCK-START setup\nint x;\n").error.find(
                "markers are broken at its line 1"),
            std::string::npos);
}

TEST(PatchFull, BlocksMatchedByNameOrOrder) {
  Program parent = parent_of(kTwoBlockProgram);
  std::string setup = "constexpr int kStreams = 4;  // braid:knob 1|2|4\nint setup(Context& ctx) { return kStreams; }\n";
  std::string schedule =
      "constexpr int kTile = 128;  // braid:knob 32|64|128|256\nconstexpr int kDepth = 4;  // braid:knob 1|2|3|4\n"
      "// braid:require kTile * kDepth <= 512\nint schedule(Context& ctx) { return kTile; }\n";
  // Named, in another order.
  std::string named = "// EVOLVE-BLOCK-START schedule\n" + schedule + "// EVOLVE-BLOCK-END\n\n// EVOLVE-BLOCK-START setup\n" +
                      setup + "// EVOLVE-BLOCK-END\n";
  PatchOutcome by_name = apply_patch(parent, PatchType::Full, named);
  ASSERT_TRUE(by_name.ok()) << by_name.error;
  // Unnamed, in the program's order.
  std::string unnamed = "// EVOLVE-BLOCK-START\n" + setup + "// EVOLVE-BLOCK-END\n// EVOLVE-BLOCK-START\n" + schedule +
                        "// EVOLVE-BLOCK-END\n";
  PatchOutcome by_order = apply_patch(parent, PatchType::Full, unnamed);
  ASSERT_TRUE(by_order.ok()) << by_order.error;
  EXPECT_EQ(by_name.text, by_order.text);
  Program child = Program::parse(by_name.text);
  ASSERT_TRUE(child.ok());
  EXPECT_EQ(child.knob_key(), "kDepth=4;kStreams=4;kTile=128");
  EXPECT_EQ(child.frozen_fingerprint(), parent.frozen_fingerprint());

  std::string wrong_name = replaced(named, "START setup", "START init");
  EXPECT_NE(apply_patch(parent, PatchType::Full, wrong_name).error.find("missing: 'setup'"), std::string::npos);
}

TEST(PatchFull, ChildIsValidated) {
  Program parent = parent_of(kCppProgram);
  std::string answer = "// EVOLVE-BLOCK-START pipeline\n#include <vector>\n" + kNewPipeline + "// EVOLVE-BLOCK-END\n";
  PatchOutcome out = apply_patch(parent, PatchType::Full, answer);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.error.find("preprocessor directive #include"), std::string::npos) << out.error;
}

TEST(PatchCross, SameFormatAsFull) {
  Program parent = parent_of(kCppProgram);
  std::string answer = "Combining the serial schedule of parent 2 with the chunking of parent 1:\n"
                       "// EVOLVE-BLOCK-START pipeline\n" +
                       kNewPipeline + "// EVOLVE-BLOCK-END\n";
  PatchOutcome out = apply_patch(parent, PatchType::Cross, answer);
  ASSERT_TRUE(out.ok()) << out.error;
  EXPECT_EQ(out.text, expected_child());
}

TEST(PatchEmitters, MakeFullRoundTrips) {
  Program parent = parent_of(kTwoBlockProgram);
  std::string patch = make_full(parent, {std::string(parent.block_text(0)), "int schedule(Context& ctx) { return 0; }"});
  EXPECT_EQ(patch.rfind("// EVOLVE-BLOCK-START setup\n", 0), 0u);
  PatchOutcome out = apply_patch(parent, PatchType::Full, patch);
  ASSERT_TRUE(out.ok()) << out.error;
  Program child = Program::parse(out.text);
  ASSERT_TRUE(child.ok());
  EXPECT_EQ(child.block_text(1), "int schedule(Context& ctx) { return 0; }\n");
  EXPECT_EQ(child.block_text(0), parent.block_text(0));
  EXPECT_EQ(child.knob_key(), "kStreams=2");
}

TEST(PatchEmitters, MakeDiffShape) {
  EXPECT_EQ(make_diff({{"a", "b"}, {"c\n", "d"}}),
            "<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n\n<<<<<<< SEARCH\nc\n=======\nd\n>>>>>>> REPLACE\n");
}

TEST(PatchTypes, Names) {
  for (PatchType t : {PatchType::Diff, PatchType::Full, PatchType::Cross}) EXPECT_EQ(patch_type_from(to_string(t)), t);
  EXPECT_FALSE(patch_type_from("seed").has_value());
}

// ------------------------------------------------------------------ unified diff

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// Applies a unified diff produced by unified_diff; checks hunk headers against the lines.
std::string apply_unified(const std::string& before, const std::string& diff) {
  std::vector<std::string> a = split(before), out;
  std::vector<std::string> d = split(diff);
  std::size_t ai = 0;
  for (std::size_t k = 2; k < d.size();) {
    int a_start = 0, a_count = 0, b_start = 0, b_count = 0;
    EXPECT_EQ(std::sscanf(d[k].c_str(), "@@ -%d,%d +%d,%d @@", &a_start, &a_count, &b_start, &b_count), 4) << d[k];
    std::size_t first = a_count ? static_cast<std::size_t>(a_start - 1) : static_cast<std::size_t>(a_start);
    while (ai < first) out.push_back(a[ai++]);
    int seen_a = 0, seen_b = 0;
    for (++k; k < d.size() && d[k].rfind("@@", 0) != 0; ++k) {
      char op = d[k][0];
      std::string line = d[k].substr(1);
      if (op != '+') {
        EXPECT_EQ(a[ai], line);
        ++ai;
        ++seen_a;
      }
      if (op != '-') {
        out.push_back(line);
        ++seen_b;
      }
    }
    EXPECT_EQ(seen_a, a_count);
    EXPECT_EQ(seen_b, b_count);
  }
  while (ai < a.size()) out.push_back(a[ai++]);
  std::string text;
  for (const auto& l : out) text += l + "\n";
  return text;
}

TEST(UnifiedDiff, SmallChange) {
  EXPECT_EQ(unified_diff("a\nb\nc\n", "a\nb\nc\n"), "");
  EXPECT_EQ(unified_diff("a\nb\nc\nd\ne\nf\ng\nh\n", "a\nb\nc\nD\ne\nf\ng\nh\n", 1),
            "--- parent\n+++ child\n@@ -3,3 +3,3 @@\n c\n-d\n+D\n e\n");
  EXPECT_EQ(unified_diff("", "x\n"), "--- parent\n+++ child\n@@ -0,0 +1,1 @@\n+x\n");
}

TEST(UnifiedDiff, RandomEditsRoundTrip) {
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 60; ++trial) {
    std::vector<std::string> a;
    int n = static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) a.push_back("line" + std::to_string(rng() % 8));
    std::vector<std::string> b = a;
    int edits = static_cast<int>(rng() % 6);
    for (int e = 0; e < edits; ++e) {
      std::size_t at = b.empty() ? 0 : rng() % b.size();
      switch (rng() % 3) {
        case 0: b.insert(b.begin() + static_cast<long>(at), "new" + std::to_string(e)); break;
        case 1: if (!b.empty()) b.erase(b.begin() + static_cast<long>(at)); break;
        default: if (!b.empty()) b[at] = "changed" + std::to_string(e); break;
      }
    }
    std::string before, after;
    for (const auto& l : a) before += l + "\n";
    for (const auto& l : b) after += l + "\n";
    std::string diff = unified_diff(before, after, static_cast<int>(rng() % 4));
    if (before == after) {
      EXPECT_EQ(diff, "");
      continue;
    }
    EXPECT_EQ(apply_unified(before, diff), after) << diff;
  }
}

}  // namespace
}  // namespace braid
