// The analyzer's pass on the streams of the collectives (analyzer_passes.hpp): a call site whose
// launches may run on several streams stays host NCCL, unless it is a send or receive whose every
// launch runs on one stream.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>

#include "braid/convert/analyzer_passes.hpp"

namespace braid::convert {
namespace {

// `P.st[FWD]` with `enum { FWD = 0, .. }` (or a `const int`) is `P.st[0]`: one element, whatever runs.
std::string with_constant_indices(const std::string& text, const std::map<std::string, int64_t>& constants) {
  const std::vector<Token> t = code_tokens(lex(text).tokens);
  std::string out;
  for (std::size_t k = 0; k < t.size(); ++k) {
    const bool index = k > 0 && k + 1 < t.size() && t[k - 1].text == "[" && t[k + 1].text == "]";
    const auto c = index ? constants.find(t[k].text) : constants.end();
    out += (out.empty() ? "" : " ") + (c != constants.end() ? std::to_string(c->second) : t[k].text);
  }
  return out;
}

// The streams the stream argument `text` of a call at code token `tok` may name, sorted ("0" for the
// default stream given by a caller); empty when it cannot be followed (taken as written).
std::vector<std::string> streams_named(const BufferFlow& flow, const Analysis& a, const std::string& text,
                                       std::size_t tok) {
  const BufferFlow::Resolution r = flow.resolve(with_constant_indices(text, a.constants), flow.function_at(tok), tok);
  if (!r.reason.empty() || r.paths.empty()) return {};
  std::vector<std::string> paths = r.paths;
  if (r.null_given) paths.push_back("0");
  std::sort(paths.begin(), paths.end());
  paths.erase(std::unique(paths.begin(), paths.end()), paths.end());
  return paths;
}

// Why the stream argument `text` may name a different stream from one launch to the next; "" when
// it names one stream (or cannot be followed).
std::string varying_stream(const std::vector<std::string>& paths, const std::string& text) {
  const auto indexed =
      std::find_if(paths.begin(), paths.end(), [](const std::string& p) { return p.find("[]") != std::string::npos; });
  if (indexed != paths.end())
    return fmt::format("its stream `{}` is an element of `{}` chosen at run time", text, *indexed);
  // The default stream at one call of the helper, another stream at another (`sum(a, 0)`, `sum(b, s)`).
  if (paths.size() == 2 && paths[0] == "0")
    return fmt::format("its stream `{}` is the default stream at one call and `{}` at another", text, paths[1]);
  if (paths.size() > 1) return fmt::format("its stream `{}` is any of `{}`", text, fmt::join(paths, "`, `"));
  return "";
}

bool is_p2p_call(const Call& c) { return c.name == "ncclSend" || c.name == "ncclRecv"; }

// `{fwd}, {bwd}` as `fwd`, `bwd` for a message; a member that may name several as `a | b`.
std::vector<std::string> named_list(const std::set<std::vector<std::string>>& named) {
  std::vector<std::string> out;
  for (const std::vector<std::string>& n : named) out.push_back(fmt::format("{}", fmt::join(n, " | ")));
  return out;
}

// A send or receive group written in one function whose members all name the same stream: each
// launch runs on one stream, whichever it is.
bool one_stream_per_launch(const Analysis& a, const Group& g) {
  return g.regions.empty() && std::all_of(g.members.begin(), g.members.end(), [&](std::size_t m) {
           return a.calls[m].function == a.calls[g.members.front()].function &&
                  a.calls[m].stream == a.calls[g.members.front()].stream;
         });
}

}  // namespace

void hold_calls_on_varying_streams(const BufferFlow& flow, const TokenIndex& token_at,
                                   const std::vector<std::size_t>& collectives, Analysis& a) {
  std::map<std::size_t, std::vector<std::string>> streams;  // call -> the streams it may name
  for (std::size_t ci : collectives) {
    Call& c = a.calls[ci];
    const NcclSignature* sig = nccl_signature(c.name);
    if (!c.unresolved.empty() || sig->stream < 0 || (int)c.args.size() != sig->arity) continue;
    // A stream chosen with its communicator (nccl-tests' `comms[i]`, `streams[i]` per local GPU): each
    // communicator's binding has its own barriers and plan slots, and its launches keep its one stream.
    if (std::any_of(c.comm_paths.begin(), c.comm_paths.end(),
                    [](const std::string& p) { return p.find("[]") != std::string::npos; }))
      continue;
    auto tok = token_at.find(c.call_begin);
    if (tok == token_at.end()) continue;
    streams[ci] = streams_named(flow, a, c.args[(std::size_t)sig->stream].text, tok->second);
    const std::string why = varying_stream(streams[ci], c.args[(std::size_t)sig->stream].text);
    // A send or receive site shares no barrier between its launches: its messages meet their peers'
    // by per-pair order, as NCCL's do, and the runtime keeps its plan per (site, stream)
    // (convert_p2p.hpp), so launches on two streams may overlap. What must hold is one stream per
    // launch: ungrouped, or a group that names one stream (below).
    if (why.empty() || (is_p2p_call(c) && (c.group < 0 || one_stream_per_launch(a, a.groups[(std::size_t)c.group]))))
      continue;
    // A converted call site has one set of barriers and one p2p plan slot: two of its launches on
    // different streams may run at once on a rank and meet each other's peers, or overwrite the plan.
    c.unresolved = fmt::format(
        "{}: the call site's launches may overlap on different streams, and a converted site's device "
        "state (its barriers, its p2p plan) serves one launch at a time",
        why);
  }
  // A group gathering members through calls (`send_t(act, fwd); recv_t(grad, bwd);` between the
  // brackets) names its streams by parameters: their texts agree where the streams may not.
  for (const Group& g : a.groups) {
    if (one_stream_per_launch(a, g)) continue;
    std::set<std::vector<std::string>> named;
    for (std::size_t m : g.members)
      if (is_p2p_call(a.calls[m]) && streams.count(m) && !streams[m].empty()) named.insert(streams[m]);  // known ones
    if (named.size() <= 1 && (named.empty() || named.begin()->size() <= 1)) continue;
    for (std::size_t m : g.members)
      if (a.calls[m].unresolved.empty())
        a.calls[m].unresolved = fmt::format(
            "its group (line {}) may hold sends and receives on different streams (its members' streams are "
            "`{}`), and one p2p kernel runs on one stream",
            g.start_line, fmt::join(named_list(named), "`, `"));
  }
}

}  // namespace braid::convert
