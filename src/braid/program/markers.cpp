#include "braid/program/markers.hpp"

#include <set>

namespace braid::program_detail {

namespace {
constexpr std::string_view kStart = "EVOLVE-BLOCK-START";
constexpr std::string_view kEnd = "EVOLVE-BLOCK-END";

}  // namespace

std::vector<LineSpan> split_lines(std::string_view text) {
  std::vector<LineSpan> lines;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t nl = text.find('\n', pos);
    std::size_t stop = nl == std::string_view::npos ? text.size() : nl;
    std::size_t end = stop;
    if (end > pos && text[end - 1] == '\r') --end;
    lines.push_back({pos, end, nl == std::string_view::npos ? text.size() : nl + 1});
    pos = lines.back().next;
  }
  return lines;
}

Marker parse_marker(std::string_view line) {
  Marker m;
  std::string_view rest = trim(line);
  for (std::string_view opener : {"//", "/*", "#", "--"}) {
    if (rest.substr(0, opener.size()) == opener) {
      m.opener = std::string(opener);
      rest.remove_prefix(opener.size());
      break;
    }
  }
  if (m.opener.empty()) return m;
  // "///", "##" and "/**" are still comments of the same syntax.
  while (!rest.empty() && (rest[0] == '/' || rest[0] == '#' || rest[0] == '*' || rest[0] == '-') &&
         rest.substr(0, kStart.size()) != kStart && rest.substr(0, kEnd.size()) != kEnd)
    rest.remove_prefix(1);
  rest = trim_left(rest);
  std::string_view word;
  if (rest.substr(0, kStart.size()) == kStart) {
    m.kind = MarkerKind::Start;
    word = kStart;
  } else if (rest.substr(0, kEnd.size()) == kEnd) {
    m.kind = MarkerKind::End;
    word = kEnd;
  } else {
    return m;
  }
  rest.remove_prefix(word.size());
  // The marker word must end there ("EVOLVE-BLOCK-STARTED" is prose, not a marker).
  if (!rest.empty() && !is_space(rest[0]) && rest[0] != ':' && rest[0] != '*' && rest[0] != '-') {
    m.kind = MarkerKind::None;
    return m;
  }
  rest = trim(rest);
  if (!rest.empty() && rest[0] == ':') rest = trim(rest.substr(1));
  for (std::string_view closer : {"*/", "-->"}) {
    if (rest.size() >= closer.size() && rest.substr(rest.size() - closer.size()) == closer)
      rest = trim(rest.substr(0, rest.size() - closer.size()));
  }
  if (m.kind == MarkerKind::Start) m.name = std::string(rest);
  return m;
}

BlockScan scan_blocks(std::string_view text) {
  BlockScan scan;
  scan.lines = split_lines(text);
  std::optional<ScannedBlock> open;
  std::set<std::string> names;
  auto fail = [&](std::size_t line_index, std::string problem) {
    scan.error_line = line_index + 1;
    scan.error = std::move(problem);
    return scan;
  };
  for (std::size_t i = 0; i < scan.lines.size(); ++i) {
    Marker m = parse_marker(line_text(text, scan.lines[i]));
    if (m.kind == MarkerKind::Start) {
      if (open)
        return fail(i, "nested EVOLVE-BLOCK-START: block '" + open->block.name + "' opened at line " +
                           std::to_string(open->block.start_line) + " is not closed");
      ScannedBlock b;
      b.block.name = m.name.empty() ? "block" + std::to_string(scan.blocks.size()) : m.name;
      b.block.start_line = i + 1;
      b.block.begin = scan.lines[i].next;
      b.first_line = i + 1;
      b.opener = m.opener;
      if (!names.insert(b.block.name).second)
        return fail(i, "two evolve blocks are named '" + b.block.name + "'");
      open = std::move(b);
    } else if (m.kind == MarkerKind::End) {
      if (!open) return fail(i, "EVOLVE-BLOCK-END without a matching EVOLVE-BLOCK-START");
      open->block.end = scan.lines[i].begin;
      open->end_line = i;
      scan.blocks.push_back(std::move(*open));
      open.reset();
    }
  }
  if (open)
    return fail(open->block.start_line - 1,
                "EVOLVE-BLOCK-START of block '" + open->block.name + "' has no EVOLVE-BLOCK-END");
  if (scan.blocks.empty()) {
    scan.error_line = 0;
    scan.error = "no EVOLVE-BLOCK-START / EVOLVE-BLOCK-END region: nothing may evolve";
  }
  return scan;
}

}  // namespace braid::program_detail
