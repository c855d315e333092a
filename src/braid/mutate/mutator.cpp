#include "braid/mutate/mutator.hpp"

namespace braid {

std::string_view to_string(Phase p) { return p == Phase::Explore ? "explore" : "exploit"; }

std::optional<Phase> phase_from(std::string_view s) {
  if (s == "explore") return Phase::Explore;
  if (s == "exploit") return Phase::Exploit;
  return std::nullopt;
}

}  // namespace braid
