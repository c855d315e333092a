// Patch types, full and cross patches, the validation of every child, and the emitters
// (patch.hpp). Diff patches are patch_diff.cpp; unified_diff is unified_diff.cpp.
#include "braid/program/patch.hpp"

#include <algorithm>
#include <optional>
#include <set>

#include "braid/program/markers.hpp"
#include "braid/program/patch_detail.hpp"

namespace braid {

using program_detail::BlockScan;
using program_detail::line_text;
using program_detail::LineSpan;
using program_detail::MarkerKind;
using program_detail::parse_marker;
using program_detail::scan_blocks;
using program_detail::trim;
using program_detail::trim_left;
using program_detail::trim_right;

std::string_view to_string(PatchType t) {
  switch (t) {
    case PatchType::Diff: return "diff";
    case PatchType::Full: return "full";
    case PatchType::Cross: return "cross";
  }
  return "diff";
}

std::optional<PatchType> patch_type_from(std::string_view s) {
  if (s == "diff") return PatchType::Diff;
  if (s == "full") return PatchType::Full;
  if (s == "cross") return PatchType::Cross;
  return std::nullopt;
}

namespace program_detail {

bool is_fence(std::string_view line) { return trim_left(line).substr(0, 3) == "```"; }

std::vector<std::string> lines_of(std::string_view text) {
  std::vector<std::string> out;
  for (const auto& span : program_detail::split_lines(text)) out.emplace_back(line_text(text, span));
  return out;
}

std::string quote_lines(const std::vector<std::string>& lines, std::size_t first, std::size_t count) {
  std::string out;
  for (std::size_t i = first; i < first + count && i < lines.size(); ++i) out += "    " + lines[i] + "\n";
  return out;
}

namespace {

// ---------------------------------------------------------------- validation

struct FrozenLine {
  std::size_t line = 0;  // 1-based
  std::string text;
};
std::vector<FrozenLine> frozen_lines(std::string_view text, const BlockScan& scan) {
  std::vector<bool> in_block(scan.lines.size(), false);
  for (const auto& b : scan.blocks)
    for (std::size_t i = b.first_line; i < b.end_line; ++i) in_block[i] = true;
  std::vector<FrozenLine> out;
  for (std::size_t i = 0; i < scan.lines.size(); ++i)
    if (!in_block[i]) out.push_back({i + 1, std::string(line_text(text, scan.lines[i]))});
  return out;
}

// First frozen line that differs, as readable text; empty when frozen texts are equal up to
// trailing whitespace and blank lines at the ends.
std::string frozen_difference(std::string_view parent, const BlockScan& parent_scan, std::string_view child,
                              const BlockScan& child_scan, std::string_view child_label) {
  auto strip = [](std::vector<FrozenLine> v) {
    while (!v.empty() && trim(v.back().text).empty()) v.pop_back();
    std::size_t lead = 0;
    while (lead < v.size() && trim(v[lead].text).empty()) ++lead;
    v.erase(v.begin(), v.begin() + static_cast<long>(lead));
    return v;
  };
  auto a = strip(frozen_lines(parent, parent_scan));
  auto b = strip(frozen_lines(child, child_scan));
  for (std::size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    std::string_view x = i < a.size() ? trim_right(a[i].text) : std::string_view("<end of file>");
    std::string_view y = i < b.size() ? trim_right(b[i].text) : std::string_view("<end of file>");
    if (x != y) {
      std::size_t line = i < a.size() ? a[i].line : (a.empty() ? 1 : a.back().line + 1);
      return "frozen line " + std::to_string(line) + " of the parent `" + std::string(x) + "` is `" + std::string(y) +
             "` in " + std::string(child_label);
    }
  }
  return {};
}

}  // namespace

void validate_child(const Program& parent, PatchOutcome& out) {
  if (out.text == parent.text()) {
    out.error = "the patch leaves the program unchanged; propose a change inside an evolve block.";
    return;
  }
  Program child = Program::parse(out.text, parent.origin());
  if (!child.ok()) {
    out.error = "the patched program is invalid: " + child.error()->message;
    return;
  }
  if (child.frozen_fingerprint() != parent.frozen_fingerprint()) {
    std::string detail = frozen_difference(parent.text(), scan_blocks(parent.text()), out.text, scan_blocks(out.text),
                                           "the patched program");
    out.error = "the patch changes frozen code outside the evolve blocks" + (detail.empty() ? "" : ": " + detail) +
                "; frozen code must stay exactly as it is.";
  }
}

namespace {

// ---------------------------------------------------------------- full / cross

bool is_default_name(const std::string& name, std::size_t index) { return name == "block" + std::to_string(index); }

PatchOutcome apply_full(const Program& parent, std::string_view patch) {
  PatchOutcome out;
  std::string answer;
  for (const auto& line : lines_of(patch))
    if (!is_fence(line)) answer += line + "\n";
  BlockScan got = scan_blocks(answer);
  BlockScan have = scan_blocks(parent.text());
  if (got.error) {
    if (got.blocks.empty() && got.error_line == 0)
      out.error =
          "the answer has no EVOLVE-BLOCK-START / EVOLVE-BLOCK-END markers; a full rewrite gives the new contents "
          "of every block between its markers.";
    else
      out.error = "the answer's EVOLVE-BLOCK markers are broken at its line " + std::to_string(got.error_line) + ": " +
                  *got.error;
    return out;
  }
  std::string names;
  for (const auto& b : have.blocks) names += (names.empty() ? "'" : ", '") + b.block.name + "'";

  // Map each parent block to an answer block: by name where the answer kept the names, else by
  // order when the answer left them out.
  std::vector<std::size_t> source(have.blocks.size(), 0);
  bool by_name = true;
  for (std::size_t i = 0; i < have.blocks.size() && by_name; ++i) {
    auto it = std::find_if(got.blocks.begin(), got.blocks.end(),
                           [&](const auto& g) { return g.block.name == have.blocks[i].block.name; });
    if (it == got.blocks.end()) by_name = false;
    else source[i] = static_cast<std::size_t>(it - got.blocks.begin());
  }
  bool unnamed = true;
  for (std::size_t j = 0; j < got.blocks.size(); ++j) unnamed = unnamed && is_default_name(got.blocks[j].block.name, j);
  if (!by_name || got.blocks.size() != have.blocks.size()) {
    if (got.blocks.size() < have.blocks.size() || (!by_name && !unnamed)) {
      std::string missing;
      for (const auto& b : have.blocks) {
        bool present = std::any_of(got.blocks.begin(), got.blocks.end(),
                                   [&](const auto& g) { return g.block.name == b.block.name; });
        if (!present) missing += (missing.empty() ? "'" : ", '") + b.block.name + "'";
      }
      out.error = "the answer gives " + std::to_string(got.blocks.size()) + " evolve block(s) but the program has " +
                  std::to_string(have.blocks.size()) + " (" + names + ")" +
                  (missing.empty() || unnamed ? "" : "; missing: " + missing) +
                  ". A full rewrite must give every block, each between its own START and END markers.";
      return out;
    }
    if (got.blocks.size() > have.blocks.size()) {
      out.error = "the answer gives " + std::to_string(got.blocks.size()) + " evolve blocks but the program has " +
                  std::to_string(have.blocks.size()) + " (" + names + "); blocks cannot be added.";
      return out;
    }
    for (std::size_t i = 0; i < have.blocks.size(); ++i) source[i] = i;
  }

  // A whole-program answer repeats the frozen code; it must then be unchanged. Prose around a
  // blocks-only answer shares (almost) no lines with the frozen code.
  std::multiset<std::string> parent_frozen;
  for (const auto& f : frozen_lines(parent.text(), have))
    if (!trim(f.text).empty() && parse_marker(f.text).kind == MarkerKind::None)
      parent_frozen.insert(std::string(trim(f.text)));
  std::size_t shared = 0;
  for (const auto& f : frozen_lines(answer, got)) {
    if (trim(f.text).empty() || parse_marker(f.text).kind != MarkerKind::None) continue;
    auto it = parent_frozen.find(std::string(trim(f.text)));
    if (it != parent_frozen.end()) {
      ++shared;
      parent_frozen.erase(it);
    }
  }
  std::size_t frozen_total = shared + parent_frozen.size();
  bool whole_program = shared >= 3 && shared * 10 >= frozen_total * 3;
  if (whole_program) {
    std::string detail = frozen_difference(parent.text(), have, answer, got, "the answer");
    if (!detail.empty()) {
      out.error = "the answer is a whole program, but its frozen code differs from the parent's: " + detail +
                  ". Frozen code must stay exactly as it is; give only the blocks if unsure.";
      return out;
    }
  }

  std::string text = parent.text();
  for (std::size_t i = have.blocks.size(); i-- > 0;) {
    const auto& g = got.blocks[source[i]].block;
    std::string content = answer.substr(g.begin, g.end - g.begin);
    const auto& h = have.blocks[i].block;
    text.replace(h.begin, h.end - h.begin, content);
  }
  out.text = std::move(text);
  validate_child(parent, out);
  if (!out.ok()) {
    out.rejected_text = std::move(out.text);
    out.text.clear();
  }
  return out;
}

}  // namespace
}  // namespace program_detail

PatchOutcome apply_patch(const Program& parent, PatchType type, std::string_view patch_text) {
  if (!parent.ok()) {
    PatchOutcome out;
    out.error = "the parent program is invalid: " + parent.error()->message;
    return out;
  }
  return type == PatchType::Diff ? program_detail::apply_diff(parent, patch_text)
                                 : program_detail::apply_full(parent, patch_text);
}

std::string make_diff(const std::vector<std::pair<std::string, std::string>>& search_replace) {
  std::string out;
  for (const auto& [search, replace] : search_replace) {
    if (!out.empty()) out += "\n";
    out += "<<<<<<< SEARCH\n" + search + (search.empty() || search.back() != '\n' ? "\n" : "");
    out += "=======\n" + replace + (replace.empty() || replace.back() != '\n' ? "\n" : "");
    out += ">>>>>>> REPLACE\n";
  }
  return out;
}

std::string make_full(const Program& parent, const std::vector<std::string>& block_contents) {
  BlockScan scan = scan_blocks(parent.text());
  std::string out;
  for (std::size_t i = 0; i < scan.blocks.size(); ++i) {
    const auto& b = scan.blocks[i];
    std::string content = i < block_contents.size() ? block_contents[i] : std::string(parent.block_text(i));
    if (!content.empty() && content.back() != '\n') content += "\n";
    if (i > 0) out += "\n";
    out += std::string(line_text(parent.text(), scan.lines[b.block.start_line - 1])) + "\n";
    out += content;
    out += std::string(line_text(parent.text(), scan.lines[b.end_line])) + "\n";
  }
  return out;
}

}  // namespace braid
