// A conversion as --json and as --explain's text (transform.hpp).
#include <fmt/format.h>

#include "braid/convert/transform.hpp"

namespace braid::convert {

json conversion_to_json(const Conversion& c) {
  json changes = json::array();
  for (const Change& ch : c.changes)
    changes.push_back({{"line", ch.line},
                       {"stage", ch.stage},
                       {"rule", ch.rule},
                       {"before", ch.before},
                       {"after", ch.after},
                       {"why", ch.why}});
  json left = json::array();
  for (const Unconverted& u : c.left)
    left.push_back({{"file", c.file}, {"line", u.line}, {"construct", u.construct}, {"reason", u.reason}});
  return json{{"file", c.file},
              {"nccl_calls", c.nccl_calls},
              {"converted_calls", c.converted_calls},
              {"call_sites", c.call_sites},
              {"complete", c.complete()},
              {"inlined_headers", c.inlined_headers},
              {"changes", changes},
              {"unconverted", left}};
}

std::string conversion_to_text(const Conversion& c) {
  std::string out = fmt::format("{}: {} of {} NCCL calls converted by rules{}\n", c.file, c.converted_calls,
                                c.nccl_calls, c.complete() ? " (complete)" : "");
  for (const std::string& h : c.inlined_headers)
    out += fmt::format("  \"{}\" is written into the converted file: its calls convert with the file's\n", h);
  for (const Change& ch : c.changes)
    out += fmt::format("  line {:<4} stage {} {:<15} {} -> {}\n             {}\n", ch.line, ch.stage, ch.rule,
                       ch.before.empty() ? "(insert)" : ch.before, ch.after, ch.why);
  if (!c.left.empty()) out += "left for the LLM loop:\n";
  for (const Unconverted& u : c.left) out += fmt::format("  {}:{}: {}: {}\n", c.file, u.line, u.construct, u.reason);
  return out;
}

}  // namespace braid::convert
