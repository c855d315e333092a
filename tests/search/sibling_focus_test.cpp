// Distinct changes for concurrent sibling proposals (search/sibling_focus.hpp, issue #25):
// proposals for the same parent text less than the window apart get disjoint shares of the
// parent's one-knob changes, a function of the generations' parents alone; the prompt's focus is
// the share less the changes it names as taken.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "braid/search/proposal.hpp"
#include "braid/search/sibling_focus.hpp"

namespace braid {
namespace {

// The CPU example's knobs: 3 tile sizes of 5 values, 3 loop orders, 4 unrolls, a flag.
const std::string kSeed =
    "// EVOLVE-BLOCK-START\n"
    "constexpr int kBM = 32;  // braid:knob 8|16|32|64|128\n"
    "constexpr int kBN = 32;  // braid:knob 8|16|32|64|128\n"
    "constexpr int kBK = 32;  // braid:knob 8|16|32|64|128\n"
    "constexpr int kUnroll = 1;  // braid:knob 1|2|4|8\n"
    "constexpr bool kTransposeB = false;  // braid:knob\n"
    "// braid:require kBK * kBN <= 8192\n"
    "int run() { return kBM * kBN * kBK * kUnroll; }\n"
    "// EVOLVE-BLOCK-END\n";

bool disjoint(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  for (const auto& x : a)
    if (std::find(b.begin(), b.end(), x) != b.end()) return false;
  return true;
}

TEST(SiblingFocus, SharesAreDealtRoundRobin) {
  const std::vector<std::string> c = {"a", "b", "c", "d", "e"};
  EXPECT_EQ(focus_share(c, 0, 2), (std::vector<std::string>{"a", "c", "e"}));
  EXPECT_EQ(focus_share(c, 1, 2), (std::vector<std::string>{"b", "d"}));
  EXPECT_EQ(focus_share(c, 4, 5), (std::vector<std::string>{"e"}));
  EXPECT_TRUE(focus_share(c, 0, 0).empty());
  EXPECT_TRUE(focus_share(c, -1, 2).empty());
}

TEST(SiblingFocus, OneKnobChangesAreEveryValidChangeInOrder) {
  Program seed = Program::parse(kSeed, "seed");
  ASSERT_TRUE(seed.ok());
  const auto all = one_knob_changes(seed);
  EXPECT_EQ(all.size(), 4u + 4u + 4u + 3u + 1u);  // 32 x 128 still meets the braid:require
  EXPECT_EQ(all.front(), "kBM = 8");
  EXPECT_EQ(std::set<std::string>(all.begin(), all.end()).size(), all.size());
  EXPECT_EQ(std::count(all.begin(), all.end(), "kTransposeB = true"), 1);
  for (const auto& change : all) EXPECT_EQ(change.find("= 32"), std::string::npos) << change;  // never the value
  // Exactly the changes taken_knob_changes can name.
  EXPECT_EQ(taken_knob_changes(seed, [](const std::string&) { return true; }), all);
}

// The seed phase of the bench: every generation's parent is one of the islands' seeds (the same
// text under two ids), so 8 generations in a row are blind siblings: pairwise disjoint focus,
// together every change of the parent.
TEST(SiblingFocus, BlindSiblingsOfOneParentTextGetDisjointShares) {
  Program seed = Program::parse(kSeed, "seed");
  const auto all = one_knob_changes(seed);
  ASSERT_GE(all.size(), 8u);
  SiblingFocus focus(8);
  std::vector<std::vector<std::string>> got;
  for (std::int64_t g = 1; g <= 8; ++g) got.push_back(focus.assign(g, kSeed, all));
  std::set<int> shares;
  std::set<std::string> covered;
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_FALSE(got[i].empty()) << "generation " << i + 1;
    shares.insert(focus.share_of(std::int64_t(i) + 1));
    covered.insert(got[i].begin(), got[i].end());
    for (std::size_t j = 0; j < i; ++j)
      EXPECT_TRUE(disjoint(got[i], got[j])) << "generations " << j + 1 << ", " << i + 1;
  }
  EXPECT_EQ(shares.size(), 8u);
  EXPECT_EQ(covered.size(), all.size());

  // Any 8 generations in a row stay disjoint as the window slides.
  for (std::int64_t g = 9; g <= 30; ++g) {
    got.push_back(focus.assign(g, kSeed, all));
    for (std::int64_t d = 1; d < 8; ++d)
      EXPECT_TRUE(disjoint(got[std::size_t(g - 1)], got[std::size_t(g - 1 - d)]))
          << "generations " << g - d << ", " << g;
  }
}

// Only the text counts (the two islands' seeds are one program under two ids); a generation of
// another parent takes no share from them, and one the window has passed no longer holds one.
TEST(SiblingFocus, OnlySiblingsOfTheSameTextWithinTheWindowCount) {
  const std::string other = kSeed + "// another program\n";
  Program seed = Program::parse(kSeed, "seed");
  const auto all = one_knob_changes(seed);
  SiblingFocus focus(4);
  auto a = focus.assign(4, kSeed, all);
  auto b = focus.assign(5, other, all);  // another text: its own shares, from 5 mod 4
  auto c = focus.assign(6, kSeed, all);
  EXPECT_EQ(focus.share_of(4), 0);
  EXPECT_EQ(focus.share_of(5), 1);
  EXPECT_EQ(focus.share_of(6), 2);
  EXPECT_TRUE(disjoint(a, c));
  auto d = focus.assign(7, kSeed, all);  // 7 mod 4 = 3, free
  EXPECT_EQ(focus.share_of(7), 3);
  auto e = focus.assign(8, kSeed, all);  // 4 is out of the window (8 - 4): share 0 is free again
  EXPECT_EQ(focus.share_of(8), 0);
  EXPECT_EQ(e, a);
  EXPECT_TRUE(disjoint(e, c) && disjoint(e, d));
  EXPECT_EQ(focus.share_of(4), -1);  // forgotten
}

// Fewer changes than the window: as many shares as changes, and when every share is held the one
// held longest ago is taken again. The same sequence of parents gives the same shares (replay).
TEST(SiblingFocus, FewChangesAndTheSameAnswerForTheSameSequence) {
  const std::vector<std::string> few = {"kA = 1", "kA = 2", "kB = true"};
  SiblingFocus one(8), two(8);
  std::vector<int> s1, s2;
  for (std::int64_t g = 1; g <= 6; ++g) {
    auto f = one.assign(g, "p", few);
    EXPECT_EQ(f.size(), 1u);
    two.assign(g, "p", few);
    s1.push_back(one.share_of(g));
    s2.push_back(two.share_of(g));
  }
  EXPECT_EQ(s1, (std::vector<int>{1, 2, 0, 1, 2, 0}));
  EXPECT_EQ(s1, s2);
  EXPECT_TRUE(one.assign(7, "p", {}).empty());  // a parent without knobs: no focus
  EXPECT_EQ(one.share_of(7), -1);
}

// A share whose changes were all taken when the generation is prepared is passed over for a free
// one with changes left; with none left, the first free share.
TEST(SiblingFocus, ASharePassedOverWhenAllItsChangesAreTaken) {
  const std::vector<std::string> c = {"a", "b", "c", "d", "e", "f"};
  SiblingFocus focus(3);
  EXPECT_EQ(focus.assign(3, "p", c, {"a", "d"}), (std::vector<std::string>{"b", "e"}));  // share 0 is spent
  EXPECT_EQ(focus.share_of(3), 1);
  EXPECT_EQ(focus.assign(4, "p", c, {"a", "d"}), (std::vector<std::string>{"c", "f"}));
  EXPECT_EQ(focus.assign(7, "p", c, c), (std::vector<std::string>{"b", "e"}));  // all spent: 7 mod 3
}

// Late in a parent's seed phase the free shares are spent: a sibling then shares the held share
// with the most changes left (the one held longest ago among equals), listed from a later start,
// instead of asking with no list and colliding with whichever sibling it happens to meet.
TEST(SiblingFocus, ASpentSiblingSharesTheHeldShareWithTheMostChangesLeft) {
  const std::vector<std::string> c = {"a", "b", "c", "d", "e", "f", "g", "h", "i"};
  SiblingFocus focus(3);
  EXPECT_EQ(focus.assign(1, "p", c), (std::vector<std::string>{"b", "e", "h"}));         // share 1
  EXPECT_EQ(focus.assign(2, "p", c, {"b"}), (std::vector<std::string>{"c", "f", "i"}));  // share 2
  // Share 0 (a, d, g) is all taken: of the held ones, share 2 has three changes left, share 1 two.
  const std::vector<std::string> taken = {"a", "d", "g", "e"};
  EXPECT_EQ(focus.assign(3, "p", c, taken), (std::vector<std::string>{"f", "i", "c"}));
  EXPECT_EQ(focus.share_of(3), 2);
  // Equal changes left: the share held longest ago (share 1 by generation 1, not 2 by 2 and 3).
  SiblingFocus even(3);
  even.assign(1, "p", c);
  even.assign(2, "p", c);
  EXPECT_EQ(even.assign(3, "p", c, {"a", "d", "g"}), (std::vector<std::string>{"e", "h", "b"}));
  EXPECT_EQ(even.share_of(3), 1);
}

TEST(SiblingFocus, ThePromptsFocusLeavesOutTakenChanges) {
  PreparedProposal p;
  p.focus = {"kBM = 8", "kBN = 64", "kUnroll = 4"};
  p.ctx.taken_knob_changes = {"kBN = 64", "kBK = 8"};
  narrow_focus(p);
  EXPECT_EQ(p.ctx.focus_knob_changes, (std::vector<std::string>{"kBM = 8", "kUnroll = 4"}));
  p.ctx.taken_knob_changes = {"kBM = 8", "kBN = 64", "kUnroll = 4"};
  narrow_focus(p);
  EXPECT_TRUE(p.ctx.focus_knob_changes.empty());  // all taken: the prompt has no focus
}

// The prompt says every one-knob change is taken only when each of the parent's is named.
TEST(SiblingFocus, EveryOneKnobChangeNamedIsSpent) {
  PreparedProposal p;
  p.one_knob = {"kBM = 8", "kBN = 64", "kUnroll = 4"};
  p.ctx.taken_knob_changes = {"kBM = 8", "kUnroll = 4", "kBK = 512"};  // the last broke a braid:require
  narrow_focus(p);
  EXPECT_FALSE(p.ctx.one_knob_changes_spent);
  name_change(p.ctx.taken_knob_changes, "kBN = 64");
  narrow_focus(p);
  EXPECT_TRUE(p.ctx.one_knob_changes_spent);
  p.one_knob.clear();  // a parent without knobs
  narrow_focus(p);
  EXPECT_FALSE(p.ctx.one_knob_changes_spent);
}

// A share is claimed when its earlier holders are as many as its changes left: each will likely
// take one, so the next sibling is sent to the parent's two-knob changes instead (pt9 of
// docs/measurements/2026-11-28d: blind siblings given the same last change repeated it).
TEST(SiblingFocus, AShareWithNoChangeLeftBeyondItsHoldersIsClaimed) {
  const std::vector<std::string> c = {"a", "b", "c", "d"};
  SiblingFocus focus(4);
  EXPECT_EQ(focus.assign(1, "p", c, {"a", "c", "d"}), (std::vector<std::string>{"b"}));
  EXPECT_FALSE(focus.claimed(1));  // b is free and nobody else holds it
  EXPECT_EQ(focus.assign(2, "p", c, {"a", "c", "d"}), (std::vector<std::string>{"b"}));  // shared
  EXPECT_TRUE(focus.claimed(2));                                                         // generation 1 takes b
  EXPECT_FALSE(focus.claimed(3));                                                        // not assigned yet
  focus.assign(3, "p", c, c);                                                            // nothing left anywhere
  EXPECT_TRUE(focus.claimed(3));
  SiblingFocus none(4);
  EXPECT_TRUE(none.assign(5, "p", {}).empty());  // a parent without one-knob changes
  EXPECT_TRUE(none.claimed(5));
  // Another parent text holds nothing of p's shares.
  EXPECT_FALSE(focus.assign(4, "q", c, {"a", "c", "d"}).empty());
  EXPECT_FALSE(focus.claimed(4));
}

// Two parents can reach one knob vector (pt13 of docs/measurements/2026-11-28e: a child's change
// undone is the seed's other change): a change whose vector a sibling of another parent was given
// within the window is left out of the focus, and a share left with nothing is claimed.
TEST(SiblingFocus, AVectorGivenToASiblingOfAnotherParentIsLeftOut) {
  SiblingFocus focus(4);
  // Parent p: "kA = 1" makes vector v1, "kB = 1" v2. Parent q (p with kA = 2): "kA = 1" makes v1 too.
  EXPECT_EQ(focus.assign(1, "p", {"kA = 1", "kB = 1"}, {}, {"v1", "v2"}), (std::vector<std::string>{"kB = 1"}));
  EXPECT_EQ(focus.assign(2, "p", {"kA = 1", "kB = 1"}, {}, {"v1", "v2"}), (std::vector<std::string>{"kA = 1"}));
  EXPECT_TRUE(focus.assign(3, "q", {"kA = 1"}, {}, {"v1"}).empty());  // v1 is generation 2's
  EXPECT_TRUE(focus.claimed(3));
  // Out of the window, the vector is free again; without keys nothing is left out.
  EXPECT_EQ(focus.assign(6, "q", {"kA = 1"}, {}, {"v1"}), (std::vector<std::string>{"kA = 1"}));
  SiblingFocus plain(4);
  plain.assign(1, "p", {"kA = 1"}, {}, {"v1"});
  EXPECT_EQ(plain.assign(2, "q", {"kA = 1"}), (std::vector<std::string>{"kA = 1"}));
}

TEST(SiblingFocus, PairsAreEveryValidTwoKnobChangeInAFixedMixedOrder) {
  Program seed = Program::parse(kSeed, "seed");
  ASSERT_TRUE(seed.ok());
  const auto pairs = knob_pair_changes(seed, 100000);
  std::set<std::string> texts, keys;
  for (const auto& pc : pairs) {
    texts.insert(pc.text);
    keys.insert(pc.key);
    const auto comma = pc.text.find(", ");
    ASSERT_NE(comma, std::string::npos) << pc.text;
    EXPECT_EQ(pc.text.find("= 32,"), std::string::npos) << pc.text;  // never a knob's own value
    EXPECT_NE(pc.text.substr(0, pc.text.find(" = ")),
              pc.text.substr(comma + 2, pc.text.find(" = ", comma) - comma - 2));
    // Valid under the braid:require: never kBK = 128 with kBN = 128 (16384 > 8192).
    EXPECT_FALSE(pc.text.find("kBN = 128") != std::string::npos && pc.text.find("kBK = 128") != std::string::npos)
        << pc.text;
  }
  EXPECT_EQ(texts.size(), pairs.size());
  EXPECT_EQ(keys.size(), pairs.size());  // each a distinct knob vector
  // 3 tile knobs x 4 other values, 3 unroll values, 1 flag value: pairs of knobs with all their
  // other values, less (kBN, kBK) = (128, 128).
  const int tiles = 3 * 4 * 4 - 1, with_unroll = 3 * 4 * 3, with_flag = 3 * 4, unroll_flag = 3;
  EXPECT_EQ(pairs.size(), std::size_t(tiles + with_unroll + with_flag + unroll_flag));
  // Mixed: the first few do not all move the first knob; capped lists are prefixes.
  int first_knob = 0;
  for (std::size_t i = 0; i < 8; ++i) first_knob += pairs[i].text.rfind("kBM = ", 0) == 0;
  EXPECT_LT(first_knob, 8);
  const auto capped = knob_pair_changes(seed, 10);
  ASSERT_EQ(capped.size(), 10u);
  for (std::size_t i = 0; i < capped.size(); ++i) EXPECT_EQ(capped[i].text, pairs[i].text);
}

// The prompt lists at most four pairs of its share, less those named as taken.
TEST(SiblingFocus, ThePromptsPairsLeaveOutTakenOnesAndAreFew) {
  Program seed = Program::parse(kSeed, "seed");
  ASSERT_TRUE(seed.ok());
  PreparedProposal p;
  p.parent = seed;
  p.pairs = knob_pair_changes(seed);
  for (std::size_t i = 0; i < 6; ++i) p.pair_focus.push_back(p.pairs[i].text);
  const std::string taken_key = p.pairs[1].key;
  name_taken_pairs(p, [&](const std::string& key) { return key == taken_key; });
  EXPECT_EQ(p.taken_pairs, (std::vector<std::string>{p.pairs[1].text}));
  narrow_focus(p);
  EXPECT_EQ(p.ctx.focus_knob_pairs,
            (std::vector<std::string>{p.pairs[0].text, p.pairs[2].text, p.pairs[3].text, p.pairs[4].text}));
  EXPECT_TRUE(p.ctx.focus_knob_changes.empty());
}

}  // namespace
}  // namespace braid
