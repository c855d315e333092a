// The analyzer's pass on the streams of the collectives (analyzer_passes.hpp): a call site whose
// launches may run on several streams stays host NCCL.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>

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

// Why the stream argument `text` of a call at code token `tok` may name a different stream from one
// launch to the next; "" when it names one stream (or cannot be followed: as written).
std::string varying_stream(const BufferFlow& flow, const Analysis& a, const std::string& text, std::size_t tok) {
  const BufferFlow::Resolution r = flow.resolve(with_constant_indices(text, a.constants), flow.function_at(tok), tok);
  if (!r.reason.empty() || r.paths.empty()) return "";
  std::vector<std::string> paths = r.paths;
  std::sort(paths.begin(), paths.end());
  paths.erase(std::unique(paths.begin(), paths.end()), paths.end());
  const auto indexed =
      std::find_if(paths.begin(), paths.end(), [](const std::string& p) { return p.find("[]") != std::string::npos; });
  if (indexed != paths.end())
    return fmt::format("its stream `{}` is an element of `{}` chosen at run time", text, *indexed);
  if (paths.size() > 1) return fmt::format("its stream `{}` is any of `{}`", text, fmt::join(paths, "`, `"));
  // The default stream at one call of the helper, another stream at another (`sum(a, 0)`, `sum(b, s)`).
  if (r.null_given)
    return fmt::format("its stream `{}` is the default stream at one call and `{}` at another", text, paths[0]);
  return "";
}

}  // namespace

void hold_calls_on_varying_streams(const BufferFlow& flow, const TokenIndex& token_at,
                                   const std::vector<std::size_t>& collectives, Analysis& a) {
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
    const std::string why = varying_stream(flow, a, c.args[(std::size_t)sig->stream].text, tok->second);
    if (why.empty()) continue;
    // A converted call site has one set of barriers and one p2p plan slot: two of its launches on
    // different streams may run at once on a rank and meet each other's peers, or overwrite the plan.
    c.unresolved = fmt::format(
        "{}: the call site's launches may overlap on different streams, and a converted site's device "
        "state (its barriers, its p2p plan) serves one launch at a time",
        why);
  }
}

}  // namespace braid::convert
