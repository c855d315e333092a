// Where a candidate program came from: the seed, a patch of one of the three forms, or a copy
// of another island's program (migration). Stored as text in programs.patch_type and shown as
// such; code compares the enum, never the text.
#pragma once
#include <optional>
#include <string_view>

#include "braid/program/patch.hpp"

namespace braid {

enum class Origin { Seed, Diff, Full, Cross, Migrant };

std::string_view to_string(Origin o);  // "seed", "diff", "full", "cross", "migrant"
std::optional<Origin> origin_from(std::string_view s);
Origin origin_of(PatchType t);

// A child the search proposed: neither a seed nor a migrant copy. A stored text that names no
// origin counts as proposed.
bool is_proposed(Origin o);
bool is_proposed(std::string_view stored);

}  // namespace braid
