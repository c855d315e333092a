#include "braid/program/program.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <set>

#include "braid/program/constraint.hpp"
#include "braid/program/markers.hpp"
#include "braid/util/hash.hpp"

namespace braid {

using program_detail::BlockScan;
using program_detail::line_text;
using program_detail::LineSpan;
using program_detail::trim;
using program_detail::trim_right;

namespace {

constexpr std::string_view kKnobTag = "braid:knob";
constexpr std::string_view kRequireTag = "braid:require";

struct Problem {
  std::size_t line = 0;
  std::string message;
};

bool is_ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

bool is_integer(std::string_view s) {
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) s.remove_prefix(1);
  if (s.empty()) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

// Where a comment whose first word is `tag` starts on `line`; npos when the line has no such
// comment (a comment that merely mentions the tag is prose).
struct TaggedComment {
  std::size_t opener = std::string_view::npos;  // offset of the comment opener in the line
  std::string_view body;                        // text after the tag, closer and blanks removed
};
TaggedComment find_tagged_comment(std::string_view line, std::string_view tag) {
  TaggedComment out;
  std::size_t at = line.find(tag);
  while (at != std::string_view::npos) {
    std::string_view before = trim_right(line.substr(0, at));
    for (std::string_view opener : {"//", "/*", "#", "--"}) {
      if (before.size() >= opener.size() && before.substr(before.size() - opener.size()) == opener) {
        out.opener = before.size() - opener.size();
        // "///" or "##": the opener begins at the first of the repeated characters.
        while (out.opener > 0 && line[out.opener - 1] == opener[0]) --out.opener;
        std::string_view body = line.substr(at + tag.size());
        if (!body.empty() && is_ident_char(body[0])) break;  // "braid:knobs" is another word
        body = trim(body);
        if (body.size() >= 2 && body.substr(body.size() - 2) == "*/") body = trim(body.substr(0, body.size() - 2));
        out.body = body;
        return out;
      }
    }
    out.opener = std::string_view::npos;
    at = line.find(tag, at + tag.size());
  }
  return out;
}

std::vector<std::string> split_domain(std::string_view body, bool& empty_item) {
  std::vector<std::string> out;
  empty_item = false;
  if (body.empty()) return out;
  std::size_t pos = 0;
  while (true) {
    std::size_t bar = body.find('|', pos);
    std::string_view item = trim(body.substr(pos, bar == std::string_view::npos ? std::string_view::npos : bar - pos));
    if (item.empty()) empty_item = true;
    else out.emplace_back(item);
    if (bar == std::string_view::npos) break;
    pos = bar + 1;
  }
  return out;
}

bool is_python_like(const std::string& origin, const std::string& opener) {
  auto ends_with = [&](std::string_view suffix) {
    return origin.size() >= suffix.size() && origin.compare(origin.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return opener == "#" || ends_with(".py") || ends_with(".sh");
}

// A preprocessor directive other than #pragma, or empty.
std::string forbidden_directive(std::string_view line) {
  std::string_view t = trim(line);
  if (t.empty() || t[0] != '#') return {};
  t = program_detail::trim_left(t.substr(1));
  std::size_t n = 0;
  while (n < t.size() && is_ident_char(t[n])) ++n;
  std::string word(t.substr(0, n));
  if (word.empty() || word == "pragma") return {};
  return word;
}

// Parses `<type> <name> = <value>;` (C++) or `<name> = <value>` (Python) before the comment.
std::optional<Problem> parse_knob_declaration(std::string_view code, std::size_t code_offset, Knob& knob) {
  std::size_t eq = std::string_view::npos;
  for (std::size_t i = 0; i < code.size(); ++i) {
    if (code[i] != '=') continue;
    bool part_of_operator = (i + 1 < code.size() && code[i + 1] == '=') ||
                            (i > 0 && std::string_view("=!<>+-*/%&|^:").find(code[i - 1]) != std::string_view::npos);
    if (!part_of_operator) {
      eq = i;
      break;
    }
  }
  const std::string shape =
      "a knob line looks like `constexpr int kName = 4;  // braid:knob 1|2|4` or `K_NAME = 4  # braid:knob 1|2|4`";
  if (eq == std::string_view::npos) return Problem{0, shape};
  std::string_view lhs = trim_right(code.substr(0, eq));
  // Python annotation `K_CHUNKS: int = 4`: the name precedes a lone ':' (C++ types use "::").
  for (std::size_t i = 0; i < lhs.size(); ++i) {
    bool lone_colon = lhs[i] == ':' && (i == 0 || lhs[i - 1] != ':') && (i + 1 == lhs.size() || lhs[i + 1] != ':');
    if (lone_colon) {
      lhs = trim_right(lhs.substr(0, i));
      break;
    }
  }
  std::size_t name_start = lhs.size();
  while (name_start > 0 && is_ident_char(lhs[name_start - 1])) --name_start;
  knob.name = std::string(lhs.substr(name_start));
  if (knob.name.empty() || std::isdigit(static_cast<unsigned char>(knob.name[0]))) return Problem{0, shape};
  std::string_view type = trim(lhs.substr(0, name_start));
  std::string_view rhs = code.substr(eq + 1);
  std::size_t lead = rhs.size() - program_detail::trim_left(rhs).size();
  std::string_view value = trim(rhs);
  if (!value.empty() && value.back() == ';') value = trim_right(value.substr(0, value.size() - 1));
  if (value.empty()) return Problem{0, "knob " + knob.name + " has no value; " + shape};
  knob.value = std::string(value);
  knob.value_offset = code_offset + eq + 1 + lead;
  // The type only matters for bools; everything else is decided by the domain.
  bool typed_bool = false;
  for (std::size_t p = type.find("bool"); p != std::string_view::npos; p = type.find("bool", p + 1)) {
    bool left_ok = p == 0 || !is_ident_char(type[p - 1]);
    bool right_ok = p + 4 >= type.size() || !is_ident_char(type[p + 4]);
    if (left_ok && right_ok) typed_bool = true;
  }
  if (typed_bool) knob.kind = KnobKind::Bool;
  return std::nullopt;
}

std::optional<Problem> finish_knob_domain(std::string_view body, Knob& knob) {
  bool empty_item = false;
  knob.domain = split_domain(body, empty_item);
  if (empty_item) return Problem{0, "knob " + knob.name + " has an empty value in its domain '" + std::string(body) + "'"};
  if (knob.domain.empty()) {
    if (knob.value == "true" || knob.value == "false") {
      knob.domain = {"true", "false"};
    } else if (knob.value == "True" || knob.value == "False") {
      knob.domain = {"True", "False"};
    } else {
      return Problem{0, "knob " + knob.name + " has no domain: write the allowed values after braid:knob, e.g. `// braid:knob 1|2|4`"};
    }
    knob.kind = KnobKind::Bool;
  } else {
    std::set<std::string> unique(knob.domain.begin(), knob.domain.end());
    if (unique.size() != knob.domain.size())
      return Problem{0, "knob " + knob.name + " lists a value twice in its domain '" + std::string(body) + "'"};
    bool all_int = std::all_of(knob.domain.begin(), knob.domain.end(), [](const std::string& v) { return is_integer(v); });
    auto is_bool_text = [](const std::string& v) { return v == "true" || v == "false" || v == "True" || v == "False"; };
    bool all_bool = std::all_of(knob.domain.begin(), knob.domain.end(), is_bool_text);
    if (all_int) knob.kind = KnobKind::Int;
    else if (all_bool) knob.kind = KnobKind::Bool;
    else knob.kind = KnobKind::Enum;
  }
  if (std::find(knob.domain.begin(), knob.domain.end(), knob.value) == knob.domain.end()) {
    std::string joined;
    for (const auto& v : knob.domain) joined += (joined.empty() ? "" : "|") + v;
    return Problem{0, "knob " + knob.name + " = " + knob.value + " is outside its domain " + joined};
  }
  return std::nullopt;
}

std::vector<std::string> enum_symbols(const std::vector<Knob>& knobs) {
  std::vector<std::string> out;
  for (const auto& k : knobs)
    if (k.kind == KnobKind::Enum) out.insert(out.end(), k.domain.begin(), k.domain.end());
  return out;
}

}  // namespace

Program Program::parse(std::string text, std::string origin) {
  Program p;
  p.text_ = std::move(text);
  p.origin_ = std::move(origin);
  auto fail = [&](std::size_t line, const std::string& message) {
    p.error_ = ProgramError{line > 0 ? p.origin_ + ":" + std::to_string(line) + ": " + message
                                     : p.origin_ + ": " + message};
    return p;
  };

  BlockScan scan = program_detail::scan_blocks(p.text_);
  if (scan.error) return fail(scan.error_line, *scan.error);
  std::string_view text_view = p.text_;

  // Block index of each line; -1 for frozen lines (markers included).
  std::vector<long> owner(scan.lines.size(), -1);
  for (std::size_t b = 0; b < scan.blocks.size(); ++b) {
    for (std::size_t i = scan.blocks[b].first_line; i < scan.blocks[b].end_line; ++i) owner[i] = static_cast<long>(b);
    p.blocks_.push_back(scan.blocks[b].block);
  }

  std::set<std::string> knob_names;
  for (std::size_t i = 0; i < scan.lines.size(); ++i) {
    const LineSpan& span = scan.lines[i];
    std::string_view line = line_text(text_view, span);
    const std::size_t line_no = i + 1;
    if (owner[i] >= 0) {
      const auto& block = scan.blocks[static_cast<std::size_t>(owner[i])];
      if (!is_python_like(p.origin_, block.opener)) {
        std::string directive = forbidden_directive(line);
        if (!directive.empty())
          return fail(line_no, "preprocessor directive #" + directive + " in evolve block '" + block.block.name +
                                   "': only #pragma is allowed there (a directive could change frozen code)");
      }
    }
    if (TaggedComment knob_comment = find_tagged_comment(line, kKnobTag); knob_comment.opener != std::string_view::npos) {
      if (owner[i] < 0)
        return fail(line_no, "braid:knob outside every evolve block: a frozen knob could never change");
      Knob knob;
      knob.block = static_cast<std::size_t>(owner[i]);
      knob.line = line_no;
      if (auto problem = parse_knob_declaration(line.substr(0, knob_comment.opener), span.begin, knob))
        return fail(line_no, problem->message);
      if (auto problem = finish_knob_domain(knob_comment.body, knob)) return fail(line_no, problem->message);
      if (!knob_names.insert(knob.name).second) return fail(line_no, "knob " + knob.name + " is declared twice");
      p.knobs_.push_back(std::move(knob));
    } else if (TaggedComment require = find_tagged_comment(line, kRequireTag); require.opener != std::string_view::npos) {
      if (require.body.empty()) return fail(line_no, "braid:require without an expression");
      p.constraints_.push_back(Constraint{std::string(require.body), line_no});
    }
  }

  // Constraints must be well formed and hold for the program's own values: the defaults are
  // the seed's schedule, and a child that breaks a constraint would not compile.
  auto values = p.knob_values();
  auto symbols = enum_symbols(p.knobs_);
  for (const auto& c : p.constraints_) {
    ConstraintCheck check = evaluate_constraint(c.expr, values, symbols);
    if (!check.ok()) return fail(c.line, "braid:require " + c.expr + ": " + check.error);
    if (!check.holds) return fail(c.line, "knob values violate braid:require " + c.expr);
  }

  // Fingerprint every byte outside the blocks; the separator keeps "ab|c" and "a|bc" apart.
  std::string frozen;
  std::size_t pos = 0;
  for (const auto& b : p.blocks_) {
    frozen.append(text_view.substr(pos, b.begin - pos));
    frozen.push_back('\0');
    pos = b.end;
  }
  frozen.append(text_view.substr(pos));
  p.fingerprint_ = hash_hex(frozen);
  return p;
}

std::string_view Program::block_text(std::size_t i) const {
  if (i >= blocks_.size()) return {};
  return std::string_view(text_).substr(blocks_[i].begin, blocks_[i].end - blocks_[i].begin);
}

std::map<std::string, std::string> Program::knob_values() const {
  std::map<std::string, std::string> out;
  for (const auto& k : knobs_) out[k.name] = k.value;
  return out;
}

std::string knob_key_of(const std::map<std::string, std::string>& values) {
  std::string key;
  for (const auto& [name, value] : values) {
    if (!key.empty()) key += ';';
    key += name + "=" + value;
  }
  return key;
}

std::string Program::knob_key() const { return knob_key_of(knob_values()); }

const Knob* Program::find_knob(std::string_view name) const {
  for (const auto& k : knobs_)
    if (k.name == name) return &k;
  return nullptr;
}

std::optional<std::string> Program::violated_constraint(const std::map<std::string, std::string>& values) const {
  auto merged = knob_values();
  for (const auto& [name, value] : values) merged[name] = value;
  auto symbols = enum_symbols(knobs_);
  for (const auto& c : constraints_) {
    ConstraintCheck check = evaluate_constraint(c.expr, merged, symbols);
    if (!check.ok()) return c.expr + " (" + check.error + ")";
    if (!check.holds) return c.expr;
  }
  return std::nullopt;
}

EditResult with_knobs(const Program& program, const std::map<std::string, std::string>& values) {
  EditResult result;
  if (!program.ok()) {
    result.error = "cannot edit knobs of an invalid program: " + program.error()->message;
    return result;
  }
  std::vector<std::pair<const Knob*, std::string>> edits;
  for (const auto& [name, value] : values) {
    const Knob* knob = program.find_knob(name);
    if (!knob) {
      result.error = "unknown knob " + name;
      return result;
    }
    if (std::find(knob->domain.begin(), knob->domain.end(), value) == knob->domain.end()) {
      std::string joined;
      for (const auto& v : knob->domain) joined += (joined.empty() ? "" : "|") + v;
      result.error = "value " + value + " of knob " + name + " is outside its domain " + joined;
      return result;
    }
    edits.emplace_back(knob, value);
  }
  // Substitute from the end so earlier offsets stay valid.
  std::sort(edits.begin(), edits.end(), [](auto& a, auto& b) { return a.first->value_offset > b.first->value_offset; });
  result.text = program.text();
  for (const auto& [knob, value] : edits) result.text.replace(knob->value_offset, knob->value.size(), value);
  return result;
}

}  // namespace braid
