// The MoE workload's router (workloads/moe/moe_routing.hpp) on the CPU: the same functions route
// tokens on the device and in the reference, so their properties are checked here once: valid
// picks, the hot rank's load ratio, determinism per seed, fresh routing per trial.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include "moe_routing.hpp"

namespace {

using moe::kTopK;

struct Trial {
  std::vector<std::vector<uint32_t>> words;  // per rank
  int hot = 0;
};

Trial draw_trial(std::mt19937_64& rng, int world) {
  Trial t;
  for (int r = 0; r < world; ++r) {
    std::vector<uint32_t> w(moe::kSeedWords);
    for (auto& x : w) x = (uint32_t)rng();
    t.words.push_back(w);
  }
  t.hot = moe::hot_rank(t.words[0].data(), world);
  return t;
}

moe::Shape shape(int64_t tokens, int experts, int skew, int world) {
  moe::Shape s;
  EXPECT_EQ(moe::decode_size(moe::encode_size(tokens, experts, skew), world, &s), "");
  return s;
}

// Picks per destination rank summed over every source rank of one trial.
std::vector<int64_t> rank_loads(const moe::Shape& s, const Trial& t) {
  std::vector<int64_t> load((size_t)s.world, 0);
  int32_t ids[kTopK];
  float gates[kTopK];
  for (int src = 0; src < s.world; ++src)
    for (int64_t tok = 0; tok < s.tokens; ++tok) {
      moe::route_token(t.words[(size_t)src].data(), t.hot, tok, s, ids, gates);
      for (int k = 0; k < kTopK; ++k) ++load[(size_t)(ids[k] / s.experts_per_rank())];
    }
  return load;
}

TEST(MoeRouting, SizeEncodingAndItsErrors) {
  moe::Shape s;
  EXPECT_EQ(moe::decode_size(1282561, 2, &s), "");
  EXPECT_EQ(s.tokens, 128);
  EXPECT_EQ(s.experts, 256);
  EXPECT_EQ(s.skew, 1);
  EXPECT_EQ(s.experts_per_rank(), 128);
  EXPECT_EQ(moe::encode_size(4096, 32, 5), 40960325);
  EXPECT_NE(moe::decode_size(1282560, 2, nullptr).find("skew"), std::string::npos);
  EXPECT_NE(moe::decode_size(1280331, 2, nullptr).find("multiple"), std::string::npos);  // E = 33
  EXPECT_NE(moe::decode_size(1280321, 8, nullptr).find("top-k"), std::string::npos);    // 4 experts per rank
  EXPECT_NE(moe::decode_size(321, 1, nullptr).find("T must be"), std::string::npos);
}

TEST(MoeRouting, EveryTokenPicksEightDistinctExpertsWithGatesSummingToTheScale) {
  std::mt19937_64 rng(1);
  for (int world : {1, 2, 4}) {
    for (int skew : {1, 5}) {
      const moe::Shape s = shape(512, 32 * world, skew, world);
      const Trial t = draw_trial(rng, world);
      int32_t ids[kTopK];
      float gates[kTopK];
      for (int64_t tok = 0; tok < s.tokens; ++tok) {
        moe::route_token(t.words[0].data(), t.hot, tok, s, ids, gates);
        std::set<int32_t> distinct(ids, ids + kTopK);
        ASSERT_EQ(distinct.size(), (size_t)kTopK);
        float sum = 0;
        for (int k = 0; k < kTopK; ++k) {
          ASSERT_GE(ids[k], 0);
          ASSERT_LT(ids[k], s.experts);
          ASSERT_GT(gates[k], 0.0f);
          sum += gates[k];
        }
        EXPECT_NEAR(sum, moe::kRoutedScale, 1e-4);
      }
    }
  }
}

// The hot rank's load against the mean of the others: s within 10 % (T = 4096 per rank gives
// 8192+ picks per source, so sampling noise is ~2 %).
TEST(MoeRouting, HotRankLoadRatioMatchesTheSkew) {
  std::mt19937_64 rng(2);
  for (int world : {2, 4}) {
    for (int skew : {1, 2, 3, 5}) {
      const moe::Shape s = shape(4096, 16 * world, skew, world);
      const Trial t = draw_trial(rng, world);
      const std::vector<int64_t> load = rank_loads(s, t);
      int64_t total = 0, others = 0;
      for (int r = 0; r < world; ++r) {
        total += load[(size_t)r];
        if (r != t.hot) others += load[(size_t)r];
      }
      EXPECT_EQ(total, s.pairs() * world);  // every pick lands somewhere
      const double ratio = (double)load[(size_t)t.hot] / ((double)others / (world - 1));
      EXPECT_NEAR(ratio, (double)skew, 0.1 * skew) << "world " << world << " skew " << skew;
      // The hot rank is the most loaded one only when skewed.
      if (skew > 1) EXPECT_EQ(std::max_element(load.begin(), load.end()) - load.begin(), t.hot);
    }
  }
}

// Within a rank the experts share its load evenly (the probe for distinct picks adds no hot expert).
TEST(MoeRouting, ExpertsOfARankShareItsLoad) {
  std::mt19937_64 rng(3);
  const moe::Shape s = shape(4096, 32, 5, 2);
  const Trial t = draw_trial(rng, 2);
  std::vector<int64_t> per_expert((size_t)s.experts, 0);
  int32_t ids[kTopK];
  float gates[kTopK];
  for (int src = 0; src < 2; ++src)
    for (int64_t tok = 0; tok < s.tokens; ++tok) {
      moe::route_token(t.words[(size_t)src].data(), t.hot, tok, s, ids, gates);
      for (int k = 0; k < kTopK; ++k) ++per_expert[(size_t)ids[k]];
    }
  for (int r = 0; r < 2; ++r) {
    const auto first = per_expert.begin() + r * s.experts_per_rank();
    const auto [lo, hi] = std::minmax_element(first, first + s.experts_per_rank());
    EXPECT_LT((double)*hi / (double)*lo, 1.25) << "rank " << r;
  }
}

TEST(MoeRouting, SameSeedSameRoutingAndEveryTrialDiffers) {
  std::mt19937_64 rng(4);
  const moe::Shape s = shape(128, 64, 3, 2);
  auto routing = [&](const Trial& t) {
    std::vector<int32_t> ids((size_t)s.pairs());
    std::vector<float> gates((size_t)s.pairs());
    for (int64_t tok = 0; tok < s.tokens; ++tok) moe::route_token(t.words[0].data(), t.hot, tok, s, ids.data() + tok * kTopK, gates.data() + tok * kTopK);
    return std::make_pair(ids, gates);
  };
  const Trial a = draw_trial(rng, 2);
  EXPECT_EQ(routing(a), routing(a));
  std::set<int> hot_ranks;
  for (int trial = 0; trial < 40; ++trial) {
    const Trial b = draw_trial(rng, 2);
    hot_ranks.insert(b.hot);
    const auto ra = routing(a).first, rb = routing(b).first;
    int64_t same_tokens = 0;
    for (int64_t tok = 0; tok < s.tokens; ++tok)
      same_tokens += std::equal(ra.begin() + tok * kTopK, ra.begin() + (tok + 1) * kTopK, rb.begin() + tok * kTopK);
    EXPECT_LT(same_tokens, 2) << "trial " << trial;  // 8 picks of 64 experts agree by chance almost never
  }
  EXPECT_EQ(hot_ranks.size(), 2u);  // the hot rank moves between trials
}

// The bound's fixed draw (counted on the host by every rank at set-up): the trial's distribution
// (every pick lands, the hot rank carries the skew), the same counts on every rank that computes
// them, so the per-peer row counts of its exchange agree between sender and receiver.
TEST(MoeRouting, TheBoundsFixedDrawHasTheTrialsLoadAndAgreesAcrossRanks) {
  for (int world : {2, 4, 8}) {
    for (int skew : {1, 5}) {
      const moe::Shape s = shape(4096, 32 * world, skew, world);
      std::vector<int64_t> load((size_t)world, 0);
      for (int src = 0; src < world; ++src) {
        const std::vector<int32_t> picks = moe::bound_draw_picks(s, src);
        EXPECT_EQ(picks, moe::bound_draw_picks(s, src));
        int64_t total = 0;
        for (int e = 0; e < s.experts; ++e) {
          total += picks[(size_t)e];
          load[(size_t)(e / s.experts_per_rank())] += picks[(size_t)e];
        }
        EXPECT_EQ(total, s.pairs());
      }
      const auto hot = std::max_element(load.begin(), load.end());
      int64_t others = 0;
      for (int64_t l : load) others += l;
      others -= *hot;
      EXPECT_NEAR((double)*hot / ((double)others / (world - 1)), (double)skew, 0.1 * skew) << "world " << world << " skew " << skew;
    }
  }
  EXPECT_NE(moe::bound_draw_picks(shape(128, 64, 1, 2), 0), moe::bound_draw_picks(shape(128, 64, 1, 2), 1));  // ranks draw apart
}

}  // namespace
