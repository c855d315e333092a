// workloads/ring_attention/ring_shape.hpp on the CPU: the size encoding (and one-line errors for
// sizes the workload cannot take), and the placements: contiguous blocks and the zig-zag swap each
// cover every token exactly once, the zig-zag halves are whole 128-row tiles, and the zig-zag swap
// gives every rank the same causal work where contiguous blocks do not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>

#include "ring_shape.hpp"

using namespace ring_attention;

TEST(RingAttentionShape, ParsesTheSizeEncoding) {
  Shape s;
  ASSERT_EQ(parse_shape(819232, 2, s), "");
  EXPECT_EQ(s.seq, 8192);
  EXPECT_EQ(s.hkv, 32);
  EXPECT_FALSE(s.causal);
  EXPECT_EQ(s.local(), 4096);
  EXPECT_EQ(s.kv_block_bytes(), 2u * 4096 * 32 * 128 * 2);
  ASSERT_EQ(parse_shape(1001638408, 4, s), "");
  EXPECT_EQ(s.seq, 16384);
  EXPECT_EQ(s.hkv, 8);
  EXPECT_TRUE(s.causal);
  EXPECT_EQ(s.q_elems(), 4096u * 32 * 128);
}

TEST(RingAttentionShape, RejectsWhatItCannotTake) {
  Shape s;
  const std::string hkv = parse_shape(819203, 1, s);  // Hkv = 3
  EXPECT_NE(hkv.find("size 819203"), std::string::npos) << hkv;
  EXPECT_NE(hkv.find("Hkv must divide 32"), std::string::npos) << hkv;
  EXPECT_NE(parse_shape(819232, 3, s).find("multiple of 256 * P"), std::string::npos);  // 8192 on 3 ranks
  EXPECT_NE(parse_shape(81932, 1, s).find("multiple of 256 * P"), std::string::npos);   // S = 819
  EXPECT_NE(parse_shape(2000819232, 1, s).find("C must be 0 or 1"), std::string::npos);
  EXPECT_NE(parse_shape(-819232, 1, s), "");
  for (const std::string& e : {hkv, parse_shape(819232, 3, s)}) EXPECT_EQ(e.find('\n'), std::string::npos);
}

namespace {
// Every global position the ranks' blocks hold, with multiplicity checked.
bool covers_once(const Shape& s, bool zigzag) {
  std::set<int> seen;
  for (int r = 0; r < s.world; ++r) {
    const Positions p = zigzag ? zigzag_positions(r, s) : block_positions(r, s);
    for (int i = 0; i < s.local(); ++i)
      if (!seen.insert(p.global(i)).second) return false;
  }
  return (int)seen.size() == s.seq && *seen.begin() == 0 && *seen.rbegin() == s.seq - 1;
}
}  // namespace

TEST(RingAttentionShape, PlacementsCoverEveryTokenOnce) {
  for (int P = 1; P <= 8; ++P)
    for (int k : {1, 3}) {
      Shape s;
      ASSERT_EQ(parse_shape(1000000000LL + 256LL * P * k * 100 + 8, P, s), "");
      SCOPED_TRACE("P = " + std::to_string(P) + ", S = " + std::to_string(s.seq));
      EXPECT_TRUE(covers_once(s, false));
      EXPECT_TRUE(covers_once(s, true));
      EXPECT_EQ(zigzag_positions(0, s).len0 % 128, 0);  // each half is whole query tiles
    }
}

TEST(RingAttentionShape, ZigZagBalancesCausalWork) {
  for (int P = 1; P <= 8; ++P) {
    Shape s;
    ASSERT_EQ(parse_shape(1000000000LL + 2048LL * P * 100 + 8, P, s), "");
    SCOPED_TRACE("P = " + std::to_string(P));
    const int64_t total = (int64_t)s.seq * (s.seq + 1) / 2;
    int64_t zz_sum = 0, block_sum = 0, block_min = INT64_MAX, block_max = 0;
    const int64_t zz0 = causal_pairs(zigzag_positions(0, s), s.local());
    for (int r = 0; r < P; ++r) {
      const int64_t zz = causal_pairs(zigzag_positions(r, s), s.local());
      const int64_t block = causal_pairs(block_positions(r, s), s.local());
      // Odd P: the middle rank keeps its own block, which is the average share too.
      EXPECT_EQ(zz, zz0) << "rank " << r;
      zz_sum += zz;
      block_sum += block;
      block_min = std::min(block_min, block);
      block_max = std::max(block_max, block);
    }
    EXPECT_EQ(zz_sum, total);
    EXPECT_EQ(block_sum, total);
    if (P > 1) {
      EXPECT_GT((double)block_max / (double)block_min, 2.0);  // contiguous: the last rank does far more
    }
  }
}
