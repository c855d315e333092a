#include "braid/convert/transform.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "braid/convert/header_inline.hpp"
#include "braid/convert/transform_plan.hpp"

namespace braid::convert {
namespace {

struct Edit {
  std::size_t begin = 0, end = 0;  // replaced byte range
  std::string text;
  int macro_use = -1;  // >= 0: the range is in that macro use's expansion (Analysis::macro_uses)
};

std::string apply_edits(const std::string& src, std::vector<Edit> edits) {
  std::sort(edits.begin(), edits.end(), [](const Edit& a, const Edit& b) { return a.begin > b.begin; });
  std::string out = src;
  for (const Edit& e : edits) out.replace(e.begin, e.end - e.begin, e.text);
  return out;
}

// Edits in macro expansions applied to them, and each edited use replaced by its expansion (the
// #define stays: other uses, and this one's unconverted calls, still read it).
std::string apply_edits(const Analysis& a, const std::string& src, const std::vector<Edit>& edits) {
  std::vector<Edit> in_source;
  std::map<int, std::vector<Edit>> in_use;
  for (const Edit& e : edits) (e.macro_use < 0 ? in_source : in_use[e.macro_use]).push_back(e);
  for (const auto& [u, es] : in_use) {
    const MacroUse& use = a.macro_uses[(std::size_t)u];
    in_source.push_back(Edit{use.begin, use.end, apply_edits(use.expansion, es)});
  }
  return apply_edits(src, in_source);
}

// The edit renaming call `c` to `after`, in the source or in its macro use's expansion.
Edit rename(const Call& c, const std::string& after) {
  if (c.macro_use >= 0) return Edit{c.expansion_at, c.expansion_at + c.name.size(), after, c.macro_use};
  return Edit{c.call_begin, c.call_begin + c.name.size(), after};
}

// A call read in a macro's expansion: what the change's explanation adds.
std::string in_macro(const Analysis& a, const Call& c) {
  if (c.macro_use < 0) return "";
  return fmt::format("; written in macro {}: this use is replaced by its expansion (the #define stays)",
                     a.macro_uses[(std::size_t)c.macro_use].name);
}

const std::map<std::string, std::string> kRuleWhy = {
    {"ncclAllGather",
     "LSA push all-gather (launch_all_gather, auto-configured per shard size) into the receive window"},
    {"ncclAllReduce",
     "one kernel: reduce_scatter_pull of this rank's slice from every send window, then all_gather_push of it"},
    {"ncclReduceScatter", "reduce_scatter_kernel pulling this rank's slice from every peer's send window"},
    {"ncclBroadcast", "the root pushes its buffer into every rank's receive window between two LSA barriers"},
    {"ncclBcast", "in-place broadcast: the root pushes into every rank's window"},
    {"ncclAlltoAll", "all_to_all_kernel pushing block p into rank p's receive window"},
    {"ncclReduce", "the root pulls and reduces every rank's send window between two LSA barriers"},
    {"ncclGather", "the root pulls every rank's send window into its receive buffer between two LSA barriers"},
    {"ncclScatter", "the root pushes block p into rank p's receive window between two LSA barriers"},
    {"ncclSend",
     "pairwise send: waits for the receiver's posting, pushes into its window, signals it (no world barrier)"},
    {"ncclRecv",
     "pairwise receive: posts the destination in the mailbox, waits for the sender's signal (no world barrier)"}};

RanksInProcess ranks_in_process(const Analysis& a) {
  return a.one_thread_drives_ranks ? RanksInProcess::OneThreadDrivesAll
         : a.rank_per_thread       ? RanksInProcess::ThreadPerRank
                                   : RanksInProcess::One;
}

// Threads sharing a communicator in a way the runtime cannot serve (several ranks in one process, or
// a background thread beside the allocating one): nothing is converted.
Conversion left_untouched(const Analysis& a, const std::vector<std::size_t>& collectives, const std::string& source,
                          Conversion& conv) {
  for (std::size_t ci : collectives)
    conv.left.push_back(Unconverted{a.calls[ci].line, a.calls[ci].name,
                                    "the program " + a.single_process_why + ": left untouched, host NCCL"});
  for (const Issue& u : a.unsupported) conv.left.push_back(Unconverted{u.line, u.construct, u.reason});
  conv.source = source;
  return conv;
}

// The edits under way and what they decided.
struct Rewrite {
  std::vector<Edit> edits;
  std::set<std::string> symmetric;  // allocation sites (Analysis::buffers keys) that must be windows
  std::map<int, int> group_site;    // group -> site of its group_end
  int next_site = 0;
};

// The call site of a converted call: a group's sends and receives share their group_end's.
int site_of(const Call& c, Rewrite& rw) {
  if (is_p2p(c.name) && c.group >= 0) {
    auto it = rw.group_site.find(c.group);
    if (it == rw.group_site.end()) it = rw.group_site.emplace(c.group, rw.next_site++).first;
    return it->second;
  }
  const int site = rw.next_site++;
  if (c.group >= 0 && !rw.group_site.count(c.group)) rw.group_site.emplace(c.group, rw.next_site++);
  return site;
}

// Stage B: each convertible call renamed to its replacement; its window arguments become symmetric.
void rename_collectives(const Analysis& a, const std::vector<std::size_t>& collectives, const Plan& plan,
                        Conversion& conv, Rewrite& rw) {
  for (std::size_t ci : collectives) {
    const Call& c = a.calls[ci];
    const NcclSignature* sig = nccl_signature(c.name);
    if (const std::string& reason = plan.reason.at(ci); !reason.empty()) {
      conv.left.push_back(Unconverted{c.line, c.name, reason});
      continue;
    }
    auto rep = replacements().find(c.name);
    const int site = site_of(c, rw);
    const std::string after = fmt::format("braid_converted::{}<{}>", rep->second, site);
    rw.edits.push_back(rename(c, after));
    std::string why = kRuleWhy.at(c.name);
    if (c.loop >= 0) why += " (inside a loop: same site, same barrier indices each trip)";
    if (!c.via.empty()) {
      why += "; buffers followed: ";
      for (std::size_t k = 0; k < c.via.size(); ++k) why += (k ? ", " : "") + c.via[k];
    }
    if (!c.comm_via.empty()) {
      why += "; communicator followed: ";
      for (std::size_t k = 0; k < c.comm_via.size(); ++k) why += (k ? ", " : "") + c.comm_via[k];
    }
    conv.changes.push_back(Change{c.line, "B", rep->second, c.name, after, why + in_macro(a, c)});
    ++conv.converted_calls;
    for (int idx : window_args(c.name, *sig))
      for (const std::string& key : c.arg_buffers.at(idx)) rw.symmetric.insert(key);
  }
}

// One thread driving every rank creates the communicators inside one group (nccl-tests' `-g N`):
// they are complete only at its end, so the runtime sees that group too and binds them there.
// The groups that create communicators and bracket nothing yet.
std::set<int> creating_groups(const Analysis& a, const Rewrite& rw) {
  std::set<int> groups;
  for (const Call& c : a.calls)
    if (c.group >= 0 && !rw.group_site.count(c.group) &&
        (c.name == "ncclCommInitRank" || c.name == "ncclCommInitRankConfig" || c.name == "ncclCommInitRankScalable" ||
         c.name == "ncclCommSplit"))
      groups.insert(c.group);
  return groups;
}

void bracket_creating_groups(const Analysis& a, Rewrite& rw) {
  for (int g : creating_groups(a, rw)) rw.group_site.emplace(g, rw.next_site++);
}

// One rank per process creating its communicators inside its own NCCL group: the group stays NCCL's
// (its creations complete at its end, in any order), and the runtime binds them there.
void bracket_creations_one_rank(const Analysis& a, Conversion& conv, Rewrite& rw) {
  for (int g : creating_groups(a, rw)) {
    const Group& grp = a.groups[(std::size_t)g];
    rw.edits.push_back(rename(a.calls[grp.start_call], "braid_converted::creation_group_start"));
    rw.edits.push_back(rename(a.calls[grp.end_call], "braid_converted::creation_group_end"));
    conv.changes.push_back(Change{a.calls[grp.start_call].line, "A", "infrastructure", "ncclGroupStart",
                                  "braid_converted::creation_group_start",
                                  "the program's group of communicator creations stays an NCCL group"});
    conv.changes.push_back(Change{a.calls[grp.end_call].line, "A", "infrastructure", "ncclGroupEnd",
                                  "braid_converted::creation_group_end",
                                  "closes the NCCL group, then binds the communicators created in it, in creation "
                                  "order (the same on every rank)"});
  }
}

// Group brackets around converted calls.
void bracket_groups(const Analysis& a, Conversion& conv, Rewrite& rw) {
  for (auto& [g, site] : rw.group_site) {
    const Group& grp = a.groups[(std::size_t)g];
    const Call& start = a.calls[grp.start_call];
    const Call& end = a.calls[grp.end_call];
    rw.edits.push_back(rename(start, "braid_converted::group_start"));
    const std::string end_name = fmt::format("braid_converted::group_end<{}>", site);
    rw.edits.push_back(rename(end, end_name));
    conv.changes.push_back(
        Change{start.line, "B", "group", "ncclGroupStart", "braid_converted::group_start",
               a.one_thread_drives_ranks
                   ? "registers the windows still pending on every GPU, then opens the NCCL group (one thread drives "
                     "every rank: host calls of several ranks complete together)"
                   : "collects the group's sends and receives; no NCCL group is opened (members are device launches)"});
    conv.changes.push_back(
        Change{end.line, "B", "group", "ncclGroupEnd", end_name,
               std::string("launches the group's sends/receives (if any) as one pairwise p2p kernel (mailbox postings "
                           "and signals between the two ranks of each message, no world barrier)") +
                   (a.one_thread_drives_ranks ? "; one per GPU, then closes the NCCL group and binds together the "
                                                "communicators created in it"
                                              : "")});
  }
}

// Stage A's replacement of call `i` (allocation of a symmetric site, any release, the bound
// communicator's creation and destruction) with why; "" when the call stays.
std::pair<std::string, std::string> infrastructure_of(const Analysis& a, const Plan& plan, const Rewrite& rw,
                                                      std::size_t i) {
  const Call& c = a.calls[i];
  bool site_symmetric = false;
  for (const std::string& key : rw.symmetric)
    if (a.buffers.at(key).alloc_call == i) site_symmetric = true;
  std::string rank_sized;  // what its size depends on, when that is the rank: every rank allocates the largest
  for (const auto& [key, b] : a.buffers)
    if (b.alloc_call == i && !b.rank_dependent_size.empty()) rank_sized = b.rank_dependent_size;
  const SymmetricAllocator* sym = site_symmetric ? symmetric_replacement(c.name) : nullptr;
  const std::string pitched = c.name == "cudaMallocPitch" ? ", pitch x height bytes with the pitch the device's own "
                                                            "cudaMallocPitch gives for this width (rows lie as before)"
                                                          : "";
  if (sym != nullptr && !rank_sized.empty())
    return {sym->agreed,
            "symmetric memory of the largest size any rank asks for (its size depends on the rank, through `" +
                rank_sized + "`): agreed over the communicators bound here, since a window has one size on every rank" +
                pitched};
  if (sym != nullptr)
    return {sym->plain,
            "symmetric memory (ncclMemAlloc); registered as an NCCL window once the communicator exists" + pitched};
  if (c.name == "cudaFree" || c.name == "ncclMemFree" || c.name == "cudaFreeAsync")
    return {c.name == "cudaFree"      ? "braid_converted::sym_free"
            : c.name == "ncclMemFree" ? "braid_converted::sym_nccl_free"
                                      : "braid_converted::sym_free_async",
            "freed by the allocator that made the pointer (looked up at run time): windows deregistered and "
            "ncclMemFree for "
            "symmetric allocations, " +
                c.name + " for the rest"};
  if (c.name == "ncclCommDestroy" || c.name == "ncclCommFinalize")
    return {c.name == "ncclCommDestroy" ? "braid_converted::comm_destroy" : "braid_converted::comm_finalize",
            "device communicator destroyed and windows deregistered before the communicator goes"};
  if (c.name == "ncclCommInitAll")
    return {"braid_converted::comm_init_all",
            "one thread drives a rank per GPU: every communicator is bound here in one NCCL group (windows, device "
            "communicators), later symmetric allocations are registered together at the next converted call"};
  if (c.name == "ncclCommAbort")
    return {"braid_converted::comm_abort",
            "the runtime forgets the communicator (no deregistration on an aborted one); later frees only ncclMemFree"};
  if (const BoundComm* bound = plan.bound_at(i))
    return {
        c.name == "ncclCommInitRank"           ? "braid_converted::comm_init_rank"
        : c.name == "ncclCommSplit"            ? "braid_converted::comm_split"
        : c.name == "ncclCommInitRankScalable" ? "braid_converted::comm_init_rank_scalable"
                                               : "braid_converted::comm_init_rank_config",
        "binds the converted runtime to `" + bound->path +
            "`: windows for the symmetric allocations so far and the device communicator are made here, on every rank"};
  return {"", ""};
}

// The program's own window calls when it registers a buffer the rules made symmetric: the
// runtime's window (registered at the allocation or at binding, in the same order on every rank)
// is handed to the program instead of a second one, and the program's deregistration of it is
// left to the buffer's release.
std::pair<std::string, std::string> program_window_of(const Analysis& a, const Rewrite& rw, std::size_t i) {
  const Call& c = a.calls[i];
  if (c.name == "ncclCommWindowDeregister")
    return {"braid_converted::window_deregister",
            "a window the runtime made is deregistered when its buffer is released; any other as written"};
  if (c.name != "ncclCommWindowRegister") return {"", ""};
  for (const std::string& key : rw.symmetric)
    if (a.buffers.at(key).window_line == c.line)
      return {"braid_converted::window_register",
              "the program's window on `" + key +
                  "` is the runtime's own (registered with its symmetric allocation, in the same order on every "
                  "rank): its handle is returned, no second window is made"};
  return {"", ""};
}

// Stage A: the allocation sites converted calls touch, every release, the communicator.
void move_to_symmetric_memory(const Analysis& a, const Plan& plan, Conversion& conv, Rewrite& rw) {
  for (std::size_t i = 0; i < a.calls.size(); ++i) {
    const Call& c = a.calls[i];
    if (c.args.empty() || !c.header.empty()) continue;  // a header's calls are never rewritten
    auto [after, why] = infrastructure_of(a, plan, rw, i);
    if (after.empty()) std::tie(after, why) = program_window_of(a, rw, i);
    if (after.empty()) {
      if (c.name == "ncclCommWindowRegister" || c.name == "ncclDevCommCreate")
        conv.left.push_back(
            Unconverted{c.line, c.name, "the program manages windows itself: its registrations are kept as written"});
      continue;
    }
    rw.edits.push_back(rename(c, after));
    conv.changes.push_back(Change{c.line, "A", "infrastructure", c.name, after, why + in_macro(a, c)});
  }
  for (const std::string& key : rw.symmetric) {
    const Buffer& b = a.buffers.at(key);
    if (stage_a_allocator(b.allocator))
      conv.left.push_back(
          Unconverted{b.line, b.allocator,
                      "buffer `" + key +
                          "` cannot move to symmetric memory by rule: converted calls on it fall back to "
                          "host NCCL at run time"});
  }
}

// Harness programs, the body of `void run(Context& c, ...) {` or `void teardown(Context& c) {`
// at token i: the adopt/release hook inserted after its brace.
void hook_entry(const std::vector<Token>& toks, std::size_t i, Conversion& conv, Rewrite& rw) {
  const bool is_run = toks[i].text == "run", is_teardown = toks[i].text == "teardown";
  if (!((is_run || is_teardown) && toks[i + 1].text == "(" && i > 0 && toks[i - 1].text == "void")) return;
  std::size_t j = i + 2;
  std::string ctx;
  int depth = 1;
  for (; j < toks.size() && depth > 0; ++j) {
    if (toks[j].text == "(") ++depth;
    if (toks[j].text == ")") --depth;
    if (ctx.empty() && toks[j].text == "&" && j + 1 < toks.size() && toks[j + 1].kind == TokenKind::Identifier)
      ctx = toks[j + 1].text;
  }
  if (j < toks.size() && toks[j].text == "{" && !ctx.empty()) {
    const std::string hook =
        std::string(is_run ? "\n  braid_converted::adopt_harness(" : "\n  braid_converted::release_harness(") + ctx +
        ");";
    rw.edits.push_back(Edit{toks[j].end, toks[j].end, hook});
    conv.changes.push_back(Change{toks[j].line, "A", "infrastructure", "", hook.substr(3),
                                  is_run ? "the replacements find the harness's windows"
                                         : "device communicator destroyed before the harness frees its windows"});
  }
}

// Harness programs: c.alloc -> c.alloc_window for touched buffers, adopt/release hooks.
void hook_harness(const Analysis& a, const std::string& source, Conversion& conv, Rewrite& rw) {
  std::set<std::string> harness_names;
  for (const std::string& v : rw.symmetric) {
    const Buffer& b = a.buffers.at(v);
    if (!b.harness_name.empty()) harness_names.insert(b.harness_name);
  }
  const std::vector<Token> toks = code_tokens(lex(source).tokens);
  for (std::size_t i = 0; i + 3 < toks.size(); ++i) {
    if ((toks[i].text == "." || toks[i].text == "->") && toks[i + 1].text == "alloc" && toks[i + 2].text == "(" &&
        toks[i + 3].kind == TokenKind::String &&
        harness_names.count(toks[i + 3].text.substr(1, toks[i + 3].text.size() - 2))) {
      rw.edits.push_back(Edit{toks[i + 1].offset, toks[i + 1].end, "alloc_window"});
      conv.changes.push_back(Change{toks[i].line, "A", "infrastructure", "alloc", "alloc_window",
                                    "the harness allocates the buffer symmetric and registers its window"});
    }
    hook_entry(toks, i, conv, rw);
  }
}

// A release function used as a value (`std::unique_ptr<float, decltype(&cudaFree)> p(raw, &cudaFree)`,
// `std::shared_ptr<float>(raw, cudaFree)`, a stored callback): it frees whatever it is given,
// symmetric allocations included, so it becomes the run-time lookup too (the same signature).
void release_values(const Analysis& a, const std::string& source, Conversion& conv, Rewrite& rw) {
  static const std::map<std::string, std::string> kLookup = {{"cudaFree", "braid_converted::sym_free"},
                                                             {"ncclMemFree", "braid_converted::sym_nccl_free"},
                                                             {"cudaFreeAsync", "braid_converted::sym_free_async"}};
  const std::vector<Token> toks = code_tokens(lex(source).tokens);
  for (std::size_t i = 1; i + 1 < toks.size(); ++i) {
    auto it = kLookup.find(toks[i].text);
    const std::string& prev = toks[i - 1].text;
    if (it == kLookup.end() || toks[i + 1].text == "(" || prev == "." || prev == "->" ||
        (prev == "::" && i >= 2 && toks[i - 2].kind == TokenKind::Identifier))
      continue;
    // A macro use read as its expansion is rewritten whole (its calls are call sites of their own).
    if (std::any_of(a.macro_uses.begin(), a.macro_uses.end(),
                    [&](const MacroUse& m) { return toks[i].offset >= m.begin && toks[i].offset < m.end; }))
      continue;
    rw.edits.push_back(Edit{toks[i].offset, toks[i].end, it->second});
    conv.changes.push_back(Change{toks[i].line, "A", "infrastructure", toks[i].text, it->second,
                                  "a release function used as a value (a deleter, a callback) frees by the allocator "
                                  "that made the pointer, looked up at run time"});
  }
}

}  // namespace

// After the last #include, outside any #if block: an include under `#ifdef MULTI_GPU` would put
// the prelude, and with it every converted call's definition, where a build without the macro
// drops it. A whole-file include guard (`#ifndef X` + `#define X`) is not such a block.
std::size_t prelude_position(const std::string& source) {
  LexResult lr = lex(source);
  std::vector<const Token*> directives;
  for (const Token& t : lr.tokens)
    if (t.kind == TokenKind::Preprocessor) directives.push_back(&t);
  const auto keyword = [](const Token& t) {
    std::size_t b = t.text.find_first_not_of("# \t", 0);
    std::size_t e = b == std::string::npos ? b : t.text.find_first_of(" \t(<\"", b);
    return b == std::string::npos ? std::string() : t.text.substr(b, e == std::string::npos ? e : e - b);
  };
  std::size_t pos = 0;
  int depth = 0;
  bool pending = false;  // an #include inside the open block
  for (std::size_t i = 0; i < directives.size(); ++i) {
    const std::string k = keyword(*directives[i]);
    const bool guard =
        k == "ifndef" && i + 1 < directives.size() && keyword(*directives[i + 1]) == "define" && depth == 0 && pos == 0;
    if (k == "if" || k == "ifdef" || k == "ifndef") {
      if (!guard) ++depth;
    } else if (k == "endif" && depth > 0) {
      if (--depth == 0 && pending) {
        pos = directives[i]->end;
        pending = false;
      }
    } else if (k == "include") {
      if (depth == 0) pos = directives[i]->end;
      else pending = true;
    }
  }
  return pos;
}

namespace {

// Lines of a header written into the file are its #include's: say so next to each.
void name_inlined_lines(const Analysis& a, Conversion& conv) {
  for (const InlinedHeader& h : a.inlined) {
    if (h.nested) continue;
    conv.inlined_headers.push_back(h.name);
    const std::string note = " (code of \"" + h.name + "\", written into the file)";
    for (Change& ch : conv.changes)
      if (ch.line == h.include_line) ch.why += note;
    for (Unconverted& u : conv.left)
      if (u.line == h.include_line) u.reason += note;
  }
}

}  // namespace

Conversion transform(const Analysis& a, const std::string& source) {
  Conversion conv;
  conv.file = a.file;
  const std::vector<std::size_t> collectives = a.nccl_collectives();
  conv.nccl_calls = (int)collectives.size();
  if (a.single_process_multi_gpu && !a.one_thread_drives_ranks && !a.rank_per_thread)
    return left_untouched(a, collectives, source, conv);
  const Plan plan = plan_conversion(a, collectives);
  Rewrite rw;
  rename_collectives(a, collectives, plan, conv, rw);
  if (conv.converted_calls > 0 && a.one_thread_drives_ranks) bracket_creating_groups(a, rw);
  bracket_groups(a, conv, rw);
  if (conv.converted_calls > 0 && !a.one_thread_drives_ranks) bracket_creations_one_rank(a, conv, rw);
  conv.call_sites = rw.next_site;
  if (conv.converted_calls > 0) move_to_symmetric_memory(a, plan, conv, rw);
  if (conv.converted_calls > 0) release_values(a, source, conv, rw);
  if (a.uses_harness && conv.converted_calls > 0) hook_harness(a, source, conv, rw);
  for (const Issue& u : a.unsupported) conv.left.push_back(Unconverted{u.line, u.construct, u.reason});
  if (conv.converted_calls > 0) {
    // Before the first header written in, whose code may now call the prelude's primitives.
    const std::size_t at = std::min(prelude_position(source), before_written_headers(source, a.inlined));
    rw.edits.push_back(Edit{at, at, "\n" + converted_prelude(conv.call_sites, a.uses_harness, ranks_in_process(a))});
  }
  name_inlined_lines(a, conv);
  std::sort(conv.changes.begin(), conv.changes.end(), [](const Change& x, const Change& y) { return x.line < y.line; });
  std::sort(conv.left.begin(), conv.left.end(),
            [](const Unconverted& x, const Unconverted& y) { return x.line < y.line; });
  conv.source = apply_edits(a, source, rw.edits);
  return conv;
}

std::string instrument_for_gate(const Analysis& a, const std::string& source) {
  static const char* const kGate = R"GATE(
// ==== braid convert: verification gate instrumentation (generated) ====
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>
namespace braid_gate {
inline std::chrono::steady_clock::time_point& clock_start() { static std::chrono::steady_clock::time_point t; return t; }
inline bool& started() { static bool s = false; return s; }
inline int env_rank() { const char* r = std::getenv("BRAID_RANK"); return r ? std::atoi(r) : 0; }
template <typename T> inline const char* kind() { return sizeof(T) == 2 ? "b16" : (T(0.5f) == T(0) ? "int" : "f32"); }
template <typename T>
inline void input(T* p, size_t bytes, const char* name) {
  const char* seed = std::getenv("BRAID_GATE_SEED");
  std::mt19937_64 rng((seed ? std::strtoull(seed, nullptr, 10) : 1) * 1000003ull + (unsigned long long)env_rank() * 7919ull + std::string(name).size());
  std::vector<T> h(bytes / sizeof(T));
  for (auto& x : h) x = T((float)((long long)(rng() % 9) - 4));  // small integers: sums are exact in any order
  cudaDeviceSynchronize();
  cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
  cudaDeviceSynchronize();
  if (!started()) { started() = true; clock_start() = std::chrono::steady_clock::now(); }
}
template <typename T>
inline void clear(T* p, size_t bytes) { cudaMemset(p, 0, bytes); cudaDeviceSynchronize(); }
template <typename T>
inline void output(T* p, size_t bytes, const char* name) {
  cudaDeviceSynchronize();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - clock_start()).count();
  std::vector<char> h(bytes);
  cudaMemcpy(h.data(), p, bytes, cudaMemcpyDeviceToHost);
  const char* dir = std::getenv("BRAID_GATE_DIR");
  const std::string base = std::string(dir ? dir : ".") + "/" + name + ".rank" + std::to_string(env_rank());
  if (FILE* f = std::fopen((base + ".bin").c_str(), "wb")) { std::fwrite(h.data(), 1, h.size(), f); std::fclose(f); }
  if (FILE* f = std::fopen((base + ".meta").c_str(), "w")) { std::fprintf(f, "%s %zu %.6f\n", kind<T>(), sizeof(T), ms); std::fclose(f); }
}
}  // namespace braid_gate
// ==== end of gate instrumentation ====
)GATE";
  std::vector<Edit> edits;
  std::set<std::string> inputs;
  for (const Annotation& an : a.annotations)
    if (an.kind == "input") inputs.insert(an.buffer);
  bool first_input = true;
  for (const Annotation& an : a.annotations) {
    const Buffer& b = a.buffers.at(an.buffer);
    std::string text = fmt::format("braid_gate::{}({}, {}, \"{}\");", an.kind, an.buffer, b.bytes_expr, an.buffer);
    if (an.kind == "input" && first_input) {
      first_input = false;
      // Outputs that are not inputs start from zeros, so bytes a program never writes compare equal.
      for (const Annotation& o : a.annotations)
        if (o.kind == "output" && !inputs.count(o.buffer))
          text = fmt::format("braid_gate::clear({}, {}); ", o.buffer, a.buffers.at(o.buffer).bytes_expr) + text;
    }
    edits.push_back(Edit{an.begin, an.end, text});
  }
  const std::size_t at = prelude_position(source);
  edits.push_back(Edit{at, at, kGate});
  return apply_edits(source, edits);
}

Analysis analyze_converted(const std::string& file, const std::string& source) {
  static const std::map<std::string, std::string> kInfrastructure = {
      {"sym_malloc", "cudaMalloc"},
      {"sym_nccl_alloc", "ncclMemAlloc"},
      {"sym_malloc_agreed", "cudaMalloc"},
      {"sym_malloc_pitch", "cudaMallocPitch"},
      {"sym_malloc_pitch_agreed", "cudaMallocPitch"},
      {"sym_nccl_alloc_agreed", "ncclMemAlloc"},
      {"sym_free", "cudaFree"},
      {"sym_nccl_free", "ncclMemFree"},
      {"comm_destroy", "ncclCommDestroy"},
      {"comm_finalize", "ncclCommFinalize"},
      {"comm_abort", "ncclCommAbort"},
      {"group_start", "ncclGroupStart"},
      {"group_end", "ncclGroupEnd"},
      {"creation_group_start", "ncclGroupStart"},
      {"creation_group_end", "ncclGroupEnd"},
      {"adopt_harness", ""},
      {"release_harness", ""},
      {"sym_free_async", "cudaFreeAsync"},
      {"comm_init_rank", "ncclCommInitRank"},
      {"comm_init_all", "ncclCommInitAll"},
      {"comm_split", "ncclCommSplit"},
      {"comm_init_rank_config", "ncclCommInitRankConfig"},
      {"comm_init_rank_scalable", "ncclCommInitRankScalable"}};
  std::string text = source;
  const std::vector<Token> toks = code_tokens(lex(source).tokens);
  // Generated namespaces hold library code (fallback NCCL calls on parameters): blanked, newlines kept.
  for (std::size_t i = 0; i + 2 < toks.size(); ++i) {
    const std::string& n = toks[i + 1].text;
    if (toks[i].text != "namespace" || toks[i + 2].text != "{" ||
        (n != "braid_converted" && n != "braid_gate" && n != "braid_diag"))
      continue;
    int depth = 0;
    for (std::size_t j = i + 2; j < toks.size(); ++j) {
      if (toks[j].text == "{") ++depth;
      else if (toks[j].text == "}" && --depth == 0) {
        for (std::size_t k = toks[i].offset; k < toks[j].end; ++k)
          if (text[k] != '\n') text[k] = ' ';
        i = j;
        break;
      }
    }
  }
  // `braid_converted::name<SITE>` -> the NCCL or CUDA name it replaced, padded to the same length.
  for (std::size_t i = 0; i + 2 < toks.size(); ++i) {
    if (toks[i].text != "braid_converted" || toks[i + 1].text != "::" || text[toks[i].offset] == ' ') continue;
    const std::string& name = toks[i + 2].text;
    std::string original;
    if (auto it = kInfrastructure.find(name); it != kInfrastructure.end()) original = it->second;
    for (const auto& [nccl, replacement] : replacements())
      if (replacement == name) original = nccl;
    if (original.empty() && !kInfrastructure.count(name)) continue;  // the rewrite's own helper: left as written
    std::size_t end = toks[i + 2].end;
    if (i + 3 < toks.size() && toks[i + 3].text == "<") {  // <SITE>, <SITE, knobs...>, <SITE, Shape<...>>
      int depth = 0;
      for (std::size_t j = i + 3; j < toks.size() && toks[j].text != ";"; ++j) {
        if (toks[j].text == "<") ++depth;
        else if (toks[j].text == ">") --depth;
        else if (toks[j].text == ">>") depth -= 2;
        if (depth <= 0) {
          end = toks[j].end;
          break;
        }
      }
    }
    std::string padded = original;
    padded.resize(end - toks[i].offset, ' ');
    text.replace(toks[i].offset, padded.size(), padded);
  }
  return analyze(file, text, /*require_collective=*/false);
}

}  // namespace braid::convert
