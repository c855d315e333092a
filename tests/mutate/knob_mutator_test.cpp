#include "braid/mutate/knob_mutator.hpp"

#include <gtest/gtest.h>

#include <set>

#include "../program/sample_programs.hpp"

namespace braid {
namespace {

using testing::kCppProgram;
using testing::kPythonProgram;
using testing::kTwoBlockProgram;

struct Harness {
  explicit Harness(const std::string& text, std::uint64_t seed = 1) : program(Program::parse(text, "gen0.cu")), rng(seed) {
    EXPECT_TRUE(program.ok()) << program.error()->message;
    record.id = "parent";
    record.code = text;
    ctx.parent = &record;
    ctx.rng = &rng;
  }
  MutationContext context(PatchType type, Phase phase, double temperature = 0.0) {
    MutationContext c = ctx;
    c.patch_type = type;
    c.phase = phase;
    c.temperature = temperature;
    return c;
  }
  // Proposes, applies with apply_patch and parses the child; fails the test on any error.
  Program child(KnobMutator& mutator, const MutationContext& c) {
    Proposal p = mutator.propose(program, c);
    EXPECT_TRUE(p.ok()) << p.error;
    EXPECT_EQ(p.model, "knob");
    EXPECT_EQ(p.patch_type, c.patch_type);
    EXPECT_EQ(p.cost_usd, 0.0);
    PatchOutcome applied = apply_patch(program, c.patch_type, p.patch);
    EXPECT_TRUE(applied.ok()) << applied.error << "\npatch:\n" << p.patch;
    Program result = Program::parse(applied.text, "gen0.cu");
    EXPECT_TRUE(result.ok());
    EXPECT_EQ(result.frozen_fingerprint(), program.frozen_fingerprint());
    return result;
  }

  Program program;
  std::mt19937_64 rng;
  ProgramRecord record;
  MutationContext ctx;
};

std::size_t index_in(const Knob& k, const std::string& v) {
  return static_cast<std::size_t>(std::find(k.domain.begin(), k.domain.end(), v) - k.domain.begin());
}

// Knob name -> distance in domain positions, for every knob that changed.
std::map<std::string, std::size_t> moves(const Program& parent, const Program& child) {
  std::map<std::string, std::size_t> out;
  for (const auto& k : parent.knobs()) {
    const Knob* now = child.find_knob(k.name);
    EXPECT_NE(now, nullptr) << k.name;
    if (!now || now->value == k.value) continue;
    std::size_t a = index_in(k, k.value), b = index_in(k, now->value);
    EXPECT_LT(b, k.domain.size()) << now->value;
    out[k.name] = a > b ? a - b : b - a;
  }
  return out;
}

TEST(KnobMutator, DiffChangesOneOrTwoKnobsWithinDomainsAndConstraints) {
  Harness h(kCppProgram);
  KnobMutator mutator;
  std::set<std::size_t> counts;
  for (Phase phase : {Phase::Explore, Phase::Exploit}) {
    for (int i = 0; i < 80; ++i) {
      MutationContext c = h.context(PatchType::Diff, phase, 0.5);
      Proposal p = mutator.propose(h.program, c);
      ASSERT_TRUE(p.ok()) << p.error;
      EXPECT_NE(p.patch.find("<<<<<<< SEARCH\n"), std::string::npos);
      Program child = h.child(mutator, c);
      auto changed = moves(h.program, child);
      EXPECT_GE(changed.size(), 1u);
      EXPECT_LE(changed.size(), 2u);
      counts.insert(changed.size());
      EXPECT_FALSE(h.program.violated_constraint(child.knob_values()).has_value());
      // Only knob lines change.
      EXPECT_EQ(child.text().size() - child.knob_key().size(), h.program.text().size() - h.program.knob_key().size());
    }
  }
  EXPECT_EQ(counts, (std::set<std::size_t>{1, 2}));
}

TEST(KnobMutator, DiffPatchIsTheKnobLines) {
  Harness h(kCppProgram, 7);
  KnobMutator mutator;
  Proposal p = mutator.propose(h.program, h.context(PatchType::Diff, Phase::Exploit));
  ASSERT_TRUE(p.ok()) << p.error;
  // Every SEARCH line is a whole knob line of the parent.
  std::size_t at = 0;
  int edits = 0;
  while ((at = p.patch.find("<<<<<<< SEARCH\n", at)) != std::string::npos) {
    at += 15;
    std::string line = p.patch.substr(at, p.patch.find('\n', at) - at);
    EXPECT_NE(line.find("// braid:knob"), std::string::npos) << line;
    EXPECT_NE(h.program.text().find(line + "\n"), std::string::npos) << line;
    ++edits;
  }
  EXPECT_GE(edits, 1);
  EXPECT_EQ(apply_patch(h.program, PatchType::Diff, p.patch).edits, edits);
}

TEST(KnobMutator, ExploitMovesToNeighbours) {
  Harness h(kCppProgram, 3);
  KnobMutator mutator;
  for (int i = 0; i < 60; ++i) {
    Program child = h.child(mutator, h.context(PatchType::Diff, Phase::Exploit, 0.0));
    for (const auto& [name, distance] : moves(h.program, child)) EXPECT_EQ(distance, 1u) << name;
    Program full = h.child(mutator, h.context(PatchType::Full, Phase::Exploit, 0.0));
    for (const auto& [name, distance] : moves(h.program, full)) EXPECT_EQ(distance, 1u) << name;
  }
}

TEST(KnobMutator, ExploreAndTemperatureJumpFurther) {
  // kChunks = 4 sits in the middle of 1|2|4|8|16: a jump of two positions reaches 1 or 16.
  Harness h(kCppProgram, 11);
  KnobMutator mutator;
  auto farthest = [&](Phase phase, double temperature) {
    std::size_t widest = 0;
    for (int i = 0; i < 80; ++i)
      for (const auto& [name, d] : moves(h.program, h.child(mutator, h.context(PatchType::Diff, phase, temperature))))
        widest = std::max(widest, d);
    return widest;
  };
  EXPECT_EQ(farthest(Phase::Exploit, 0.0), 1u);
  EXPECT_GE(farthest(Phase::Exploit, 0.8), 2u);
  EXPECT_GE(farthest(Phase::Explore, 0.0), 2u);
}

TEST(KnobMutator, FullResamplesEveryKnob) {
  Harness h(kTwoBlockProgram, 5);
  KnobMutator mutator;
  std::set<std::string> streams, tiles, depths;
  for (int i = 0; i < 60; ++i) {
    MutationContext c = h.context(PatchType::Full, Phase::Explore, 0.7);
    Proposal p = mutator.propose(h.program, c);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p.patch.rfind("// EVOLVE-BLOCK-START setup\n", 0), 0u) << p.patch;
    Program child = h.child(mutator, c);
    EXPECT_NE(child.knob_key(), h.program.knob_key());
    EXPECT_FALSE(child.violated_constraint({}).has_value());
    streams.insert(child.find_knob("kStreams")->value);
    tiles.insert(child.find_knob("kTile")->value);
    depths.insert(child.find_knob("kDepth")->value);
  }
  EXPECT_EQ(streams.size(), 3u);
  EXPECT_EQ(tiles.size(), 4u);
  EXPECT_EQ(depths.size(), 4u);
}

TEST(KnobMutator, TightConstraintsAreRespected) {
  std::string text = kCppProgram;
  text.replace(text.find("<= 132"), 6, "<= 32 && (kStrategy == Strategy::Pipelined || !kPush)");
  Harness h(text, 9);
  KnobMutator mutator;
  for (PatchType type : {PatchType::Diff, PatchType::Full}) {
    for (int i = 0; i < 50; ++i) {
      Program child = h.child(mutator, h.context(type, i % 2 ? Phase::Explore : Phase::Exploit, 0.5));
      int chunks = std::stoi(child.find_knob("kChunks")->value);
      int ctas = std::stoi(child.find_knob("kCommCtas")->value);
      EXPECT_LE(chunks * ctas, 32);
      EXPECT_TRUE(child.find_knob("kStrategy")->value == "Strategy::Pipelined" || child.find_knob("kPush")->value == "false");
    }
  }
}

TEST(KnobMutator, CrossTakesEachKnobFromAParent) {
  Harness h(kCppProgram, 13);
  std::map<std::string, std::string> a_values{{"kChunks", "1"}, {"kCommCtas", "4"}, {"kStrategy", "Strategy::Serial"}, {"kPush", "false"}};
  std::map<std::string, std::string> b_values{{"kChunks", "16"}, {"kCommCtas", "4"}};
  ProgramRecord a, b;
  a.id = "a";
  a.code = with_knobs(h.program, a_values).text;
  b.id = "b";
  b.code = with_knobs(h.program, b_values).text;
  ASSERT_TRUE(Program::parse(a.code).ok());
  ASSERT_TRUE(Program::parse(b.code).ok());
  KnobMutator mutator;
  std::set<std::string> chunks_seen;
  for (int i = 0; i < 60; ++i) {
    MutationContext c = h.context(PatchType::Cross, Phase::Exploit, 0.5);
    c.cross_parents = {&a, &b};
    Program child = h.child(mutator, c);
    for (const auto& k : h.program.knobs()) {
      std::set<std::string> allowed{k.value, a_values.count(k.name) ? a_values[k.name] : k.value,
                                    b_values.count(k.name) ? b_values[k.name] : k.value};
      EXPECT_TRUE(allowed.count(child.find_knob(k.name)->value)) << k.name << "=" << child.find_knob(k.name)->value;
    }
    chunks_seen.insert(child.find_knob("kChunks")->value);
  }
  EXPECT_EQ(chunks_seen, (std::set<std::string>{"1", "4", "16"}));
}

TEST(KnobMutator, CrossOfIdenticalParentsStillMoves) {
  Harness h(kCppProgram, 17);
  ProgramRecord same = h.record;
  KnobMutator mutator;
  MutationContext c = h.context(PatchType::Cross, Phase::Exploit);
  c.cross_parents = {&same};
  Program child = h.child(mutator, c);
  EXPECT_NE(child.knob_key(), h.program.knob_key());
}

TEST(KnobMutator, DeterministicForAGivenSeed) {
  for (PatchType type : {PatchType::Diff, PatchType::Full, PatchType::Cross}) {
    std::vector<std::string> first, second;
    for (int run = 0; run < 2; ++run) {
      Harness h(kCppProgram, 1234);
      KnobMutator mutator;
      for (int i = 0; i < 10; ++i) {
        Proposal p = mutator.propose(h.program, h.context(type, i % 2 ? Phase::Explore : Phase::Exploit, 0.3));
        ASSERT_TRUE(p.ok());
        (run == 0 ? first : second).push_back(p.patch);
      }
    }
    EXPECT_EQ(first, second);
    EXPECT_GT(std::set<std::string>(first.begin(), first.end()).size(), 1u);
  }
}

TEST(KnobMutator, AvoidsSeenVectors) {
  const std::string text = "// EVOLVE-BLOCK-START\nconstexpr int kA = 1;  // braid:knob 1|2|4|8\n// EVOLVE-BLOCK-END\n";
  Harness h(text, 21);
  std::set<std::string> seen{"kA=2"};
  KnobMutator mutator([&](const std::string& key) { return seen.count(key) > 0; });
  // The only neighbour of 1 is 2, which is seen: Exploit must widen to 4 or 8.
  for (int i = 0; i < 20; ++i) {
    Program child = h.child(mutator, h.context(PatchType::Diff, Phase::Exploit));
    EXPECT_NE(child.find_knob("kA")->value, "2");
  }
  seen.insert("kA=4");
  EXPECT_EQ(h.child(mutator, h.context(PatchType::Full, Phase::Explore)).find_knob("kA")->value, "8");
  seen.insert("kA=8");
  Proposal none = mutator.propose(h.program, h.context(PatchType::Diff, Phase::Explore));
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error.find("found no new knob vector after 200 random draws and 3 enumerated vectors"), std::string::npos) << none.error;
  EXPECT_NE(none.error.find("already seen"), std::string::npos) << none.error;

  mutator.set_seen({});
  EXPECT_TRUE(mutator.propose(h.program, h.context(PatchType::Diff, Phase::Explore)).ok());
}

TEST(KnobMutator, UnsatisfiableConstraintsGiveUp) {
  // Only the parent's own vector satisfies the constraint.
  const std::string text =
      "// EVOLVE-BLOCK-START\nconstexpr int kA = 1;  // braid:knob 1|2\n// braid:require kA == 1\n// EVOLVE-BLOCK-END\n";
  Harness h(text);
  KnobMutator mutator({}, 20);
  Proposal p = mutator.propose(h.program, h.context(PatchType::Full, Phase::Explore));
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error.find("after 20 random draws and 2 enumerated vectors"), std::string::npos) << p.error;
  EXPECT_NE(p.error.find("violated a braid:require, e.g. kA == 1"), std::string::npos) << p.error;
}

TEST(KnobMutator, NeedsKnobs) {
  Harness h("// EVOLVE-BLOCK-START\nint x = 1;\n// EVOLVE-BLOCK-END\n");
  KnobMutator mutator;
  Proposal p = mutator.propose(h.program, h.context(PatchType::Diff, Phase::Explore));
  EXPECT_EQ(p.error, "the knob mutator needs knobs: the program declares no braid:knob lines");

  Harness single("// EVOLVE-BLOCK-START\nconstexpr int kA = 1;  // braid:knob 1\n// EVOLVE-BLOCK-END\n");
  EXPECT_NE(mutator.propose(single.program, single.context(PatchType::Diff, Phase::Explore)).error.find("single value"),
            std::string::npos);

  Harness knobs(kCppProgram);
  MutationContext no_rng = knobs.context(PatchType::Diff, Phase::Explore);
  no_rng.rng = nullptr;
  EXPECT_EQ(mutator.propose(knobs.program, no_rng).error, "the knob mutator needs a random number generator in its context");
}

TEST(KnobMutator, PythonWorkload) {
  Harness h(kPythonProgram, 4);
  KnobMutator mutator;
  for (PatchType type : {PatchType::Diff, PatchType::Full}) {
    for (int i = 0; i < 20; ++i) {
      Program child = h.child(mutator, h.context(type, Phase::Explore, 0.5));
      EXPECT_FALSE(child.violated_constraint({}).has_value());
    }
  }
}

TEST(Phase, Names) {
  EXPECT_EQ(to_string(Phase::Explore), "explore");
  EXPECT_EQ(to_string(Phase::Exploit), "exploit");
  EXPECT_EQ(phase_from("exploit"), Phase::Exploit);
  EXPECT_EQ(phase_from("explore"), Phase::Explore);
  EXPECT_FALSE(phase_from("other").has_value());
}

}  // namespace
}  // namespace braid
