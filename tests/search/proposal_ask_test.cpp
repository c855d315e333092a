// ask() (search/proposal.hpp): a one-knob change that breaks a braid:require is named with the
// taken changes in the prompt that asks again, so a model asked the same does not repeat it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "braid/mutate/mutator.hpp"
#include "braid/program/patch.hpp"
#include "braid/search/proposal.hpp"

namespace braid {
namespace {

const std::string kParent =
    "int frozen();\n"
    "// EVOLVE-BLOCK-START\n"
    "constexpr int kTile = 64;  // braid:knob 32|64|128\n"
    "constexpr int kDepth = 2;  // braid:knob 1|2|4\n"
    "// braid:require kTile * kDepth <= 128\n"
    "int schedule() { return kTile * kDepth; }\n"
    "// EVOLVE-BLOCK-END\n";

// Answers with the given diffs in turn and records the taken changes each prompt named.
struct ScriptedMutator : Mutator {
  std::vector<std::string> answers;
  std::vector<std::vector<std::string>> named;
  Proposal propose(const Program&, const MutationContext& ctx) override {
    named.push_back(ctx.taken_knob_changes);
    Proposal p;
    p.patch = answers.at(named.size() - 1);
    p.model = "scripted";
    return p;
  }
  std::string name() const override { return "scripted"; }
};

TEST(ProposalAsk, AOneKnobChangeThatBreaksARequireIsNamedWhenAskedAgain) {
  ScriptedMutator mutator;
  mutator.answers = {make_diff({{"constexpr int kTile = 64;  // braid:knob 32|64|128",
                                 "constexpr int kTile = 128;  // braid:knob 32|64|128"}}),
                     make_diff({{"constexpr int kTile = 64;  // braid:knob 32|64|128",
                                 "constexpr int kTile = 32;  // braid:knob 32|64|128"}})};
  SearchConfig cfg;
  ProposalSteps steps;
  steps.cfg = &cfg;
  steps.mutator = &mutator;
  steps.make_record = [](const std::string& code, std::int64_t g, int island) {
    ProgramRecord r;
    r.code = code;
    r.generation = g;
    r.island_idx = island;
    if (Program p = Program::parse(code, "candidate"); p.ok()) r.knob_key = p.knob_key();
    return r;
  };
  steps.similarity = [](const std::vector<float>&, std::size_t, std::string*) { return 0.0f; };
  steps.code_of = [](const std::string&) { return std::optional<std::string>(); };
  steps.record_attempt = [](const AttemptRecord&) {};
  steps.stopping = [] { return false; };

  PreparedProposal p;
  p.generation = 1;
  p.parent_rec.id = "parent";
  p.parent_rec.code = kParent;
  p.parent = Program::parse(kParent, "parent");
  ASSERT_TRUE(p.parent->ok());
  p.ctx.parent = &p.parent_rec;
  p.ctx.rng = &p.rng;
  ask(p, steps);

  ASSERT_EQ(mutator.named.size(), 2u);
  EXPECT_TRUE(mutator.named[0].empty());
  EXPECT_EQ(mutator.named[1], std::vector<std::string>{"kTile = 128"});
  EXPECT_NE(p.ctx.previous_error.find("violate braid:require kTile * kDepth <= 128"), std::string::npos)
      << p.ctx.previous_error;
  ASSERT_TRUE(p.candidate.has_value());
  EXPECT_TRUE(p.knob_only);
  EXPECT_EQ(p.candidate->knob_key, "kDepth=2;kTile=32");
  EXPECT_EQ(p.patch_failures, 1);
}

}  // namespace
}  // namespace braid
