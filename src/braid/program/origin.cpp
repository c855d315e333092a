#include "braid/program/origin.hpp"

namespace braid {

std::string_view to_string(Origin o) {
  switch (o) {
    case Origin::Seed: return "seed";
    case Origin::Diff: return "diff";
    case Origin::Full: return "full";
    case Origin::Cross: return "cross";
    case Origin::Migrant: return "migrant";
  }
  return "diff";
}

std::optional<Origin> origin_from(std::string_view s) {
  for (Origin o : {Origin::Seed, Origin::Diff, Origin::Full, Origin::Cross, Origin::Migrant})
    if (s == to_string(o)) return o;
  return std::nullopt;
}

Origin origin_of(PatchType t) {
  switch (t) {
    case PatchType::Diff: return Origin::Diff;
    case PatchType::Full: return Origin::Full;
    case PatchType::Cross: return Origin::Cross;
  }
  return Origin::Diff;
}

bool is_proposed(Origin o) { return o != Origin::Seed && o != Origin::Migrant; }

bool is_proposed(std::string_view stored) {
  const auto o = origin_from(stored);
  return !o || is_proposed(*o);
}

}  // namespace braid
