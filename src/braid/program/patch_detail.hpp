// Internals of apply_patch shared by its files: patch.cpp (patch types, full/cross patches, the
// validation of a child), patch_diff.cpp (SEARCH/REPLACE edits) and unified_diff.cpp.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "braid/program/patch.hpp"
#include "braid/program/program.hpp"

namespace braid::program_detail {

// A ``` code fence line around a patch (ignored).
bool is_fence(std::string_view line);
std::vector<std::string> lines_of(std::string_view text);
// `count` lines from `first`, each indented by four spaces, for an error paragraph.
std::string quote_lines(const std::vector<std::string>& lines, std::size_t first, std::size_t count);

// Sets out.error when the child's text (out.text) is unchanged, invalid, or changes frozen code.
void validate_child(const Program& parent, PatchOutcome& out);

PatchOutcome apply_diff(const Program& parent, std::string_view patch);

}  // namespace braid::program_detail
