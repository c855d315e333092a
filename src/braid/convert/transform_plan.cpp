// The decision pass of transform() (transform_plan.hpp): which collectives convert and why the
// others stay host NCCL, settled over calls that must convert together.
#include "braid/convert/transform_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

namespace braid::convert {
namespace {

const std::map<std::string, std::string> kReplacement = {{"ncclAllGather", "all_gather"},
                                                         {"ncclAllReduce", "all_reduce"},
                                                         {"ncclReduceScatter", "reduce_scatter"},
                                                         {"ncclBroadcast", "broadcast"},
                                                         {"ncclBcast", "bcast"},
                                                         {"ncclAlltoAll", "all_to_all"},
                                                         {"ncclReduce", "reduce"},
                                                         {"ncclGather", "gather"},
                                                         {"ncclScatter", "scatter"},
                                                         {"ncclSend", "send"},
                                                         {"ncclRecv", "recv"}};

bool is_reduction(const std::string& name) {
  return name == "ncclAllReduce" || name == "ncclReduceScatter" || name == "ncclReduce";
}

// An enumerator nccl.h declares for data types or reductions, as written (`ncclFloat16`, `ncclAvg`).
// Anything else is decided at run time: an expression (`nccl_type<T>()`) or a program's own
// constant that merely looks like one (llm.c's `const ncclDataType_t ncclFloatX = ...`).
bool nccl_constant(const std::string& text) {
  static const std::set<std::string> kEnumerators = {
      "ncclInt8",     "ncclChar",       "ncclUint8",      "ncclInt32",    "ncclInt",   "ncclUint32",  "ncclInt64",
      "ncclUint64",   "ncclFloat16",    "ncclHalf",       "ncclFloat32",  "ncclFloat", "ncclFloat64", "ncclDouble",
      "ncclBfloat16", "ncclFloat8e4m3", "ncclFloat8e5m2", "ncclNumTypes", "ncclSum",   "ncclProd",    "ncclMax",
      "ncclMin",      "ncclAvg",        "ncclNumOps",     "ncclMaxRedOp"};
  return kEnumerators.count(text) > 0;
}

// Why a call's data type / reduction has no device rule ("" when it has one). A type or op that is
// not a literal is decided at run time by the replacement (the same on every rank).
std::string type_op_reason(const Call& c, const NcclSignature& sig) {
  static const std::set<std::string> kTypes = {"ncclFloat",  "ncclFloat32", "ncclBfloat16", "ncclHalf", "ncclFloat16",
                                               "ncclDouble", "ncclFloat64", "ncclInt32",    "ncclInt",  "ncclUint32",
                                               "ncclInt64",  "ncclUint64",  "ncclInt8",     "ncclChar", "ncclUint8"};
  static const std::set<std::string> kFloatTypes = {"ncclFloat",   "ncclFloat32", "ncclBfloat16", "ncclHalf",
                                                    "ncclFloat16", "ncclDouble",  "ncclFloat64"};
  static const std::set<std::string> kOps = {"ncclSum", "ncclProd", "ncclMax", "ncclMin", "ncclAvg"};
  if (!is_reduction(c.name)) return "";
  const std::string& dt = c.args[(std::size_t)sig.dtype].text;
  const std::string& op = c.args[(std::size_t)sig.op].text;
  if (nccl_constant(dt) && !kTypes.count(dt))
    return "data type `" + dt + "` has no device reduction (fp8 and others stay host NCCL)";
  if (nccl_constant(op) && !kOps.count(op)) return "reduction `" + op + "` has no device rule";
  if (op == "ncclAvg" && nccl_constant(dt) && !kFloatTypes.count(dt))
    return "ncclAvg on an integer type has no device rule";
  return "";
}

// Why a call cannot convert on its own ("" when a rule applies), before communicator binding.
std::string own_reason(const Analysis& a, const Call& c) {
  const NcclSignature* sig = nccl_signature(c.name);
  if ((int)c.args.size() != sig->arity) return "arguments could not be split";
  if (!kReplacement.count(c.name)) return "no rule for " + c.name;
  if (!c.header.empty())
    return "written in header " + c.header + (c.function.empty() ? "" : " (in " + c.function + "())") +
           ", which braid does not rewrite (it writes only this file): host NCCL";
  if (std::string r = type_op_reason(c, *sig); !r.empty()) return r;
  if (!c.unresolved.empty()) return c.unresolved;
  // A converted send/recv numbers its messages per peer on the host at launch and copies its plan
  // from host memory: replayed from a graph, it would reuse the sequence numbers captured once
  // (and a plan long gone), and meet the wrong posting. NCCL's own send/recv are graph-safe.
  if (c.captured_line > 0 && is_p2p(c.name))
    return fmt::format(
        "captured into a CUDA graph (cudaStreamBeginCapture at line {}): a converted send/recv plans its "
        "messages on the host at each launch, which a replayed graph would repeat stale; host NCCL",
        c.captured_line);
  for (int idx : window_args(c.name, *sig)) {
    auto it = c.arg_buffers.find(idx);
    if (it == c.arg_buffers.end() || it->second.empty())
      return "buffer `" + c.args[(std::size_t)idx].text + "` is not followed to an allocation in this file";
    // One argument that may be a window on one rank and stream-ordered memory on another (`rank ? a : b`,
    // a helper given both) would take the device path on some ranks and host NCCL on others.
    const auto stage_a_key = [&](const std::string& key) { return stage_a_allocator(a.buffers.at(key).allocator); };
    if (std::any_of(it->second.begin(), it->second.end(), stage_a_key) &&
        !std::all_of(it->second.begin(), it->second.end(), stage_a_key))
      return "buffer `" + c.args[(std::size_t)idx].text +
             "` may be symmetric memory or stream-ordered memory: ranks could disagree on running it on the device";
    for (const std::string& key : it->second) {
      const Buffer& b = a.buffers.at(key);
      // Stream-ordered and managed allocations are never windows, on any rank: the converted
      // call falls back to host NCCL at run time everywhere, and stage A (below) hands their
      // allocation sites to the LLM loop.
      // Not for send/recv, which have no run-time fallback per pair (the receive must be a window).
      // Nor is a send/recv's stream-ordered buffer moved to symmetric memory by rule (cudaMallocAsync
      // -> sym_malloc, cudaFreeAsync -> sym_free_async, which waits for the stream before ncclMemFree):
      // each allocation would become a collective window registration, at every step of a loop
      // (MoE's per-step token buffers), with sizes that follow per-rank token counts, while NCCL
      // requires every rank to register at once with equal sizes. braid cannot prove either, so the
      // pair stays host NCCL, which never deadlocks and frees with the program's own allocator.
      if (stage_a_allocator(b.allocator) && is_p2p(c.name))
        return "buffer `" + key + "` comes from " + b.allocator + " (line " + std::to_string(b.line) +
               "): " + (b.allocator == "cudaMallocManaged" ? "managed" : "stream-ordered") +
               " memory is never an NCCL window, a send/recv has no host fallback per pair, "
               "and making it symmetric would register a window collectively at every allocation, with sizes "
               "braid cannot prove equal on every rank";
      if (!symmetric_replacement(b.allocator) && b.allocator != "harness" && !stage_a_allocator(b.allocator))
        return "buffer `" + key + "` comes from " + b.allocator + " (line " + std::to_string(b.line) +
               "), which cannot move to symmetric memory by rule";
      if (b.alloc_call < a.calls.size() && !a.calls[b.alloc_call].header.empty())
        return "buffer `" + key + "` is allocated in header " + a.calls[b.alloc_call].header +
               ", which braid does not rewrite: it cannot move to symmetric memory";
      if (!b.freed_in_header.empty())
        return "buffer `" + key + "` is released by " + b.freed_in_header +
               ", which braid does not rewrite: a symmetric window freed there would be freed with the wrong "
               "allocator";
      if (b.registered_line > 0)
        return "buffer `" + key + "` is registered by the program itself (line " + std::to_string(b.registered_line) +
               (b.allocator == "ncclMemAlloc" ? ", not as a window on the whole buffer" : "") +
               "): a second registration as a window is not made";
      // A window has one size on every rank: the runtime makes every rank allocate the largest any
      // asks for, agreed over the communicators bound at the allocation (bind_communicators checks
      // that the call's own is among them), which one thread driving every rank cannot ask.
      if (!b.rank_dependent_size.empty() && (b.after_creations.empty() || a.one_thread_drives_ranks))
        return "buffer `" + key + "` is allocated (line " + std::to_string(b.line) +
               ") with a size that depends on the rank (`" + b.bytes_expr +
               (b.rank_dependent_size == b.bytes_expr ? "" : "`, through `" + b.rank_dependent_size) + "`) " +
               (a.one_thread_drives_ranks ? "by one thread driving every rank"
                : b.allocated_in_loop     ? "in a loop (an agreement and a registration at every trip)"
                                      : "where braid cannot place it after a communicator's creation on every path") +
               ": a window is registered collectively with the same size on every rank, agreed over a "
               "communicator at the allocation";
      if (b.ipc_exported_line > 0)
        return "buffer `" + key + "` is exported through cudaIpcGetMemHandle (line " +
               std::to_string(b.ipc_exported_line) +
               "), which refuses ncclMemAlloc (cuMem) memory: it stays cudaMalloc, so the program's own IPC path "
               "(a custom all-reduce) keeps working";
      if (b.conditional_call_line > 0)
        return "buffer `" + key + "` is allocated (line " + std::to_string(b.line) + ") in " + b.conditional_caller +
               "(), which may run on some ranks only (called under a condition, or constructed out of braid's sight, "
               "at line " +
               std::to_string(b.conditional_call_line) +
               "): ranks may allocate differently, and window registration is collective";
      if (b.rank_dependent_trip_line > 0)
        return "buffer `" + key + "` is allocated (line " + std::to_string(b.line) +
               ") in a loop whose trip count depends on the rank (line " + std::to_string(b.rank_dependent_trip_line) +
               "): ranks may allocate a different number of times, and window registration is collective";
      if (b.conditional)
        return "buffer `" + key + "` is allocated under a condition (line " + std::to_string(b.line) +
               "): ranks may allocate differently, and window registration is collective";
    }
  }
  // A collective site reached with several communicators (a helper given the tensor- and the
  // data-parallel one) binds each at run time and finds its windows there. A send/recv site does
  // not: its pairing across ranks is checked per communicator. With one thread driving every rank
  // the runtime serves one communicator per GPU.
  if (c.comm_paths.size() > 1 && (is_p2p(c.name) || a.one_thread_drives_ranks)) {
    std::string paths, via;
    for (const std::string& p : c.comm_paths) paths += (paths.empty() ? "`" : ", `") + p + "`";
    for (const std::string& v : c.comm_via) via += (via.empty() ? "" : ", ") + v;
    return "its communicator `" + c.args[(std::size_t)sig->comm].text + "` may be any of " + paths + " (" + via +
           (is_p2p(c.name) ? "): a send/recv site is converted on one communicator"
                           : "): with one thread driving every rank, one communicator per call site is converted");
  }
  if (c.comm_paths.empty())
    return "its communicator `" + c.args[(std::size_t)sig->comm].text + "` cannot be followed to one variable" +
           (c.comm_via.empty() ? std::string() : " (" + c.comm_via.back() + ")");
  return "";
}

// Calls on a communicator created non-blocking in this file stay host NCCL: NCCL (2.28) registers
// no symmetric window on one ("invalid argument", seen on GPUs even with every call waited out of
// ncclInProgress). It is never bound, so a blocking communicator beside it still converts.
void hold_nonblocking(const Analysis& a, const std::vector<std::size_t>& collectives, Plan& p) {
  for (std::size_t ci : collectives) {
    if (!p.reason[ci].empty()) continue;  // a call without a reason has one communicator path or more
    const Call& c = a.calls[ci];
    const auto made = std::find_if(a.comm_inits.begin(), a.comm_inits.end(), [&](const CommInit& init) {
      return init.nonblocking && std::find(c.comm_paths.begin(), c.comm_paths.end(), init.path) != c.comm_paths.end();
    });
    const Call* creation = made == a.comm_inits.end() ? nullptr : &a.calls[made->call];
    const bool inherited =
        creation && creation->name == "ncclCommSplit" && creation->args.size() > 4 &&
        (creation->args[4].text == "NULL" || creation->args[4].text == "nullptr" || creation->args[4].text == "0");
    if (creation)
      p.reason[ci] = fmt::format(
          "on `{}`, created non-blocking (line {}, {}): NCCL registers no symmetric window on a non-blocking "
          "communicator: host NCCL",
          made->path, creation->line,
          inherited ? "split with no config from a non-blocking parent" : "with `blocking = 0` in its config");
  }
}

// Why call `c` on `bound` cannot convert because a buffer of rank-dependent size is allocated
// before that communicator is created ("" when none is): the runtime agrees on the size over the
// communicators bound at the allocation, so the call's own must be one of them.
std::string created_after(const Analysis& a, const Call& c, const BoundComm& bound) {
  for (int idx : window_args(c.name, *nccl_signature(c.name))) {
    auto it = c.arg_buffers.find(idx);
    if (it == c.arg_buffers.end()) continue;
    for (const std::string& key : it->second) {
      const Buffer& b = a.buffers.at(key);
      if (b.rank_dependent_size.empty()) continue;
      // Any creation of the call's communicator path (an array's elements are one path).
      const bool before = std::any_of(b.after_creations.begin(), b.after_creations.end(), [&](std::size_t k) {
        const CommInit* made = &a.comm_inits[k];
        return made == bound.init || std::find(bound.also.begin(), bound.also.end(), made) != bound.also.end();
      });
      if (!before)
        return fmt::format(
            "buffer `{}` is allocated (line {}) with a size that depends on the rank (`{}`) where `{}` is not "
            "created before it on every path: the ranks agree on one window size over the communicators bound "
            "at the allocation",
            key, b.line, b.rank_dependent_size, bound.path);
    }
  }
  return "";
}

// The communicators converted: every one a convertible call uses (data- and tensor-parallel ones
// side by side; the runtime binds each, and registers every symmetric allocation with each, in the
// same order on every rank). With one thread driving every rank, only the one most calls use: the
// runtime binds one communicator per GPU there. Each is bound at its unconditional creation in this
// file where there is one (a point every rank passes), else at its first converted call, which
// point-to-point calls on some ranks only cannot be.
void bind_communicators(const Analysis& a, const std::vector<std::size_t>& collectives, Plan& p) {
  hold_nonblocking(a, collectives, p);
  std::map<std::string, int> votes;
  for (std::size_t ci : collectives)
    if (p.reason[ci].empty())
      for (const std::string& path : a.calls[ci].comm_paths) ++votes[path];
  std::vector<std::string> chosen;
  for (const auto& [path, n] : votes) chosen.push_back(path);
  std::stable_sort(chosen.begin(), chosen.end(),
                   [&](const std::string& x, const std::string& y) { return votes[x] > votes[y]; });
  if (a.one_thread_drives_ranks && chosen.size() > 1) chosen.resize(1);
  for (const std::string& path : chosen) {
    BoundComm bc{path, nullptr};
    for (const CommInit& ci : a.comm_inits)
      if (ci.path == path && !ci.conditional && a.calls[ci.call].header.empty()) {
        if (bc.init) bc.also.push_back(&ci);
        else bc.init = &ci;
      }
    p.bound.push_back(bc);
  }
  for (std::size_t ci : collectives) {
    const Call& c = a.calls[ci];
    for (const std::string& path : c.comm_paths) {
      if (!p.reason[ci].empty()) break;
      const auto bound =
          std::find_if(p.bound.begin(), p.bound.end(), [&](const BoundComm& b) { return b.path == path; });
      if (bound == p.bound.end())
        p.reason[ci] = "on communicator `" + path +
                       "`; with one thread driving every rank the converted runtime serves one "
                       "communicator per GPU (`" +
                       p.bound.front().path + "`, used by most convertible calls): host NCCL";
      else if (c.captured_line > 0 && !bound->init)
        p.reason[ci] = fmt::format(
            "captured into a CUDA graph (cudaStreamBeginCapture at line {}) and `{}` is not created in this file: "
            "the first converted call would register the windows inside the capture",
            c.captured_line, bound->path);
      else if (const std::string late = created_after(a, c, *bound); !late.empty()) p.reason[ci] = late;
      else if (is_p2p(c.name) && !bound->init &&
               (c.group >= 0 ? a.calls[a.groups[(std::size_t)c.group].start_call].conditional : c.conditional))
        p.reason[ci] =
            "runs under a condition and `" + bound->path +
            "` is not created in this file: the first converted call registers the windows, a "
            "collective step every rank must reach (create the communicator in this file, or call it on every rank)";
    }
  }
}

// Sends and receives pair across ranks in ways the file does not show (rank-dependent peers,
// other groups): on one communicator they convert all together or not at all, so a converted
// send never meets a host receive, and a pair is in windows on both ends or on neither.
// A call whose communicator is not followed ("") could pair with any. True when a reason was added.
bool pairs_all_or_nothing(const Analysis& a, const std::vector<std::size_t>& collectives, Plan& p) {
  auto comm_of = [&](std::size_t ci) {
    return a.calls[ci].comm_paths.size() == 1 ? a.calls[ci].comm_paths.front() : std::string();
  };
  std::map<std::string, std::string> bad;  // communicator -> first send/recv on it left host
  for (std::size_t ci : collectives)
    if (is_p2p(a.calls[ci].name) && !p.reason[ci].empty() && !bad.count(comm_of(ci)))
      bad[comm_of(ci)] = fmt::format("line {} ({})", a.calls[ci].line, p.reason[ci]);
  bool changed = false;
  for (std::size_t ci : collectives) {
    if (!is_p2p(a.calls[ci].name) || !p.reason[ci].empty()) continue;
    auto it = bad.find(comm_of(ci));
    if (it == bad.end()) it = bad.find("");
    if (it == bad.end()) continue;
    p.reason[ci] =
        "a send/recv pair must be in symmetric windows on both ends or on neither, and another send/recv on its "
        "communicator stays host NCCL: " +
        it->second;
    changed = true;
  }
  return changed;
}

// A group converts whole or not at all: a host member left in it would lose its group.
void groups_whole(const Analysis& a, Plan& p) {
  for (std::size_t g = 0; g < a.groups.size(); ++g) {
    std::string bad;
    std::set<std::string> streams, comms;
    for (std::size_t m : a.groups[g].members) {
      if (!p.reason[m].empty() && bad.empty()) bad = fmt::format("line {} ({})", a.calls[m].line, p.reason[m]);
      if (is_p2p(a.calls[m].name)) streams.insert(a.calls[m].stream);
      if (is_p2p(a.calls[m].name) && a.calls[m].comm_paths.size() == 1) comms.insert(a.calls[m].comm_paths.front());
    }
    if (streams.size() > 1 && bad.empty()) bad = "send/recv on several streams (one p2p kernel runs on one stream)";
    // One thread driving every rank groups one communicator per GPU; otherwise a group's sends and
    // receives run as one p2p kernel on one communicator.
    if (comms.size() > 1 && bad.empty() && !a.one_thread_drives_ranks)
      bad = "send/recv on several communicators (one p2p kernel serves one communicator)";
    if (bad.empty()) continue;
    for (std::size_t m : a.groups[g].members)
      if (p.reason[m].empty())
        p.reason[m] = "its group (line " + std::to_string(a.groups[g].start_line) +
                      ") stays host NCCL: a member cannot convert, " + bad;
  }
}

// The other half of "both ends or neither": a send/recv left host NCCL keeps its buffers out of
// the windows, so a collective that would make one of them a window stays host NCCL too. True
// when a reason was added.
bool host_pairs_unwindowed(const Analysis& a, const std::vector<std::size_t>& collectives, Plan& p) {
  std::map<std::string, std::size_t> host_p2p;  // buffer key -> a host send/recv using it
  for (std::size_t ci : collectives)
    if (is_p2p(a.calls[ci].name) && !p.reason[ci].empty())
      for (const auto& [idx, keys] : a.calls[ci].arg_buffers)
        for (const std::string& key : keys) host_p2p.emplace(key, ci);
  bool changed = false;
  for (std::size_t ci : collectives) {
    const Call& c = a.calls[ci];
    if (is_p2p(c.name) || !p.reason[ci].empty()) continue;
    for (int idx : window_args(c.name, *nccl_signature(c.name)))
      for (const std::string& key : c.arg_buffers.at(idx))
        if (auto it = host_p2p.find(key); it != host_p2p.end() && p.reason[ci].empty()) {
          p.reason[ci] = fmt::format(
              "buffer `{}` is also used by the host send/recv at line {}, which must not become a window "
              "unless its other end does (a send/recv pair is windowed on both ends or on neither)",
              key, a.calls[it->second].line);
          changed = true;
        }
  }
  return changed;
}

// A communicator destroyed in a header braid does not rewrite would go before the device
// communicator and the windows are released (braid_converted::comm_destroy): nothing converts.
std::string destroyed_in_header(const Analysis& a) {
  for (const Call& c : a.calls)
    if (!c.header.empty() && (c.name == "ncclCommDestroy" || c.name == "ncclCommFinalize" || c.name == "ncclCommAbort"))
      return fmt::format(
          "{} in header {}{}, which braid does not rewrite, would release the communicator before the converted "
          "runtime's device communicator and windows: host NCCL",
          c.name, c.header, c.function.empty() ? "" : " (in " + c.function + "())");
  return "";
}

}  // namespace

Plan plan_conversion(const Analysis& a, const std::vector<std::size_t>& collectives) {
  Plan p;
  const std::string destroyed = destroyed_in_header(a);
  for (std::size_t ci : collectives) p.reason[ci] = destroyed.empty() ? own_reason(a, a.calls[ci]) : destroyed;
  bind_communicators(a, collectives, p);
  // Each pass only adds reasons, so this ends.
  for (bool again = true; again;) {
    groups_whole(a, p);
    again = pairs_all_or_nothing(a, collectives, p);
    again = host_pairs_unwindowed(a, collectives, p) || again;
  }
  return p;
}

const BoundComm* Plan::bound_at(std::size_t creation_call) const {
  for (const BoundComm& b : bound)
    if ((b.init && b.init->call == creation_call) ||
        std::any_of(b.also.begin(), b.also.end(), [&](const CommInit* c) { return c->call == creation_call; }))
      return &b;
  return nullptr;
}

const std::map<std::string, std::string>& replacements() { return kReplacement; }

std::vector<int> window_args(const std::string& name, const NcclSignature& sig) {
  if (name == "ncclAllReduce") return {sig.send, sig.recv};
  if (name == "ncclReduceScatter" || name == "ncclReduce" || name == "ncclGather") return {sig.send};
  // A send's own buffer too: both ends of a pair in windows or neither (NCCL 2.28.9 hangs an
  // ncclSend from a registered window into an unregistered receive buffer, which a run-time
  // fallback of the pair would otherwise attempt).
  if (name == "ncclSend") return {sig.send};
  return {sig.recv};  // all-gather, all-to-all, broadcast, bcast, scatter, recv
}

const SymmetricAllocator* symmetric_replacement(const std::string& allocator) {
  static const std::map<std::string, SymmetricAllocator> kReplacements = {
      {"cudaMalloc", {"braid_converted::sym_malloc", "braid_converted::sym_malloc_agreed"}},
      {"ncclMemAlloc", {"braid_converted::sym_nccl_alloc", "braid_converted::sym_nccl_alloc_agreed"}},
      // rows padded to the pitch the device's own cudaMallocPitch gives for the width
      {"cudaMallocPitch", {"braid_converted::sym_malloc_pitch", "braid_converted::sym_malloc_pitch_agreed"}}};
  const auto it = kReplacements.find(allocator);
  return it == kReplacements.end() ? nullptr : &it->second;
}

bool stage_a_allocator(const std::string& allocator) {
  // cudaMallocFromPoolAsync(&p, n, pool, s): stream-ordered too, from the program's own pool.
  return allocator == "cudaMallocAsync" || allocator == "cudaMallocFromPoolAsync" || allocator == "cudaMallocManaged";
}

bool is_p2p(const std::string& name) { return name == "ncclSend" || name == "ncclRecv"; }

}  // namespace braid::convert
