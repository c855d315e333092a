// moe_routing.hpp -- the MoE workload's shape and router, one definition for host and device.
//
// Plain C++ (host) and CUDA (__host__ __device__): the device programs route their tokens with
// it, the reference routes on the host with the same functions, and tests/moe checks it on the
// CPU (counts, skew ratio, determinism per seed, fresh routing per trial).
//
// Routing of one rank's tokens is a pure function of
//   * its own "route_seed" words (kSeedWords random uint32, an Input buffer: fresh every trial),
//   * the hot rank, taken from rank 0's words (every rank reads them: one hot rank per trial),
//   * the shape (tokens T, experts E spread evenly over the P ranks, skew s).
// Each of a token's kTopK picks goes to rank `hot` with weight s and to every other rank with
// weight 1, then to an expert of that rank not yet picked for the token (uniform start, linear
// probe). The hot rank's expected load is therefore s times any other rank's: 1:1, 2:1, 3:1, 5:1.
// Gate weights: scores 0.5 + U[0,1), normalised over the token's picks and scaled by
// kRoutedScale (DeepSeek-V3's routed_scaling_factor), so the output has unit-order values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#if defined(__CUDACC__)
#define MOE_HD __host__ __device__
#else
#define MOE_HD
#endif

namespace moe {

constexpr int kTopK = 8;
constexpr int64_t kHidden = 7168;        // DeepSeek-V3 hidden size
constexpr int64_t kInter = 2048;         // intermediate size per routed expert
constexpr int kSeedWords = 4;            // uint32 words of "route_seed" per rank
constexpr float kRoutedScale = 2.5f;

// The problem size encodes the shape as decimal fields T EEE S: size = T*10000 + E*10 + S.
//   1282561  -> T = 128 tokens per rank, E = 256 routed experts, skew 1 (even load)
//   40960325 -> T = 4096, E = 32, skew 5
struct Shape {
  int64_t tokens = 0;   // T, per rank
  int experts = 0;      // E, routed experts in all
  int skew = 1;         // hot rank's load : any other rank's load
  int world = 1;        // P
  int64_t hidden = kHidden;
  int64_t inter = kInter;
  MOE_HD int experts_per_rank() const { return experts / world; }
  // Rows one rank can receive at most: every pick of every token of every rank.
  MOE_HD int64_t max_recv_rows() const { return tokens * (int64_t)world * kTopK; }
  MOE_HD int64_t pairs() const { return tokens * kTopK; }
};

inline int64_t encode_size(int64_t tokens, int experts, int skew) { return tokens * 10000 + (int64_t)experts * 10 + skew; }

// "" when the size describes a shape that P ranks can run, else the problem in one sentence.
inline std::string decode_size(int64_t size, int world, Shape* out) {
  Shape s;
  s.world = world;
  s.skew = (int)(size % 10);
  s.experts = (int)((size / 10) % 1000);
  s.tokens = size / 10000;
  const std::string what = "size " + std::to_string(size) + " (T=" + std::to_string(s.tokens) + " E=" + std::to_string(s.experts) +
                           " skew=" + std::to_string(s.skew) + ", encoded T*10000 + E*10 + skew)";
  if (world < 1) return what + ": world must be >= 1";
  if (s.tokens < 1) return what + ": T must be >= 1";
  if (s.skew < 1) return what + ": skew must be 1..9";
  if (s.experts < 1 || s.experts % world != 0)
    return what + ": E must be a positive multiple of the " + std::to_string(world) + " ranks (experts are spread evenly)";
  if (s.experts / world < kTopK)
    return what + ": each rank needs at least " + std::to_string(kTopK) + " experts (E/P >= top-k), so the hot rank can take a token's every pick";
  if (out != nullptr) *out = s;
  return "";
}

// splitmix64 finaliser: the generator's only source of bits.
MOE_HD inline uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The hot rank of a trial, from rank 0's seed words.
MOE_HD inline int hot_rank(const uint32_t* rank0_words, int world) {
  if (world <= 1) return 0;
  return (int)(mix(((uint64_t)rank0_words[2] << 32 | rank0_words[3]) ^ 0x407ull) % (uint64_t)world);
}

// Routes token t of the rank whose seed words are `words`: ids[k] = global expert id (expert e
// lives on rank e / (E/P)), gates[k] = its gate weight.
MOE_HD inline void route_token(const uint32_t* words, int hot, int64_t t, const Shape& s, int32_t* ids, float* gates) {
  uint64_t state = mix(mix((uint64_t)words[0] << 32 | words[1]) ^ mix((uint64_t)t + 0x51ull));
  const int per_rank = s.experts_per_rank();
  const uint64_t total_weight = (uint64_t)s.skew + (uint64_t)(s.world - 1);
  float score_sum = 0.0f;
  for (int k = 0; k < kTopK; ++k) {
    state = mix(state);
    int rank = 0;
    if (s.world > 1) {
      const uint64_t r = state % total_weight;
      if (r < (uint64_t)s.skew) {
        rank = hot;
      } else {
        const int other = (int)(r - (uint64_t)s.skew);  // 0 .. P-2: the ranks other than hot, in order
        rank = other < hot ? other : other + 1;
      }
    }
    state = mix(state);
    int local = (int)((state >> 16) % (uint64_t)per_rank);
    // Distinct experts per token: probe forward within the rank (it has >= kTopK experts).
    for (int probe = 0; probe < per_rank; ++probe) {
      const int32_t id = rank * per_rank + local;
      bool taken = false;
      for (int j = 0; j < k; ++j) taken = taken || ids[j] == id;
      if (!taken) break;
      local = (local + 1) % per_rank;
    }
    ids[k] = rank * per_rank + local;
    state = mix(state);
    gates[k] = 0.5f + (float)(state >> 40) * (1.0f / 16777216.0f);
    score_sum += gates[k];
  }
  for (int k = 0; k < kTopK; ++k) gates[k] = kRoutedScale * gates[k] / score_sum;
}

// The bound's routing draw. The bound's phases (compute alone, communication alone) time one
// fixed draw of the trial's distribution (same T, E, skew): every rank derives every rank's seed
// words from its rank number, so each can count the whole draw on the host at set-up, and the
// timed phases hold no routing, no count exchange and no host round trip. Those belong to a
// strategy (the host-driven one pays them, a device-side one need not), not to a lower bound.
inline void bound_draw_words(int rank, uint32_t* words) {
  for (int i = 0; i < kSeedWords; ++i) words[i] = (uint32_t)mix(0xB0D0ull + (uint64_t)rank * kSeedWords + (uint64_t)i);
}

// Picks of `source`'s tokens per global expert in the bound's draw.
inline std::vector<int32_t> bound_draw_picks(const Shape& s, int source) {
  uint32_t words[kSeedWords], first[kSeedWords];
  bound_draw_words(source, words);
  bound_draw_words(0, first);
  const int hot = hot_rank(first, s.world);
  std::vector<int32_t> per_expert((size_t)s.experts, 0);
  int32_t ids[kTopK];
  float gates[kTopK];
  for (int64_t t = 0; t < s.tokens; ++t) {
    route_token(words, hot, t, s, ids, gates);
    for (int k = 0; k < kTopK; ++k) ++per_expert[(size_t)ids[k]];
  }
  return per_expert;
}

}  // namespace moe
