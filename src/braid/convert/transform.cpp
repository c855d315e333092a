#include "braid/convert/transform.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

namespace braid::convert {
namespace {

struct Edit {
  std::size_t begin = 0, end = 0;  // replaced byte range
  std::string text;
};

std::string apply_edits(const std::string& src, std::vector<Edit> edits) {
  std::sort(edits.begin(), edits.end(), [](const Edit& a, const Edit& b) { return a.begin > b.begin; });
  std::string out = src;
  for (const Edit& e : edits) out.replace(e.begin, e.end - e.begin, e.text);
  return out;
}

const std::map<std::string, std::string> kReplacement = {
    {"ncclAllGather", "all_gather"}, {"ncclAllReduce", "all_reduce"}, {"ncclReduceScatter", "reduce_scatter"},
    {"ncclBroadcast", "broadcast"},  {"ncclBcast", "bcast"},          {"ncclAlltoAll", "all_to_all"},
    {"ncclReduce", "reduce"},        {"ncclGather", "gather"},        {"ncclScatter", "scatter"},
    {"ncclSend", "send"},            {"ncclRecv", "recv"}};

const std::map<std::string, std::string> kRuleWhy = {
    {"ncclAllGather", "LSA push all-gather (launch_all_gather, auto-configured per shard size) into the receive window"},
    {"ncclAllReduce", "one kernel: reduce_scatter_pull of this rank's slice from every send window, then all_gather_push of it"},
    {"ncclReduceScatter", "reduce_scatter_kernel pulling this rank's slice from every peer's send window"},
    {"ncclBroadcast", "the root pushes its buffer into every rank's receive window between two LSA barriers"},
    {"ncclBcast", "in-place broadcast: the root pushes into every rank's window"},
    {"ncclAlltoAll", "all_to_all_kernel pushing block p into rank p's receive window"},
    {"ncclReduce", "the root pulls and reduces every rank's send window between two LSA barriers"},
    {"ncclGather", "the root pulls every rank's send window into its receive buffer between two LSA barriers"},
    {"ncclScatter", "the root pushes block p into rank p's receive window between two LSA barriers"},
    {"ncclSend", "pairwise send: waits for the receiver's posting, pushes into its window, signals it (no world barrier)"},
    {"ncclRecv", "pairwise receive: posts the destination in the mailbox, waits for the sender's signal (no world barrier)"}};

// Arguments that must live in a registered window on every rank (each is significant on every
// rank in NCCL's semantics, so the run-time window check gives the same answer everywhere).
std::vector<int> window_args(const std::string& name, const NcclSignature& sig) {
  if (name == "ncclAllReduce") return {sig.send, sig.recv};
  if (name == "ncclReduceScatter" || name == "ncclReduce" || name == "ncclGather") return {sig.send};
  // A send's own buffer too: both ends of a pair in windows or neither (NCCL 2.28.9 hangs an
  // ncclSend from a registered window into an unregistered receive buffer, which a run-time
  // fallback of the pair would otherwise attempt).
  if (name == "ncclSend") return {sig.send};
  return {sig.recv};  // all-gather, all-to-all, broadcast, bcast, scatter, recv
}

// Allocators whose memory cannot become a window by rule (the LLM loop's stage A rewrites them).
bool stage_a_allocator(const std::string& allocator) { return allocator == "cudaMallocAsync" || allocator == "cudaMallocManaged"; }

bool is_p2p(const std::string& name) { return name == "ncclSend" || name == "ncclRecv"; }
bool is_reduction(const std::string& name) { return name == "ncclAllReduce" || name == "ncclReduceScatter" || name == "ncclReduce"; }

// Why a call's data type / reduction has no device rule ("" when it has one). A type or op that is
// not a literal is decided at run time by the replacement (the same on every rank).
std::string type_op_reason(const Call& c, const NcclSignature& sig) {
  static const std::set<std::string> kTypes = {"ncclFloat",   "ncclFloat32", "ncclBfloat16", "ncclHalf",  "ncclFloat16", "ncclDouble",
                                               "ncclFloat64", "ncclInt32",   "ncclInt",      "ncclUint32", "ncclInt64",  "ncclUint64",
                                               "ncclInt8",    "ncclChar",    "ncclUint8"};
  static const std::set<std::string> kFloatTypes = {"ncclFloat", "ncclFloat32", "ncclBfloat16", "ncclHalf", "ncclFloat16", "ncclDouble",
                                                    "ncclFloat64"};
  static const std::set<std::string> kOps = {"ncclSum", "ncclProd", "ncclMax", "ncclMin", "ncclAvg"};
  if (!is_reduction(c.name)) return "";
  const std::string& dt = c.args[(std::size_t)sig.dtype].text;
  const std::string& op = c.args[(std::size_t)sig.op].text;
  if (dt.rfind("nccl", 0) == 0 && !kTypes.count(dt)) return "data type `" + dt + "` has no device reduction (fp8 and others stay host NCCL)";
  if (op.rfind("nccl", 0) == 0 && !kOps.count(op)) return "reduction `" + op + "` has no device rule";
  if (op == "ncclAvg" && dt.rfind("nccl", 0) == 0 && !kFloatTypes.count(dt)) return "ncclAvg on an integer type has no device rule";
  return "";
}

}  // namespace

std::size_t prelude_position(const std::string& source) {
  LexResult lr = lex(source);
  std::size_t pos = 0;
  for (const Token& t : lr.tokens)
    if (t.kind == TokenKind::Preprocessor && t.text.find("include") != std::string::npos) pos = t.end;
  return pos;
}

Conversion transform(const Analysis& a, const std::string& source) {
  Conversion conv;
  conv.file = a.file;
  std::vector<Edit> edits;
  std::set<std::string> symmetric;  // allocation sites (Analysis::buffers keys) that must be windows
  std::map<int, int> group_site;    // group -> site of its group_end
  int next_site = 0;
  const auto collectives = a.nccl_collectives();
  conv.nccl_calls = (int)collectives.size();

  // Several ranks in one process: the runtime's state is per process, so nothing is converted.
  if (a.single_process_multi_gpu) {
    for (std::size_t ci : collectives)
      conv.left.push_back(Unconverted{a.calls[ci].line, a.calls[ci].name,
                                      "the program creates its communicators with ncclCommInitAll (several ranks in one process): "
                                      "left untouched, host NCCL"});
    for (const Issue& u : a.unsupported) conv.left.push_back(Unconverted{u.line, u.construct, u.reason});
    conv.source = source;
    return conv;
  }

  // Why a call cannot convert on its own ("" when a rule applies), before communicator binding.
  auto own_reason = [&](const Call& c) -> std::string {
    const NcclSignature* sig = nccl_signature(c.name);
    if ((int)c.args.size() != sig->arity) return "arguments could not be split";
    if (!kReplacement.count(c.name)) return "no rule for " + c.name;
    if (std::string r = type_op_reason(c, *sig); !r.empty()) return r;
    if (!c.unresolved.empty()) return c.unresolved;
    for (int idx : window_args(c.name, *sig)) {
      auto it = c.arg_buffers.find(idx);
      if (it == c.arg_buffers.end() || it->second.empty())
        return "buffer `" + c.args[(std::size_t)idx].text + "` is not followed to an allocation in this file";
      for (const std::string& key : it->second) {
        const Buffer& b = a.buffers.at(key);
        // Stream-ordered and managed allocations are never windows, on any rank: the converted
        // call falls back to host NCCL at run time everywhere, and stage A (below) hands their
        // allocation sites to the LLM loop.
        // Not for send/recv, which have no run-time fallback per pair (the receive must be a window).
        if (b.allocator != "cudaMalloc" && b.allocator != "ncclMemAlloc" && b.allocator != "harness" &&
            (!stage_a_allocator(b.allocator) || is_p2p(c.name)))
          return "buffer `" + key + "` comes from " + b.allocator + " (line " + std::to_string(b.line) +
                 "), which cannot move to symmetric memory by rule";
        if (b.conditional)
          return "buffer `" + key + "` is allocated under a condition (line " + std::to_string(b.line) +
                 "): ranks may allocate differently, and window registration is collective";
      }
    }
    if (c.comm_paths.size() != 1) return "its communicator `" + c.args[(std::size_t)sig->comm].text + "` cannot be followed to one variable";
    return "";
  };
  std::map<std::size_t, std::string> reason;
  std::map<std::string, int> comm_votes;
  for (std::size_t ci : collectives) {
    reason[ci] = own_reason(a.calls[ci]);
    if (reason[ci].empty()) ++comm_votes[a.calls[ci].comm_paths.front()];
  }
  // One communicator is converted: the one most convertible calls use. Its creation binds the
  // runtime (windows registered there and at every later symmetric allocation, a point every rank
  // passes), which point-to-point calls need: they run on some ranks only.
  std::string bound;
  for (const auto& [path, n] : comm_votes)
    if (bound.empty() || n > comm_votes[bound]) bound = path;
  const CommInit* bound_init = nullptr;
  for (const CommInit& ci : a.comm_inits)
    if (ci.path == bound && !ci.conditional && !bound_init) bound_init = &ci;
  for (std::size_t ci : collectives) {
    const Call& c = a.calls[ci];
    if (!reason[ci].empty()) continue;
    if (c.comm_paths.front() != bound)
      reason[ci] = "on communicator `" + c.comm_paths.front() + "`; the converted runtime serves one communicator per process (`" + bound +
                   "`, used by most convertible calls): host NCCL";
    else if (is_p2p(c.name) && !bound_init && (c.group >= 0 ? a.calls[a.groups[(std::size_t)c.group].start_call].conditional : c.conditional))
      reason[ci] = "runs under a condition and `" + bound +
                   "` is not created in this file: the first converted call registers the windows, a collective step every rank "
                   "must reach (create the communicator in this file, or call it on every rank)";
  }
  // Sends and receives pair across ranks in ways the file does not show (rank-dependent peers,
  // other groups): on one communicator they convert all together or not at all, so a converted
  // send never meets a host receive, and a pair is in windows on both ends or on neither.
  // A call whose communicator is not followed ("") could pair with any.
  auto comm_of = [&](std::size_t ci) { return a.calls[ci].comm_paths.size() == 1 ? a.calls[ci].comm_paths.front() : std::string(); };
  auto pairs_all_or_nothing = [&]() {
    std::map<std::string, std::string> bad;  // communicator -> first send/recv on it left host
    for (std::size_t ci : collectives)
      if (is_p2p(a.calls[ci].name) && !reason[ci].empty() && !bad.count(comm_of(ci)))
        bad[comm_of(ci)] = fmt::format("line {} ({})", a.calls[ci].line, reason[ci]);
    bool changed = false;
    for (std::size_t ci : collectives) {
      if (!is_p2p(a.calls[ci].name) || !reason[ci].empty()) continue;
      auto it = bad.find(comm_of(ci));
      if (it == bad.end()) it = bad.find("");
      if (it == bad.end()) continue;
      reason[ci] = "a send/recv pair must be in symmetric windows on both ends or on neither, and another send/recv on its "
                   "communicator stays host NCCL: " + it->second;
      changed = true;
    }
    return changed;
  };
  // A group converts whole or not at all: a host member left in it would lose its group.
  auto groups_whole = [&]() {
    for (std::size_t g = 0; g < a.groups.size(); ++g) {
      std::string bad;
      std::set<std::string> streams;
      for (std::size_t m : a.groups[g].members) {
        if (!reason[m].empty() && bad.empty()) bad = fmt::format("line {} ({})", a.calls[m].line, reason[m]);
        if (is_p2p(a.calls[m].name)) streams.insert(a.calls[m].stream);
      }
      if (streams.size() > 1 && bad.empty()) bad = "send/recv on several streams (one p2p kernel runs on one stream)";
      if (bad.empty()) continue;
      for (std::size_t m : a.groups[g].members)
        if (reason[m].empty())
          reason[m] = "its group (line " + std::to_string(a.groups[g].start_line) + ") stays host NCCL: a member cannot convert, " + bad;
    }
  };
  // The other half of "both ends or neither": a send/recv left host NCCL keeps its buffers out of
  // the windows, so a collective that would make one of them a window stays host NCCL too.
  auto host_pairs_unwindowed = [&]() {
    std::map<std::string, std::size_t> host_p2p;  // buffer key -> a host send/recv using it
    for (std::size_t ci : collectives)
      if (is_p2p(a.calls[ci].name) && !reason[ci].empty())
        for (const auto& [idx, keys] : a.calls[ci].arg_buffers)
          for (const std::string& key : keys) host_p2p.emplace(key, ci);
    bool changed = false;
    for (std::size_t ci : collectives) {
      const Call& c = a.calls[ci];
      if (is_p2p(c.name) || !reason[ci].empty()) continue;
      for (int idx : window_args(c.name, *nccl_signature(c.name)))
        for (const std::string& key : c.arg_buffers.at(idx))
          if (auto it = host_p2p.find(key); it != host_p2p.end() && reason[ci].empty()) {
            reason[ci] = fmt::format("buffer `{}` is also used by the host send/recv at line {}, which must not become a window "
                                     "unless its other end does (a send/recv pair is windowed on both ends or on neither)",
                                     key, a.calls[it->second].line);
            changed = true;
          }
    }
    return changed;
  };
  // Each pass only adds reasons, so this ends.
  for (bool again = true; again;) {
    groups_whole();
    again = pairs_all_or_nothing();
    again = host_pairs_unwindowed() || again;
  }

  for (std::size_t ci : collectives) {
    const Call& c = a.calls[ci];
    const NcclSignature* sig = nccl_signature(c.name);
    if (!reason[ci].empty()) {
      conv.left.push_back(Unconverted{c.line, c.name, reason[ci]});
      continue;
    }
    auto rep = kReplacement.find(c.name);
    int site;
    if (is_p2p(c.name) && c.group >= 0) {
      auto it = group_site.find(c.group);
      if (it == group_site.end()) it = group_site.emplace(c.group, next_site++).first;
      site = it->second;
    } else {
      site = next_site++;
      if (c.group >= 0 && !group_site.count(c.group)) group_site.emplace(c.group, next_site++);
    }
    const std::string after = fmt::format("braid_converted::{}<{}>", rep->second, site);
    edits.push_back(Edit{c.call_begin, c.call_begin + c.name.size(), after});
    std::string why = kRuleWhy.at(c.name);
    if (c.loop >= 0) why += " (inside a loop: same site, same barrier indices each trip)";
    if (!c.via.empty()) {
      why += "; buffers followed: ";
      for (std::size_t k = 0; k < c.via.size(); ++k) why += (k ? ", " : "") + c.via[k];
    }
    conv.changes.push_back(Change{c.line, "B", rep->second, c.name, after, why});
    ++conv.converted_calls;
    for (int idx : window_args(c.name, *sig))
      for (const std::string& key : c.arg_buffers.at(idx)) symmetric.insert(key);
  }
  // Group brackets around converted calls.
  for (auto& [g, site] : group_site) {
    const Group& grp = a.groups[(std::size_t)g];
    const Call& start = a.calls[grp.start_call];
    const Call& end = a.calls[grp.end_call];
    edits.push_back(Edit{start.call_begin, start.call_begin + start.name.size(), "braid_converted::group_start"});
    const std::string end_name = fmt::format("braid_converted::group_end<{}>", site);
    edits.push_back(Edit{end.call_begin, end.call_begin + end.name.size(), end_name});
    conv.changes.push_back(Change{start.line, "B", "group", "ncclGroupStart", "braid_converted::group_start",
                                  "collects the group's sends and receives; no NCCL group is opened (members are device launches)"});
    conv.changes.push_back(Change{end.line, "B", "group", "ncclGroupEnd", end_name,
                                  "launches the group's sends/receives (if any) as one pairwise p2p kernel (mailbox postings and "
                                  "signals between the two ranks of each message, no world barrier)"});
  }
  conv.call_sites = next_site;

  // Stage A: the allocation sites converted calls touch, every release, the communicator.
  if (conv.converted_calls > 0) {
    for (std::size_t i = 0; i < a.calls.size(); ++i) {
      const Call& c = a.calls[i];
      if (c.args.empty()) continue;
      std::string after, why;
      bool site_symmetric = false;
      for (const std::string& key : symmetric)
        if (a.buffers.at(key).alloc_call == i) site_symmetric = true;
      if ((c.name == "cudaMalloc" || c.name == "ncclMemAlloc") && site_symmetric) {
        after = c.name == "cudaMalloc" ? "braid_converted::sym_malloc" : "braid_converted::sym_nccl_alloc";
        why = "symmetric memory (ncclMemAlloc); registered as an NCCL window once the communicator exists";
      } else if (c.name == "cudaFree" || c.name == "ncclMemFree" || c.name == "cudaFreeAsync") {
        after = c.name == "cudaFree" ? "braid_converted::sym_free" : c.name == "ncclMemFree" ? "braid_converted::sym_nccl_free"
                                                                                              : "braid_converted::sym_free_async";
        why = "freed by the allocator that made the pointer (looked up at run time): windows deregistered and ncclMemFree for "
              "symmetric allocations, " + c.name + " for the rest";
      } else if (c.name == "ncclCommDestroy" || c.name == "ncclCommFinalize") {
        after = c.name == "ncclCommDestroy" ? "braid_converted::comm_destroy" : "braid_converted::comm_finalize";
        why = "device communicator destroyed and windows deregistered before the communicator goes";
      } else if (bound_init && bound_init->call == i) {
        after = c.name == "ncclCommInitRank" ? "braid_converted::comm_init_rank"
                : c.name == "ncclCommSplit"  ? "braid_converted::comm_split"
                                             : "braid_converted::comm_init_rank_config";
        why = "binds the converted runtime to `" + bound + "`: windows for the symmetric allocations so far and the device communicator "
              "are made here, on every rank";
      } else if (c.name == "ncclCommWindowRegister" || c.name == "ncclDevCommCreate") {
        conv.left.push_back(Unconverted{c.line, c.name, "the program manages windows itself: its registrations are kept as written"});
        continue;
      } else {
        continue;
      }
      edits.push_back(Edit{c.call_begin, c.call_begin + c.name.size(), after});
      conv.changes.push_back(Change{c.line, "A", "infrastructure", c.name, after, why});
    }
    for (const std::string& key : symmetric) {
      const Buffer& b = a.buffers.at(key);
      if (stage_a_allocator(b.allocator))
        conv.left.push_back(Unconverted{b.line, b.allocator,
                                        "buffer `" + key + "` cannot move to symmetric memory by rule: converted calls on it fall back to "
                                        "host NCCL at run time"});
    }
  }

  // Harness programs: c.alloc -> c.alloc_window for touched buffers, adopt/release hooks.
  if (a.uses_harness && conv.converted_calls > 0) {
    std::set<std::string> harness_names;
    for (const std::string& v : symmetric) {
      const Buffer& b = a.buffers.at(v);
      if (!b.harness_name.empty()) harness_names.insert(b.harness_name);
    }
    const std::vector<Token> toks = code_tokens(lex(source).tokens);
    for (std::size_t i = 0; i + 3 < toks.size(); ++i) {
      if ((toks[i].text == "." || toks[i].text == "->") && toks[i + 1].text == "alloc" && toks[i + 2].text == "(" &&
          toks[i + 3].kind == TokenKind::String && harness_names.count(toks[i + 3].text.substr(1, toks[i + 3].text.size() - 2))) {
        edits.push_back(Edit{toks[i + 1].offset, toks[i + 1].end, "alloc_window"});
        conv.changes.push_back(Change{toks[i].line, "A", "infrastructure", "alloc", "alloc_window",
                                      "the harness allocates the buffer symmetric and registers its window"});
      }
      // Function bodies `run(Context& c, ...) {` and `teardown(Context& c) {`.
      const bool is_run = toks[i].text == "run", is_teardown = toks[i].text == "teardown";
      if ((is_run || is_teardown) && toks[i + 1].text == "(" && i > 0 && toks[i - 1].text == "void") {
        std::size_t j = i + 2;
        std::string ctx;
        int depth = 1;
        for (; j < toks.size() && depth > 0; ++j) {
          if (toks[j].text == "(") ++depth;
          if (toks[j].text == ")") --depth;
          if (ctx.empty() && toks[j].text == "&" && j + 1 < toks.size() && toks[j + 1].kind == TokenKind::Identifier) ctx = toks[j + 1].text;
        }
        if (j < toks.size() && toks[j].text == "{" && !ctx.empty()) {
          const std::string hook = std::string(is_run ? "\n  braid_converted::adopt_harness(" : "\n  braid_converted::release_harness(") + ctx + ");";
          edits.push_back(Edit{toks[j].end, toks[j].end, hook});
          conv.changes.push_back(Change{toks[j].line, "A", "infrastructure", "", hook.substr(3),
                                        is_run ? "the replacements find the harness's windows" : "device communicator destroyed before the harness frees its windows"});
        }
      }
    }
  }
  for (const Issue& u : a.unsupported) conv.left.push_back(Unconverted{u.line, u.construct, u.reason});
  if (conv.converted_calls > 0) {
    const std::size_t at = prelude_position(source);
    edits.push_back(Edit{at, at, "\n" + converted_prelude(conv.call_sites, a.uses_harness)});
  }
  std::sort(conv.changes.begin(), conv.changes.end(), [](const Change& x, const Change& y) { return x.line < y.line; });
  std::sort(conv.left.begin(), conv.left.end(), [](const Unconverted& x, const Unconverted& y) { return x.line < y.line; });
  conv.source = apply_edits(source, edits);
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
      {"sym_malloc", "cudaMalloc"},          {"sym_nccl_alloc", "ncclMemAlloc"}, {"sym_free", "cudaFree"},
      {"sym_nccl_free", "ncclMemFree"},      {"comm_destroy", "ncclCommDestroy"}, {"comm_finalize", "ncclCommFinalize"},
      {"group_start", "ncclGroupStart"},     {"group_end", "ncclGroupEnd"},       {"adopt_harness", ""},
      {"release_harness", ""},               {"sym_free_async", "cudaFreeAsync"},  {"comm_init_rank", "ncclCommInitRank"},
      {"comm_split", "ncclCommSplit"},       {"comm_init_rank_config", "ncclCommInitRankConfig"}};
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
    for (const auto& [nccl, replacement] : kReplacement)
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

json conversion_to_json(const Conversion& c) {
  json changes = json::array();
  for (const Change& ch : c.changes)
    changes.push_back({{"line", ch.line}, {"stage", ch.stage}, {"rule", ch.rule}, {"before", ch.before}, {"after", ch.after}, {"why", ch.why}});
  json left = json::array();
  for (const Unconverted& u : c.left) left.push_back({{"file", c.file}, {"line", u.line}, {"construct", u.construct}, {"reason", u.reason}});
  return json{{"file", c.file},          {"nccl_calls", c.nccl_calls}, {"converted_calls", c.converted_calls},
              {"call_sites", c.call_sites}, {"complete", c.complete()}, {"changes", changes},
              {"unconverted", left}};
}

std::string conversion_to_text(const Conversion& c) {
  std::string out = fmt::format("{}: {} of {} NCCL calls converted by rules{}\n", c.file, c.converted_calls, c.nccl_calls,
                                c.complete() ? " (complete)" : "");
  for (const Change& ch : c.changes)
    out += fmt::format("  line {:<4} stage {} {:<15} {} -> {}\n             {}\n", ch.line, ch.stage, ch.rule, ch.before.empty() ? "(insert)" : ch.before,
                       ch.after, ch.why);
  if (!c.left.empty()) out += "left for the LLM loop:\n";
  for (const Unconverted& u : c.left) out += fmt::format("  {}:{}: {}: {}\n", c.file, u.line, u.construct, u.reason);
  return out;
}

}  // namespace braid::convert
