// The analyzer's capture pass (analyzer_passes.hpp): which calls run while a stream is captured
// into a CUDA graph, between cudaStreamBeginCapture and its cudaStreamEndCapture, directly or
// through the functions called there. Their launches are recorded once and replayed later, so
// whatever a converted call decides on the host at launch is frozen in the graph.
#include <algorithm>

#include "braid/convert/analyzer_passes.hpp"

namespace braid::convert {

void mark_captured_calls(const BufferFlow& flow, const TokenIndex& token_at, Analysis& a) {
  const auto token_of = [&](const Call& c) {
    auto t = token_at.find(c.call_begin);
    return t == token_at.end() ? SIZE_MAX : t->second;
  };
  const auto begins = [](const Call& c) {
    return c.name == "cudaStreamBeginCapture" || c.name == "cudaStreamBeginCaptureToGraph";
  };
  for (std::size_t b = 0; b < a.calls.size(); ++b) {
    if (!begins(a.calls[b])) continue;
    const Call& begin = a.calls[b];
    const std::size_t from = token_of(begin);
    // Its end: the next cudaStreamEndCapture of the same function. None there (a capture guard
    // whose destructor ends it, a begin/end wrapper): braid cannot tell where it stops, so every
    // call of the file counts as captured.
    std::size_t to = SIZE_MAX;
    for (std::size_t e = b + 1; e < a.calls.size() && to == SIZE_MAX; ++e)
      if (a.calls[e].name == "cudaStreamEndCapture" && a.calls[e].function == begin.function) to = token_of(a.calls[e]);
    const bool unpaired = from == SIZE_MAX || to == SIZE_MAX;
    const std::set<std::string> reached = unpaired ? std::set<std::string>() : flow.reached_between(from, to);
    for (Call& c : a.calls) {
      if (c.kind != CallKind::Nccl || c.captured_line > 0) continue;
      const std::size_t at = token_of(c);
      const bool between = at != SIZE_MAX && !unpaired && at > from && at < to;
      if (unpaired || between || reached.count(c.function)) c.captured_line = begin.line;
    }
  }
}

}  // namespace braid::convert
