// Line and EVOLVE-BLOCK marker scanning shared by Program::parse and apply_patch. The scan
// here only checks marker structure (balance, nesting, names); knob and directive rules live in
// program.cpp, so that a patch can locate blocks in an intermediate text that is not yet valid.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "braid/program/program.hpp"

#include "braid/util/text.hpp"

namespace braid::program_detail {

struct LineSpan {
  std::size_t begin = 0;  // offset of the first character
  std::size_t end = 0;    // offset just past the last character, newline and '\r' excluded
  std::size_t next = 0;   // offset of the next line (past the newline)
};
std::vector<LineSpan> split_lines(std::string_view text);
inline std::string_view line_text(std::string_view text, const LineSpan& l) {
  return text.substr(l.begin, l.end - l.begin);
}

using braid::is_space;
using braid::trim;
using braid::trim_left;
using braid::trim_right;

enum class MarkerKind { None, Start, End };
struct Marker {
  MarkerKind kind = MarkerKind::None;
  std::string name;     // START only; empty when unnamed
  std::string opener;   // comment syntax that introduced it: "//", "/*", "#", "--"
};
// A marker is a comment line whose first word is EVOLVE-BLOCK-START or EVOLVE-BLOCK-END.
Marker parse_marker(std::string_view line);

struct ScannedBlock {
  EvolveBlock block;
  std::size_t first_line = 0;  // 0-based index of the first content line (after START)
  std::size_t end_line = 0;    // 0-based index of the END marker line
  std::string opener;          // comment syntax of the START marker
};
struct BlockScan {
  std::vector<LineSpan> lines;
  std::vector<ScannedBlock> blocks;
  std::size_t error_line = 0;  // 1-based; valid when error is set
  std::optional<std::string> error;
};
// Blocks in order; an error for nested, unbalanced or duplicate-named markers or no block.
BlockScan scan_blocks(std::string_view text);

}  // namespace braid::program_detail
