// The analyzer's group passes (analyzer_passes.hpp): which NCCL calls run inside an
// ncclGroupStart/End, written in one function, reached through the functions called between them,
// or opened and closed by a pair of wrappers (`pg.start_coalescing(); ... pg.end_coalescing();`),
// and which calls a bracket braid cannot pair keeps host NCCL.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "braid/convert/analyzer_passes.hpp"

namespace braid::convert {
namespace {

// The call of a wrapper at code token `site` is a statement of its own in its block
// (`pg.start_coalescing();`, `CHECK(group_begin());`), not the body of an unbraced if, loop or else.
bool statement_of_its_own(const std::vector<Token>& toks, std::size_t site) {
  std::size_t k = site;
  while (k > 0 && (toks[k - 1].kind == TokenKind::Identifier || toks[k - 1].text == "." || toks[k - 1].text == "->" ||
                   toks[k - 1].text == "::"))
    --k;
  const auto starts_statement = [&](std::size_t at) {
    return at == 0 || toks[at - 1].text == "{" || toks[at - 1].text == "}" || toks[at - 1].text == ";";
  };
  if (starts_statement(k)) return true;
  // An error-checking macro's use around it: `NAME ( call ) ;`.
  return k >= 2 && toks[k - 1].text == "(" && toks[k - 2].kind == TokenKind::Identifier && starts_statement(k - 2);
}

// The close of the block holding code token `at` (the end of the code when none does).
std::size_t block_end(const std::vector<Token>& toks, std::size_t at) {
  int depth = 0;
  for (std::size_t k = at; k < toks.size(); ++k) {
    depth += toks[k].text == "{" ? 1 : toks[k].text == "}" ? -1 : 0;
    if (depth < 0) return k;
  }
  return toks.size();
}

// `pg.start_coalescing(); pg.send(..); tp.send(..); pg.end_coalescing();`: a member function
// reaching an NCCL call (`holding`) called between the pair on another object than the opening
// wrapper's, maybe another communicator, which one converted group cannot serve.
bool another_objects_calls(const BufferFlow& flow, const std::vector<Token>& toks, std::size_t s, std::size_t e,
                           const std::set<std::string>& holding) {
  const auto object_of = [&](std::size_t name) {
    return name >= 2 && (toks[name - 1].text == "." || toks[name - 1].text == "->") ? toks[name - 2].text : "";
  };
  const std::string own = object_of(s);
  if (own.empty()) return false;
  for (std::size_t k = s + 1; k + 1 < e; ++k) {
    if (toks[k].kind != TokenKind::Identifier || toks[k + 1].text != "(") continue;
    const std::string object = object_of(k);
    if (object.empty() || object == own) continue;
    for (const std::string& f : flow.reached_between(k - 1, k + 1))
      if (holding.count(f)) return true;
  }
  return false;
}

// Each call of the opening wrapper followed, later in its block and at its depth, by a call of the
// closing one, and every call of the closing one so matched: the regions between them. Empty when
// any call is not paired that way (conditional on one side only, nested, left to another block).
std::vector<std::pair<std::size_t, std::size_t>> paired_regions(const BufferFlow& flow, const std::vector<Token>& toks,
                                                                const GroupBracket& open, const GroupBracket& close,
                                                                const std::set<std::string>& holding) {
  std::vector<std::size_t> opens = flow.call_sites_of(open.function), closes = flow.call_sites_of(close.function);
  std::sort(opens.begin(), opens.end());
  std::sort(closes.begin(), closes.end());
  if (opens.empty() || opens.size() != closes.size()) return {};
  std::vector<std::pair<std::size_t, std::size_t>> regions;
  for (std::size_t i = 0; i < opens.size(); ++i) {
    const std::size_t s = opens[i], e = closes[i];
    if (e <= s || (i + 1 < opens.size() && opens[i + 1] < e) || e >= block_end(toks, s)) return {};
    if (!statement_of_its_own(toks, s) || !statement_of_its_own(toks, e)) return {};
    if (another_objects_calls(flow, toks, s, e, holding)) return {};
    int depth = 0;
    for (std::size_t k = s; k < e && depth >= 0; ++k) depth += toks[k].text == "{" ? 1 : toks[k].text == "}" ? -1 : 0;
    if (depth != 0) return {};
    regions.emplace_back(s, e);
  }
  return regions;
}

}  // namespace

void pair_group_wrappers(const BufferFlow& flow, const std::vector<Token>& toks, const TokenIndex& token_at,
                         const std::vector<std::size_t>& collectives, Analysis& a) {
  // A wrapper holding an NCCL call besides its bracket is not only a bracket.
  std::set<std::string> holding;
  for (std::size_t ci : collectives)
    if (auto tok = token_at.find(a.calls[ci].call_begin); tok != token_at.end())
      holding.insert(flow.function_at(tok->second));
  const auto wrapper = [&](const GroupBracket& b) {
    return !b.paired && b.call < a.calls.size() && !b.function.starts_with("~") && !holding.count(b.function) &&
           flow.reached_through_value(b.function).first.empty();
  };
  for (GroupBracket& open : a.group_brackets) {
    if (!open.opens || !wrapper(open)) continue;
    for (GroupBracket& close : a.group_brackets) {
      if (close.opens || close.function == open.function || !wrapper(close)) continue;
      auto regions = paired_regions(flow, toks, open, close, holding);
      if (regions.empty()) continue;
      const int g = (int)a.groups.size();
      Call& start = a.calls[open.call];
      // The group runs where its opening call does: on some ranks only when that call is conditional.
      for (const auto& [s, e] : regions)
        start.conditional =
            start.conditional || flow.conditional(s) || !flow.conditional_caller(flow.function_at(s)).first.empty();
      start.group = g;
      a.calls[close.call].group = g;
      a.groups.push_back(Group{open.line, close.line, open.call, close.call, {}, std::move(regions)});
      open.paired = close.paired = true;
      break;
    }
  }
}

void attach_reached_group_members(const BufferFlow& flow, const TokenIndex& token_at,
                                  const std::vector<std::size_t>& collectives, Analysis& a) {
  const auto token_of = [&](std::size_t call) {
    auto t = token_at.find(a.calls[call].call_begin);
    return t == token_at.end() ? SIZE_MAX : t->second;
  };
  std::vector<std::set<std::string>> reached(a.groups.size());
  for (std::size_t g = 0; g < a.groups.size(); ++g) {
    const std::size_t from = token_of(a.groups[g].start_call), to = token_of(a.groups[g].end_call);
    if (a.groups[g].regions.empty() && from != SIZE_MAX && to != SIZE_MAX) reached[g] = flow.reached_between(from, to);
    for (const auto& [s, e] : a.groups[g].regions) reached[g].merge(flow.reached_between(s, e));
  }
  // A call written between a pair of wrappers' calls is a member as if written in the group.
  const auto written_in = [&](std::size_t tok) {
    for (std::size_t g = 0; g < a.groups.size(); ++g)
      for (const auto& [s, e] : a.groups[g].regions)
        if (tok > s && tok < e) return (int)g;
    return -1;
  };
  for (std::size_t ci : collectives) {
    Call& c = a.calls[ci];
    const std::size_t tok = token_of(ci);
    if (c.group >= 0 || tok == SIZE_MAX) continue;
    if (const int g = written_in(tok); g >= 0) {
      c.group = g;
      a.groups[(std::size_t)g].members.push_back(ci);
      continue;
    }
    if (const std::size_t lambda = flow.unnamed_lambda_at(tok); lambda != SIZE_MAX && !a.groups.empty()) {
      if (c.unresolved.empty())
        c.unresolved = fmt::format(
            "in a lambda bound to no name (line {}): whoever holds it may call it inside an NCCL "
            "group, where a converted call must not run on its own",
            c.line);
      continue;
    }
    const std::string function = flow.function_at(tok);
    if (function.empty()) continue;
    if (const auto [via, line] = flow.reached_through_value(function); !via.empty() && !a.groups.empty()) {
      if (c.unresolved.empty())
        c.unresolved = fmt::format(
            "{}() is also used as a value at line {}: called through a pointer, maybe inside an "
            "NCCL group, where a converted call must not run on its own",
            via, line);
      continue;
    }
    std::vector<std::size_t> in;
    for (std::size_t g = 0; g < a.groups.size(); ++g)
      if (reached[g].count(function)) in.push_back(g);
    if (in.size() > 1) {
      if (c.unresolved.empty())
        c.unresolved = fmt::format("{}() runs inside the groups at lines {} and {}: one call site joins one group",
                                   function, a.groups[in[0]].start_line, a.groups[in[1]].start_line);
    } else if (in.size() == 1) {
      const Group& grp = a.groups[in[0]];
      c.group = (int)in[0];
      a.groups[in[0]].members.push_back(ci);
      c.via.push_back(grp.regions.empty()
                          ? fmt::format("runs inside the group at line {} through {}()", grp.start_line, function)
                          : fmt::format("runs inside the group that {}() opens (line {}) through {}()",
                                        a.calls[grp.start_call].function, grp.start_line, function));
    }
  }
}

void hold_calls_near_group_brackets(const BufferFlow& flow, const std::vector<Token>& toks, const TokenIndex& token_at,
                                    const std::vector<std::size_t>& collectives, Analysis& a) {
  struct Region {
    std::size_t from = 0, to = 0;  // code tokens
    const GroupBracket* bracket = nullptr;
  };
  std::vector<Region> regions;
  std::vector<std::size_t> closings;  // calls of a closing wrapper (`group_end_checked()`)
  for (const GroupBracket& b : a.group_brackets)
    if (!b.opens && !b.paired && !b.function.starts_with("~"))
      for (std::size_t site : flow.call_sites_of(b.function)) closings.push_back(site);
  for (const GroupBracket& b : a.group_brackets) {
    if (b.paired) continue;
    for (const FunctionDef& f : flow.functions())
      if (f.name == b.function) regions.push_back(Region{f.body_open, f.body_close, &b});
    if (!b.opens) continue;
    for (std::size_t site : flow.call_sites_of(b.function)) {
      std::size_t end = block_end(toks, site);  // the end of the block the call (or the guard) is in
      for (std::size_t close : closings)        // or where a closing wrapper is called, in that block
        if (close > site && close < end) end = close;
      regions.push_back(Region{site, end, &b});
    }
  }
  std::map<std::string, const GroupBracket*> reached;  // functions called from a region
  for (const Region& r : regions)
    for (const std::string& f : flow.reached_between(r.from, r.to)) reached.emplace(f, r.bracket);
  for (std::size_t ci : collectives) {
    Call& c = a.calls[ci];
    auto tok = token_at.find(c.call_begin);
    if (tok == token_at.end() || !c.unresolved.empty()) continue;
    const GroupBracket* by = nullptr;
    for (const Region& r : regions)
      if (!by && tok->second > r.from && tok->second < r.to) by = r.bracket;
    if (auto it = reached.find(flow.function_at(tok->second)); !by && it != reached.end()) by = it->second;
    if (!by) continue;
    c.unresolved = fmt::format(
        "may run inside an NCCL group that {}() opens or closes (line {}) unpaired: braid does not follow which calls "
        "such a group holds, and a converted call must not launch on its own where the original grouped it",
        by->function, by->line);
  }
}

}  // namespace braid::convert
