#include "braid/util/hash.hpp"

#include <fmt/format.h>
#include <xxhash.h>

namespace braid {

std::uint64_t hash64(std::string_view data, std::uint64_t seed) {
  return XXH3_64bits_withSeed(data.data(), data.size(), seed);
}

std::string hash_hex(std::string_view data, std::uint64_t seed) {
  return fmt::format("{:016x}", hash64(data, seed));
}

}  // namespace braid
