// analyze() as a sequence of passes (analyzer_passes.hpp), and the Analysis read out as JSON and text.
#include "braid/convert/analyzer.hpp"

#include <fmt/format.h>

#include "braid/convert/analyzer_passes.hpp"
#include "braid/convert/header_inline.hpp"
#include "braid/util/error.hpp"

namespace braid::convert {

const char* call_kind_name(CallKind k) {
  switch (k) {
    case CallKind::Nccl: return "nccl";
    case CallKind::Kernel: return "kernel";
    case CallKind::Cublas: return "cublas";
    case CallKind::Stream: return "stream";
    case CallKind::Event: return "event";
    case CallKind::Memory: return "memory";
    case CallKind::Other: return "other";
  }
  return "?";
}

std::vector<std::size_t> Analysis::nccl_collectives() const {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < calls.size(); ++i)
    if (calls[i].kind == CallKind::Nccl && nccl_signature(calls[i].name) != nullptr) out.push_back(i);
  return out;
}

const Buffer* Analysis::buffer_of_argument(const std::string& arg_text) const {
  const std::string v = base_variable(arg_text);
  auto it = buffers.find(v);
  return it == buffers.end() ? nullptr : &it->second;
}

namespace {

// No collective to convert, naming the macros whose calls could not be read where there are some.
std::string no_collective_message(const Analysis& a) {
  std::string out = "has no NCCL collective or point-to-point call (nothing to convert)";
  for (const Issue& u : a.unsupported)
    if (u.construct.ends_with(" (macro)")) out += fmt::format("; line {}: {}", u.line, u.reason);
  return out;
}

}  // namespace

Analysis analyze(const std::string& file, const std::string& source, bool require_collective,
                 const SourceContext& context) {
  Analysis a;
  a.file = file;
  LexResult lr = lex_source(file, source);
  keep_user_lines(lr.tokens, context.inlined);
  require_translation_unit(file, source, lr, code_tokens(lr.tokens));
  // Uses of macros that call NCCL or allocate are read as their expansions, at the use.
  const MacroTable macros(with_context_directives(file, lr.tokens, context));
  // The code of the program's own headers that calls NCCL, allocates or frees, where it is included.
  const HeaderCode headers =
      with_header_code(file, lr.tokens, macros.compiled_only(code_tokens(lr.tokens)), context, source.size());
  const std::vector<Token> toks = splice_macro_uses(headers.code, macros, headers.end, a);
  const BufferFlow flow(toks);
  // What the whole file says before calls are read in order.
  read_annotations(file, lr.tokens, a);
  collect_macro_constants(macros, a);
  collect_constants(toks, a);
  const PointerTypes pointer_types = declared_pointer_types(toks);
  collect_harness_buffers(toks, a);
  // The calls in order, then what they reach.
  walk_calls(file, toks, flow, pointer_types, macros, a);
  list_not_followed(toks, a);
  const std::vector<std::size_t> collectives = a.nccl_collectives();
  if (collectives.empty() && require_collective) throw UserError(file, no_collective_message(a));
  // A call whose buffer cannot be followed keeps the reason and stays host NCCL (never a whole-file refusal).
  const TokenIndex token_at = index_tokens(toks);
  mark_conditional_calls(flow, token_at, a);
  follow_collective_arguments(flow, token_at, collectives, a);
  pair_group_wrappers(flow, toks, token_at, collectives, a);
  attach_reached_group_members(flow, token_at, collectives, a);
  hold_calls_on_varying_streams(flow, token_at, collectives, a);  // knows each call's group
  hold_calls_near_group_brackets(flow, toks, token_at, collectives, a);
  mark_program_registered_buffers(flow, token_at, a);
  mark_captured_calls(flow, token_at, a);
  mark_rank_dependent_sizes(toks, flow, token_at, a);
  collect_comm_inits(flow, toks, token_at, a);
  mark_allocations_after_creations(toks, flow, token_at, a);
  match_member_communicators(a);
  detect_threaded_ranks(toks, lr.tokens, flow, token_at, a);
  list_address_taken(toks, a);
  check_annotations(file, a);
  order_calls(a);
  find_statement_ranges(toks, token_at, a);
  place_macro_calls(toks, token_at, a);
  mark_header_calls(headers.spans, toks, flow, token_at, a);
  name_inlined_calls(source, context.inlined, a);
  return a;
}

json analysis_to_json(const Analysis& a) {
  json j;
  j["file"] = a.file;
  j["uses_harness"] = a.uses_harness;
  j["kernels_defined"] = a.kernels;
  j["streams"] = a.streams;
  j["events"] = a.events;
  json calls = json::array();
  for (std::size_t i = 0; i < a.calls.size(); ++i) {
    const Call& c = a.calls[i];
    json args = json::array();
    for (auto& x : c.args) args.push_back(x.text);
    json cj{{"index", i},   {"kind", call_kind_name(c.kind)}, {"name", c.name}, {"line", c.line},
            {"args", args}, {"function", c.function}};
    if (!c.stream.empty()) cj["stream"] = c.stream;
    if (c.macro_use >= 0) cj["macro"] = a.macro_uses[(std::size_t)c.macro_use].name;
    if (!c.header.empty()) cj["header"] = c.header;
    if (!c.inlined_from.empty()) cj["inlined_from"] = c.inlined_from;
    if (!c.buffers.empty()) cj["buffers"] = c.buffers;
    if (c.group >= 0) cj["group"] = c.group;
    if (c.loop >= 0) cj["loop"] = c.loop;
    if (!c.launch_config.empty()) {
      json cfg = json::array();
      for (auto& x : c.launch_config) cfg.push_back(x.text);
      cj["launch"] = cfg;
    }
    calls.push_back(cj);
  }
  j["calls"] = calls;
  json bufs = json::object();
  for (auto& [name, b] : a.buffers) {
    json bj{{"allocator", b.allocator}, {"bytes_expr", b.bytes_expr}, {"line", b.line}};
    if (b.bytes) bj["bytes"] = *b.bytes;
    if (!b.element_type.empty()) bj["element_type"] = b.element_type;
    if (!b.harness_name.empty()) bj["harness_name"] = b.harness_name;
    bufs[name] = bj;
  }
  j["buffers"] = bufs;
  json groups = json::array();
  for (auto& g : a.groups)
    groups.push_back({{"start_line", g.start_line}, {"end_line", g.end_line}, {"members", g.members}});
  j["groups"] = groups;
  json loops = json::array();
  for (auto& l : a.loops) loops.push_back({{"kind", l.kind}, {"line", l.line}, {"header", l.header}});
  j["loops"] = loops;
  json ann = json::array();
  for (auto& an : a.annotations) ann.push_back({{"kind", an.kind}, {"buffer", an.buffer}, {"line", an.line}});
  j["annotations"] = ann;
  json edges = json::array();
  for (auto& e : a.edges) edges.push_back({{"from", e.from}, {"to", e.to}, {"reason", e.reason}});
  j["edges"] = edges;
  json un = json::array();
  for (auto& u : a.unsupported) un.push_back({{"line", u.line}, {"construct", u.construct}, {"reason", u.reason}});
  j["unsupported"] = un;
  j["constants"] = a.constants;
  json uses = json::array();
  for (const MacroUse& u : a.macro_uses)
    uses.push_back({{"macro", u.name}, {"line", u.line}, {"expansion", u.expansion}});
  j["macro_uses"] = uses;
  return j;
}

std::string analysis_to_text(const Analysis& a) {
  std::string out = fmt::format("{}: {} calls, {} buffers, {} streams, {} events, {} groups, {} loops{}\n", a.file,
                                a.calls.size(), a.buffers.size(), a.streams.size(), a.events.size(), a.groups.size(),
                                a.loops.size(), a.uses_harness ? " (braid harness program)" : "");
  out += "buffers:\n";
  for (auto& [name, b] : a.buffers)
    out += fmt::format("  {:<14} {:<13} {} bytes = {}{}  (line {})\n", name, b.allocator,
                       b.element_type.empty() ? "?" : b.element_type, b.bytes_expr,
                       b.bytes ? fmt::format(" = {}", *b.bytes) : "", b.line);
  out += "calls:\n";
  for (std::size_t i = 0; i < a.calls.size(); ++i) {
    const Call& c = a.calls[i];
    if (c.kind == CallKind::Other) continue;
    std::string where;
    if (c.group >= 0) where += fmt::format(" [group {}]", c.group);
    if (c.loop >= 0)
      where += fmt::format(" [loop {} line {}]", a.loops[(std::size_t)c.loop].kind, a.loops[(std::size_t)c.loop].line);
    if (c.macro_use >= 0) where += fmt::format(" [in macro {}]", a.macro_uses[(std::size_t)c.macro_use].name);
    if (!c.header.empty()) where += fmt::format(" [in header {}, {}()]", c.header, c.function);
    if (!c.inlined_from.empty()) where += fmt::format(" [written in from {}]", c.inlined_from);
    std::string bufs;
    for (auto& b : c.buffers) bufs += (bufs.empty() ? "" : ",") + b;
    out += fmt::format("  #{:<3} line {:<4} {:<7} {}{}{}{}\n", i, c.line, call_kind_name(c.kind), c.name,
                       c.stream.empty() ? "" : " on " + c.stream, bufs.empty() ? "" : " touches " + bufs, where);
  }
  if (!a.macro_uses.empty()) out += "macro uses (call sites read in their expansion):\n";
  for (const MacroUse& u : a.macro_uses) out += fmt::format("  line {:<4} {} -> {}\n", u.line, u.name, u.expansion);
  if (!a.edges.empty()) {
    out += "order:\n";
    for (auto& e : a.edges) out += fmt::format("  #{} -> #{}  ({})\n", e.from, e.to, e.reason);
  }
  for (auto& an : a.annotations) out += fmt::format("annotation line {}: braid:{} {}\n", an.line, an.kind, an.buffer);
  for (auto& u : a.unsupported)
    out += fmt::format("{}:{}: not followed: {}: {}\n", a.file, u.line, u.construct, u.reason);
  return out;
}

}  // namespace braid::convert
