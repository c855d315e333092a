// gemm_shape.hpp -- the GEMM + AllGather workload's shapes, plain C++ (also compiled by the CPU
// tests): the --size encoding of M x N x K and the shard each rank holds.
//
// The harness takes one integer per --size. A size below 10^5 is square, M = N = K = size (the
// sizes 2048 ... 16384 of the earlier runs). Otherwise size = M * 10^10 + N * 10^5 + K with
// 1 <= N, K < 10^5: 81921433608192 is M = 8192 tokens, N = 14336 outputs (28672 / 2 ranks),
// K = 8192 hidden. Read the digits as M | NNNNN | KKKKK.
#pragma once

#include <cstdint>
#include <string>

namespace gemm_allgather {

struct Shape {
  int64_t m = 0, n = 0, k = 0;  // C (M x N) = A (M x K) * w^T (w: N x K)
  int world = 1;
  int64_t shard_rows() const { return m / world; }  // rows of A each rank holds
  size_t a_elems() const { return (size_t)shard_rows() * (size_t)k; }
  size_t w_elems() const { return (size_t)n * (size_t)k; }
  size_t c_elems() const { return (size_t)m * (size_t)n; }
  size_t gathered_elems() const { return (size_t)m * (size_t)k; }  // A_full
};

constexpr int64_t kSquareLimit = 100000;  // sizes below it are square; N and K stay below it

// Size on P ranks. Returns "" and fills `out`, or one line naming the size and the problem.
inline std::string parse_shape(int64_t size, int world, Shape& out) {
  Shape s;
  s.world = world;
  if (size > 0 && size < kSquareLimit) {
    s.m = s.n = s.k = size;
  } else {
    s.m = size / (kSquareLimit * kSquareLimit);
    s.n = (size / kSquareLimit) % kSquareLimit;
    s.k = size % kSquareLimit;
  }
  const std::string where = "size " + std::to_string(size) + " (M = " + std::to_string(s.m) + ", N = " + std::to_string(s.n) +
                            ", K = " + std::to_string(s.k) + ", P = " + std::to_string(world) +
                            "; size = S for M = N = K = S < 10^5, else M * 10^10 + N * 10^5 + K)";
  if (s.m <= 0 || s.n <= 0 || s.k <= 0) return where + ": M, N and K must be positive";
  // 16-byte rows: copies move whole 16-byte words, and cuBLAS's fast bf16 kernels want aligned ld.
  if (s.n % 8 != 0 || s.k % 8 != 0) return where + ": N and K must be multiples of 8";
  if (world < 1 || s.m % world != 0)
    return where + ": M = " + std::to_string(s.m) + " is not divisible by the " + std::to_string(world) + " ranks (A is sharded by rows)";
  if (s.m > (int64_t)1 << 31 || s.n * s.k > (int64_t)1 << 40) return where + ": too large";
  out = s;
  return "";
}

}  // namespace gemm_allgather
