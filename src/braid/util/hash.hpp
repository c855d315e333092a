// Content hashes used for fingerprints, cache keys and knob vectors.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace braid {

std::uint64_t hash64(std::string_view data, std::uint64_t seed = 0);
// 16 lowercase hex digits of hash64.
std::string hash_hex(std::string_view data, std::uint64_t seed = 0);

}  // namespace braid
