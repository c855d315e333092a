// ring_shape.hpp -- the ring attention workload's shapes and token placements, plain C++ (also
// compiled by the CPU tests): the size encoding, where a block's rows sit in the sequence, the
// zig-zag swap, and the causal work a placement gives a rank.
#pragma once

#include <cstdint>
#include <string>

#ifdef __CUDACC__
#define RING_HD __host__ __device__
#else
#define RING_HD
#endif

namespace ring_attention {

constexpr int kQueryHeads = 32;
constexpr int kHeadDim = 128;

// Where the rows of a block sit in the whole sequence: local rows [0, len0) are positions
// [start0, start0 + len0), the rest [start1, ...). A contiguous block has len0 = its length.
struct Positions {
  int len0 = 0, start0 = 0, start1 = 0;
  RING_HD int global(int local) const { return local < len0 ? start0 + local : start1 + (local - len0); }
};
inline Positions contiguous_positions(int start, int len) { return {len, start, 0}; }

struct Shape {
  int seq = 0, hkv = 0, world = 1;  // S, Hkv, P
  bool causal = false;
  int local() const { return seq / world; }                                      // L
  size_t q_elems() const { return (size_t)local() * kQueryHeads * kHeadDim; }    // one rank's Q or out
  size_t kv_elems() const { return (size_t)local() * (size_t)hkv * kHeadDim; }   // one rank's K or V
  size_t kv_block_bytes() const { return 2 * kv_elems() * 2; }                   // K and V of one block, bf16
};

// Size N = C * 10^9 + S * 100 + Hkv on P ranks. Returns "" and fills `out`, or one line naming the
// size and the problem.
inline std::string parse_shape(int64_t size, int world, Shape& out) {
  Shape s;
  s.causal = size / 1000000000 == 1;
  s.seq = (int)((size % 1000000000) / 100);
  s.hkv = (int)(size % 100);
  s.world = world;
  const std::string where = "size " + std::to_string(size) + " (S = " + std::to_string(s.seq) + ", Hkv = " + std::to_string(s.hkv) +
                            ", causal = " + std::to_string(s.causal) + ", P = " + std::to_string(world) + "; size = C * 10^9 + S * 100 + Hkv)";
  if (size < 0 || size / 1000000000 > 1) return where + ": C must be 0 or 1";
  if (s.hkv < 1 || kQueryHeads % s.hkv != 0) return where + ": Hkv must divide 32";
  if (world < 1 || s.seq <= 0 || s.seq % (256 * world) != 0) return where + ": S must be a positive multiple of 256 * P";
  out = s;
  return "";
}

// Rank r's contiguous block of the sequence (the workload's placement).
inline Positions block_positions(int rank, const Shape& s) { return contiguous_positions(rank * s.local(), s.local()); }
// The zig-zag swap: rank r keeps the first half of its queries and takes the second half of its
// mirror's (the middle rank of an odd P is its own mirror).
inline int mirror_of(int rank, int world) { return world - 1 - rank; }
inline Positions zigzag_positions(int rank, const Shape& s) {
  const int L = s.local();
  return {L / 2, rank * L, mirror_of(rank, s.world) * L + L / 2};
}

// Query-key pairs a rank's queries at `q` (len rows) attend to under the causal mask: the work a
// placement gives it.
inline int64_t causal_pairs(const Positions& q, int len) {
  auto run = [](int64_t start, int64_t n) { return n * (start + 1) + n * (n - 1) / 2; };  // sum of (p + 1)
  const int len0 = q.len0 < len ? q.len0 : len;
  return run(q.start0, len0) + run(q.start1, len - len0);
}

}  // namespace ring_attention
