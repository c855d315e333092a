// Diff patches: SEARCH/REPLACE edits applied one after the other (patch.hpp), with a tolerant
// match for padding and indentation and, when nothing matches, the nearest text quoted.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <unordered_map>

#include "braid/program/markers.hpp"
#include "braid/program/patch_detail.hpp"

namespace braid::program_detail {
namespace {

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
      if (scan.blocks[b].first_line <= i && i + search.size() <= scan.blocks[b].end_line)
        m.block = static_cast<long>(b);
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
    } else if (wrote.size() > have.size() &&
               r.compare(0, wrote.size() - have.size(), wrote, 0, wrote.size() - have.size()) == 0) {
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
    out +=
        "block '" + scan.blocks[static_cast<std::size_t>(m.block)].block.name + "' line " + std::to_string(m.line + 1);
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
      return name +
             ": its REPLACE text contains an EVOLVE-BLOCK marker; markers are frozen and may not be added, "
             "moved or removed";
  std::vector<std::string> lines = lines_of(text);
  if (strip_blank_ends(search).empty()) return name + ": its SEARCH part is empty; quote the exact lines to replace";

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
        return name + ": the SEARCH text at line " + std::to_string(m.line + 1) + " crosses a marker of block '" +
               touched + "'; only lines strictly between EVOLVE-BLOCK-START and EVOLVE-BLOCK-END may change.";
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

}  // namespace

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
  if (!out.ok()) {
    out.rejected_text = std::move(out.text);
    out.text.clear();
  }
  return out;
}

}  // namespace braid::program_detail
