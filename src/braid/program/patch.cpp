#include "braid/program/patch.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "braid/program/markers.hpp"

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

namespace {

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

// ---------------------------------------------------------------- diff parsing

struct Edit {
  std::vector<std::string> search;
  std::vector<std::string> replace;
};

bool run_of(std::string_view s, char c, std::size_t at_least, std::string_view& rest) {
  std::size_t n = 0;
  while (n < s.size() && s[n] == c) ++n;
  if (n < at_least) return false;
  rest = trim(s.substr(n));
  return true;
}
bool is_search_start(std::string_view line) {
  std::string_view rest;
  return run_of(trim(line), '<', 4, rest) && rest == "SEARCH";
}
bool is_divider(std::string_view line) {
  std::string_view rest;
  return run_of(trim(line), '=', 4, rest) && (rest.empty() || rest == "REPLACE");
}
bool is_replace_end(std::string_view line) {
  std::string_view rest;
  return run_of(trim(line), '>', 4, rest) && (rest.empty() || rest == "REPLACE");
}

struct ParsedEdits {
  std::vector<Edit> edits;
  std::string error;
};

ParsedEdits parse_edits(std::string_view patch) {
  ParsedEdits out;
  enum { Outside, InSearch, InReplace } state = Outside;
  Edit current;
  for (const std::string& line : lines_of(patch)) {
    if (state == Outside) {
      if (is_search_start(line)) state = InSearch;
      continue;
    }
    std::string edit_name = "edit " + std::to_string(out.edits.size() + 1);
    if (is_search_start(line)) {
      out.error = edit_name + " is not closed: a new <<<<<<< SEARCH starts before its " +
                  (state == InSearch ? "=======" : ">>>>>>> REPLACE") + " line";
      return out;
    }
    if (state == InSearch) {
      if (is_divider(line)) state = InReplace;
      else if (is_replace_end(line)) {
        out.error = edit_name + " has no ======= line between its SEARCH and REPLACE parts";
        return out;
      } else if (!is_fence(line)) current.search.push_back(line);
    } else {
      if (is_replace_end(line)) {
        out.edits.push_back(std::move(current));
        current = Edit{};
        state = Outside;
      } else if (!is_fence(line)) {
        current.replace.push_back(line);
      }
    }
  }
  if (state != Outside) {
    out.error = "edit " + std::to_string(out.edits.size() + 1) + " is not closed with a >>>>>>> REPLACE line";
    return out;
  }
  if (out.edits.empty())
    out.error =
        "no SEARCH/REPLACE edit found; write each edit as <<<<<<< SEARCH, the exact old lines, =======, the new "
        "lines, >>>>>>> REPLACE";
  return out;
}

// ---------------------------------------------------------------- nearest text

// Similarity of two lines as the Dice coefficient of their character bigrams (blanks ignored):
// cheap enough to score every window of a large block.
using Bigrams = std::vector<std::uint16_t>;
Bigrams bigrams_of(std::string_view line) {
  std::string compact;
  for (char c : line)
    if (c != ' ' && c != '\t' && c != '\r') compact.push_back(c);
  Bigrams out;
  for (std::size_t i = 0; i + 1 < compact.size(); ++i)
    out.push_back(static_cast<std::uint16_t>((static_cast<unsigned char>(compact[i]) << 8) |
                                             static_cast<unsigned char>(compact[i + 1])));
  if (compact.size() == 1) out.push_back(static_cast<unsigned char>(compact[0]));
  std::sort(out.begin(), out.end());
  return out;
}
double dice(const Bigrams& a, const Bigrams& b) {
  if (a.empty() && b.empty()) return 1.0;
  if (a.empty() || b.empty()) return 0.0;
  std::size_t i = 0, j = 0, common = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i] == b[j]) {
      ++common;
      ++i;
      ++j;
    } else if (a[i] < b[j]) {
      ++i;
    } else {
      ++j;
    }
  }
  return 2.0 * static_cast<double>(common) / static_cast<double>(a.size() + b.size());
}

struct Nearest {
  std::size_t block = 0;
  std::size_t first_line = 0;  // 0-based
  std::size_t count = 0;
  double score = -1.0;
};

Nearest nearest_window(const BlockScan& scan, const std::vector<std::string>& lines,
                       const std::vector<std::string>& search) {
  std::vector<Bigrams> search_grams;
  for (const auto& s : search) search_grams.push_back(bigrams_of(s));
  std::unordered_map<std::size_t, Bigrams> line_grams;
  auto grams = [&](std::size_t i) -> const Bigrams& {
    auto it = line_grams.find(i);
    if (it == line_grams.end()) it = line_grams.emplace(i, bigrams_of(lines[i])).first;
    return it->second;
  };
  Nearest best;
  for (std::size_t b = 0; b < scan.blocks.size(); ++b) {
    std::size_t first = scan.blocks[b].first_line, stop = scan.blocks[b].end_line;
    if (stop <= first) continue;
    std::size_t width = std::min(search.size(), stop - first);
    for (std::size_t i = first; i + width <= stop; ++i) {
      double total = 0.0;
      for (std::size_t k = 0; k < width; ++k) total += dice(grams(i + k), search_grams[k]);
      double score = total / static_cast<double>(search.size());
      if (score > best.score) best = {b, i, width, score};
    }
  }
  return best;
}

// ---------------------------------------------------------------- diff application

struct Match {
  std::size_t line = 0;  // 0-based first matched line
  long block = -1;       // block holding the whole match, -1 when it touches frozen text
};

std::vector<Match> find_matches(const BlockScan& scan, const std::vector<std::string>& lines,
                                const std::vector<std::string>& search, bool tolerant) {
  std::vector<Match> out;
  if (search.empty() || search.size() > lines.size()) return out;
  auto same = [&](const std::string& a, const std::string& b) { return tolerant ? trim(a) == trim(b) : a == b; };
  for (std::size_t i = 0; i + search.size() <= lines.size(); ++i) {
    bool all = true;
    for (std::size_t k = 0; k < search.size() && all; ++k) all = same(lines[i + k], search[k]);
    if (!all) continue;
    Match m{i, -1};
    for (std::size_t b = 0; b < scan.blocks.size(); ++b)
      if (scan.blocks[b].first_line <= i && i + search.size() <= scan.blocks[b].end_line) m.block = static_cast<long>(b);
    out.push_back(m);
  }
  return out;
}

std::string_view indentation(std::string_view line) { return line.substr(0, line.size() - trim_left(line).size()); }

// A tolerant match may differ in indentation: shift the new lines by the same amount.
std::vector<std::string> reindent(const std::vector<std::string>& replace, const std::vector<std::string>& search,
                                  const std::vector<std::string>& lines, std::size_t at) {
  std::optional<std::size_t> k;
  for (std::size_t i = 0; i < search.size(); ++i)
    if (!trim(search[i]).empty()) {
      k = i;
      break;
    }
  if (!k) return replace;
  std::string have(indentation(lines[at + *k]));
  std::string wrote(indentation(search[*k]));
  if (have == wrote) return replace;
  std::vector<std::string> out;
  for (const auto& r : replace) {
    if (trim(r).empty()) {
      out.push_back(r);
    } else if (have.size() > wrote.size() && have.compare(have.size() - wrote.size(), wrote.size(), wrote) == 0) {
      out.push_back(have.substr(0, have.size() - wrote.size()) + r);
    } else if (wrote.size() > have.size() && r.compare(0, wrote.size() - have.size(), wrote, 0, wrote.size() - have.size()) == 0) {
      out.push_back(r.substr(wrote.size() - have.size()));
    } else {
      out.push_back(r);
    }
  }
  return out;
}

std::vector<std::string> strip_blank_ends(std::vector<std::string> v) {
  while (!v.empty() && trim(v.back()).empty()) v.pop_back();
  std::size_t lead = 0;
  while (lead < v.size() && trim(v[lead]).empty()) ++lead;
  v.erase(v.begin(), v.begin() + static_cast<long>(lead));
  return v;
}

std::string where_list(const BlockScan& scan, const std::vector<Match>& matches) {
  std::string out;
  for (const auto& m : matches) {
    if (!out.empty()) out += ", ";
    out += "block '" + scan.blocks[static_cast<std::size_t>(m.block)].block.name + "' line " + std::to_string(m.line + 1);
  }
  return out;
}

std::string join_lines(const std::vector<std::string>& lines, std::string_view newline, bool trailing) {
  std::string out;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    out += lines[i];
    if (i + 1 < lines.size() || trailing) out += newline;
  }
  return out;
}

// Applies one edit to `text`; returns an error paragraph or nullopt.
std::optional<std::string> apply_edit(std::string& text, const Edit& edit, std::size_t index) {
  const std::string name = "edit " + std::to_string(index + 1);
  BlockScan scan = scan_blocks(text);
  if (scan.error) return name + ": the program's markers are broken before this edit: " + *scan.error;
  std::vector<std::string> search = edit.search;
  std::vector<std::string> replace = edit.replace;
  // A marker line quoted unchanged at either end is only an anchor: keep the edit inside it.
  auto same_marker = [](const std::string& a, const std::string& b) {
    return parse_marker(a).kind != MarkerKind::None && trim(a) == trim(b);
  };
  while (!search.empty() && !replace.empty() && same_marker(search.front(), replace.front())) {
    search.erase(search.begin());
    replace.erase(replace.begin());
  }
  while (!search.empty() && !replace.empty() && same_marker(search.back(), replace.back())) {
    search.pop_back();
    replace.pop_back();
  }
  for (const auto& r : replace)
    if (parse_marker(r).kind != MarkerKind::None)
      return name + ": its REPLACE text contains an EVOLVE-BLOCK marker; markers are frozen and may not be added, "
                    "moved or removed";
  std::vector<std::string> lines = lines_of(text);
  if (strip_blank_ends(search).empty())
    return name + ": its SEARCH part is empty; quote the exact lines to replace";

  auto in_blocks = [](const std::vector<Match>& all) {
    std::vector<Match> out;
    for (const auto& m : all)
      if (m.block >= 0) out.push_back(m);
    return out;
  };
  bool tolerant = false;
  std::vector<Match> all = find_matches(scan, lines, search, false);
  std::vector<Match> good = in_blocks(all);
  if (good.empty()) {
    // LLMs often pad SEARCH with blank lines or re-indent it.
    auto blank = [](const std::string& l) { return trim(l).empty(); };
    auto leading_blanks = [&](const std::vector<std::string>& v) {
      return static_cast<std::size_t>(std::find_if_not(v.begin(), v.end(), blank) - v.begin());
    };
    auto trailing_blanks = [&](const std::vector<std::string>& v) {
      return static_cast<std::size_t>(std::find_if_not(v.rbegin(), v.rend(), blank) - v.rbegin());
    };
    std::size_t search_lead = leading_blanks(search), search_trail = trailing_blanks(search);
    search = strip_blank_ends(search);
    std::vector<Match> loose = find_matches(scan, lines, search, true);
    std::vector<Match> loose_good = in_blocks(loose);
    if (!loose_good.empty()) {
      tolerant = true;
      good = loose_good;
      // Drop the blank lines that padded SEARCH from REPLACE too, so they are not duplicated.
      std::size_t lead = std::min(search_lead, leading_blanks(replace));
      replace.erase(replace.begin(), replace.begin() + static_cast<long>(lead));
      std::size_t trail = std::min(search_trail, trailing_blanks(replace));
      replace.erase(replace.end() - static_cast<long>(trail), replace.end());
    } else if (all.empty()) {
      all = loose;
    }
  }
  if (good.size() > 1)
    return name + ": the SEARCH text occurs " + std::to_string(good.size()) + " times in the evolve blocks (" +
           where_list(scan, good) + "); include more surrounding lines so that it matches exactly once.";
  if (good.empty()) {
    if (!all.empty()) {
      const Match& m = all.front();
      std::string touched;
      for (const auto& b : scan.blocks) {
        bool overlaps = m.line < b.end_line && m.line + search.size() > b.first_line;
        if (overlaps) touched = b.block.name;
      }
      if (!touched.empty())
        return name + ": the SEARCH text at line " + std::to_string(m.line + 1) +
               " crosses a marker of block '" + touched +
               "'; only lines strictly between EVOLVE-BLOCK-START and EVOLVE-BLOCK-END may change.";
      return name + ": the SEARCH text is in frozen code at line " + std::to_string(m.line + 1) +
             ", outside every evolve block; only code between EVOLVE-BLOCK-START and EVOLVE-BLOCK-END may change.";
    }
    Nearest near = nearest_window(scan, lines, search);
    std::string msg = name + ": the SEARCH text was not found in any evolve block.";
    if (near.score >= 0.0) {
      msg += " Nearest text, block '" + scan.blocks[near.block].block.name + "' line " +
             std::to_string(near.first_line + 1) + ":\n" + quote_lines(lines, near.first_line, near.count);
    }
    msg += "Copy the SEARCH lines exactly from the current program.";
    return msg;
  }

  const Match& m = good.front();
  if (tolerant) replace = reindent(replace, search, lines, m.line);
  std::vector<LineSpan> spans = program_detail::split_lines(text);
  const LineSpan& first = spans[m.line];
  const LineSpan& last = spans[m.line + search.size() - 1];
  bool had_newline = last.next > last.end;
  std::string newline = text.find("\r\n") != std::string::npos ? "\r\n" : "\n";
  std::string replacement = join_lines(replace, newline, had_newline);
  text.replace(first.begin, last.next - first.begin, replacement);
  return std::nullopt;
}

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
      return "frozen line " + std::to_string(line) + " of the parent `" + std::string(x) + "` is `" +
             std::string(y) + "` in " + std::string(child_label);
    }
  }
  return {};
}

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
    std::string detail = frozen_difference(parent.text(), scan_blocks(parent.text()), out.text,
                                           scan_blocks(out.text), "the patched program");
    out.error = "the patch changes frozen code outside the evolve blocks" + (detail.empty() ? "" : ": " + detail) +
                "; frozen code must stay exactly as it is.";
  }
}

PatchOutcome apply_diff(const Program& parent, std::string_view patch) {
  PatchOutcome out;
  ParsedEdits parsed = parse_edits(patch);
  if (!parsed.error.empty()) {
    out.error = parsed.error;
    return out;
  }
  std::string text = parent.text();
  for (std::size_t i = 0; i < parsed.edits.size(); ++i) {
    if (auto err = apply_edit(text, parsed.edits[i], i)) {
      out.error = *err;
      return out;
    }
  }
  out.text = std::move(text);
  out.edits = static_cast<int>(parsed.edits.size());
  validate_child(parent, out);
  if (!out.ok()) out.text.clear();
  return out;
}

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
      out.error = "the answer's EVOLVE-BLOCK markers are broken at its line " + std::to_string(got.error_line) +
                  ": " + *got.error;
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
    if (!trim(f.text).empty() && parse_marker(f.text).kind == MarkerKind::None) parent_frozen.insert(std::string(trim(f.text)));
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
  if (!out.ok()) out.text.clear();
  return out;
}

}  // namespace

PatchOutcome apply_patch(const Program& parent, PatchType type, std::string_view patch_text) {
  if (!parent.ok()) {
    PatchOutcome out;
    out.error = "the parent program is invalid: " + parent.error()->message;
    return out;
  }
  return type == PatchType::Diff ? apply_diff(parent, patch_text) : apply_full(parent, patch_text);
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

// ---------------------------------------------------------------- unified diff

std::string unified_diff(std::string_view before, std::string_view after, int context) {
  std::vector<std::string> a = lines_of(before), b = lines_of(after);
  if (a == b) return {};
  context = std::max(context, 0);
  // Common prefix and suffix first; LCS on the middle (a full rewrite when it is too large).
  std::size_t prefix = 0;
  while (prefix < a.size() && prefix < b.size() && a[prefix] == b[prefix]) ++prefix;
  std::size_t suffix = 0;
  while (suffix < a.size() - prefix && suffix < b.size() - prefix &&
         a[a.size() - 1 - suffix] == b[b.size() - 1 - suffix])
    ++suffix;
  std::size_t n = a.size() - prefix - suffix, m = b.size() - prefix - suffix;
  enum Op : char { Keep = ' ', Del = '-', Add = '+' };
  std::vector<std::pair<Op, std::size_t>> script;  // index into a (Keep/Del) or b (Add)
  for (std::size_t i = 0; i < prefix; ++i) script.emplace_back(Keep, i);
  if (n * m <= 4'000'000) {
    std::vector<std::uint32_t> lcs((n + 1) * (m + 1), 0);
    auto at = [&](std::size_t i, std::size_t j) -> std::uint32_t& { return lcs[i * (m + 1) + j]; };
    for (std::size_t i = n; i-- > 0;)
      for (std::size_t j = m; j-- > 0;)
        at(i, j) = a[prefix + i] == b[prefix + j] ? at(i + 1, j + 1) + 1 : std::max(at(i + 1, j), at(i, j + 1));
    std::size_t i = 0, j = 0;
    while (i < n || j < m) {
      if (i < n && j < m && a[prefix + i] == b[prefix + j]) {
        script.emplace_back(Keep, prefix + i);
        ++i;
        ++j;
      } else if (j < m && (i == n || at(i, j + 1) > at(i + 1, j))) {
        script.emplace_back(Add, prefix + j);
        ++j;
      } else {
        script.emplace_back(Del, prefix + i);
        ++i;
      }
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) script.emplace_back(Del, prefix + i);
    for (std::size_t j = 0; j < m; ++j) script.emplace_back(Add, prefix + j);
  }
  for (std::size_t i = 0; i < suffix; ++i) script.emplace_back(Keep, a.size() - suffix + i);

  // Line numbers before each script entry, to label hunks.
  std::vector<std::size_t> a_line(script.size() + 1), b_line(script.size() + 1);
  for (std::size_t k = 0, x = 0, y = 0; k <= script.size(); ++k) {
    a_line[k] = x;
    b_line[k] = y;
    if (k == script.size()) break;
    if (script[k].first != Add) ++x;
    if (script[k].first != Del) ++y;
  }
  std::string out = "--- parent\n+++ child\n";
  const std::size_t ctx = static_cast<std::size_t>(context);
  std::size_t k = 0;
  while (k < script.size()) {
    while (k < script.size() && script[k].first == Keep) ++k;
    if (k == script.size()) break;
    std::size_t start = k >= ctx ? k - ctx : 0;
    // Extend the hunk while the next change is within 2*context kept lines.
    std::size_t end = k;
    while (true) {
      while (end < script.size() && script[end].first != Keep) ++end;
      std::size_t next = end;
      while (next < script.size() && script[next].first == Keep) ++next;
      if (next < script.size() && next - end <= 2 * ctx) {
        end = next;
        continue;
      }
      end = std::min(script.size(), end + ctx);
      break;
    }
    std::size_t a_count = a_line[end] - a_line[start], b_count = b_line[end] - b_line[start];
    out += "@@ -" + std::to_string(a_count ? a_line[start] + 1 : a_line[start]) + "," + std::to_string(a_count) +
           " +" + std::to_string(b_count ? b_line[start] + 1 : b_line[start]) + "," + std::to_string(b_count) + " @@\n";
    for (std::size_t s = start; s < end; ++s) {
      const auto& [op, idx] = script[s];
      out += static_cast<char>(op);
      out += op == Add ? b[idx] : a[idx];
      out += "\n";
    }
    k = end;
  }
  return out;
}

}  // namespace braid
