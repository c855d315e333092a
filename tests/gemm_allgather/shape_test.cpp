// workloads/gemm_allgather/gemm_shape.hpp on the CPU: square sizes as before, M x N x K through the
// size encoding, and one-line errors for sizes the workload cannot take.
#include <gtest/gtest.h>

#include "gemm_shape.hpp"

using namespace gemm_allgather;

TEST(GemmAllgatherShape, SquareSizesStaySquare) {
  Shape s;
  ASSERT_EQ(parse_shape(4096, 2, s), "");
  EXPECT_EQ(s.m, 4096);
  EXPECT_EQ(s.n, 4096);
  EXPECT_EQ(s.k, 4096);
  EXPECT_EQ(s.shard_rows(), 2048);
  EXPECT_EQ(s.a_elems(), 2048u * 4096);
}

TEST(GemmAllgatherShape, DecodesMNK) {
  Shape s;
  // 8192 tokens x 8192 hidden, 28672 outputs over 2 ranks (workload.yaml's non-square size).
  ASSERT_EQ(parse_shape(81921433608192, 2, s), "");
  EXPECT_EQ(s.m, 8192);
  EXPECT_EQ(s.n, 14336);
  EXPECT_EQ(s.k, 8192);
  EXPECT_EQ(s.shard_rows(), 4096);
  EXPECT_EQ(s.a_elems(), 4096u * 8192);
  EXPECT_EQ(s.w_elems(), 14336u * 8192);
  EXPECT_EQ(s.c_elems(), 8192u * 14336);
  EXPECT_EQ(s.gathered_elems(), 8192u * 8192);
  ASSERT_EQ(parse_shape(4096000000804096, 4, s), "");  // M = 409600, N = 8, K = 4096
  EXPECT_EQ(s.m, 409600);
  EXPECT_EQ(s.n, 8);
  EXPECT_EQ(s.k, 4096);
}

TEST(GemmAllgatherShape, RejectsWhatItCannotTake) {
  Shape s;
  const std::string odd = parse_shape(4096, 3, s);
  EXPECT_NE(odd.find("M = 4096 is not divisible by the 3 ranks"), std::string::npos) << odd;
  EXPECT_NE(odd.find("size 4096 (M = 4096, N = 4096, K = 4096, P = 3"), std::string::npos) << odd;
  EXPECT_NE(parse_shape(100000, 1, s).find("M, N and K must be positive"), std::string::npos);      // no M
  EXPECT_NE(parse_shape(81920000008192, 1, s).find("M, N and K must be positive"), std::string::npos);  // N = 0
  EXPECT_NE(parse_shape(81921433608190, 1, s).find("multiples of 8"), std::string::npos);          // K = 8190
  EXPECT_NE(parse_shape(4100, 1, s).find("multiples of 8"), std::string::npos);
  EXPECT_NE(parse_shape(-5, 1, s).find("must be positive"), std::string::npos);
  EXPECT_EQ(parse_shape(4100, 1, s).find('\n'), std::string::npos);  // one line
}
