// The analyzer's passes on communicators (analyzer_passes.hpp): their creations and modes
// (blocking or not, inherited through splits), the communicator a member function names, and
// programs that run several ranks in one process (one thread driving every GPU, or a thread per rank).
#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <optional>
#include <set>

#include "braid/convert/analyzer_passes.hpp"
#include "braid/convert/buffer_flow_tokens.hpp"

namespace braid::convert {

// A config argument that gives none (the defaults, or the parent's for a split).
static bool no_config(const std::string& arg) { return arg == "nullptr" || arg == "NULL" || arg == "0"; }

// A creation of one rank's communicator from unique ids (the kinds a process may repeat per GPU).
static bool creates_by_rank(const std::string& name) {
  return name == "ncclCommInitRank" || name == "ncclCommInitRankConfig" || name == "ncclCommInitRankScalable";
}

// Whether `word` is a token of `text`.
static bool mentions(const std::string& text, const std::string& word) {
  if (word.empty()) return false;
  const std::vector<Token> t = code_tokens(lex(text).tokens);
  return std::any_of(t.begin(), t.end(), [&](const Token& x) { return x.text == word; });
}

// Creations by rank in a loop or several in one group: a rank per GPU of this process (nccl-tests'
// `-g N`, NCCL's example 3: the rank argument moves with the loop, one id) unless each makes another
// communicator of this same rank (a data- and a stats-communicator: several ids, one rank argument).
static bool several_ranks_here(const Call& c, const Analysis& a) {
  const std::size_t rank_arg = c.name == "ncclCommInitRankScalable" ? 2 : 3, id_arg = 2;
  if (c.args.size() <= rank_arg) return true;
  const std::string& rank = c.args[rank_arg].text;
  if (c.group >= 0) {
    std::set<std::string> ids;
    for (const Call& o : a.calls)
      if (o.group == c.group && creates_by_rank(o.name)) {
        if (o.args.size() <= rank_arg || o.args[rank_arg].text != rank) return true;
        ids.insert(o.args[id_arg].text);
      }
    if (ids.size() > 1) return false;
  }
  if (c.loop >= 0 && (std::size_t)c.loop < a.loops.size()) {
    // The loop's variable: the name before the header's first `=` or `:` (`int i = 0`, `auto& g : gpus`).
    const std::vector<Token> h = code_tokens(lex(a.loops[(std::size_t)c.loop].header).tokens);
    std::string var;
    for (std::size_t k = 1; k < h.size() && var.empty(); ++k)
      if ((h[k].text == "=" || h[k].text == ":") && h[k - 1].kind == TokenKind::Identifier) var = h[k - 1].text;
    if (!mentions(rank, var) && c.args.size() > id_arg && mentions(c.args[id_arg].text, var)) return false;
  }
  return true;
}

// A split given no config (NULL) takes its parent's: a split of a non-blocking communicator is
// non-blocking too, through any number of splits.
static void inherit_split_modes(Analysis& a) {
  for (bool changed = true; changed;) {
    changed = false;
    for (CommInit& ci : a.comm_inits) {
      const Call& c = a.calls[ci.call];
      if (ci.nonblocking || c.name != "ncclCommSplit" || c.args.size() < 5) continue;
      const std::string& config = c.args[4].text;
      if (!no_config(config)) continue;
      const std::string parent = access_path(c.args[0].text, false);
      ci.nonblocking = std::any_of(a.comm_inits.begin(), a.comm_inits.end(),
                                   [&](const CommInit& p) { return p.nonblocking && p.path == parent; });
      changed = changed || ci.nonblocking;
    }
  }
}

void collect_comm_inits(const BufferFlow& flow, const std::vector<Token>& toks, const TokenIndex& token_at,
                        Analysis& a) {
  // A non-blocking configuration anywhere in the file (`config.blocking = 0;`, `.blocking = false`).
  bool sets_nonblocking = false;
  for (std::size_t k = 0; k + 2 < toks.size(); ++k)
    sets_nonblocking = sets_nonblocking || (toks[k].text == "blocking" && toks[k + 1].text == "=" &&
                                            (toks[k + 2].text == "0" || toks[k + 2].text == "false"));
  for (std::size_t ci = 0; ci < a.calls.size(); ++ci) {
    const Call& c = a.calls[ci];
    int target = -1;
    if (creates_by_rank(c.name) && !c.args.empty()) target = 0;
    else if (c.name == "ncclCommSplit" && c.args.size() >= 4) target = 3;
    else if (c.name == "ncclCommInitAll") {
      a.single_process_multi_gpu = a.one_thread_drives_ranks = true;
      a.single_process_why = "creates its communicators with ncclCommInitAll";
    }
    if (target < 0) continue;
    // nccl-tests' shape: one creation per local GPU, in a loop or several in one group (`-g N`).
    const bool several_here = c.group >= 0 && std::count_if(a.calls.begin(), a.calls.end(), [&](const Call& o) {
                                                return o.group == c.group && creates_by_rank(o.name);
                                              }) > 1;
    if (c.name != "ncclCommSplit" && (c.loop >= 0 || several_here) && !a.single_process_multi_gpu &&
        several_ranks_here(c, a)) {
      a.single_process_multi_gpu = a.one_thread_drives_ranks = true;
      a.single_process_why = fmt::format("creates communicators {} (line {}): a rank per GPU of this process",
                                         c.loop >= 0 ? "in a loop" : "together in one group", c.line);
    }
    auto tok = token_at.find(c.call_begin);
    std::string path = access_path(c.args[(std::size_t)target].text, true);
    // Through references: `auto& s = mpu(); ncclCommSplit(..., &s.tp_comm, ...)` creates `state.tp_comm`.
    if (!path.empty() && tok != token_at.end())
      path = flow.target_path(path, flow.function_at(tok->second), tok->second);
    // A helper given the communicator's address: `void init_comm(ncclComm_t* c) { ncclCommInitRank(c, ...); }`.
    else if (tok != token_at.end())
      path = flow.pointee_of_parameter(c.args[(std::size_t)target].text, flow.function_at(tok->second));
    // The config argument: ncclCommSplit(.., &comm, config), ncclCommInitRankConfig(.., rank, config),
    // ncclCommInitRankScalable(.., nId, ids, config).
    const std::size_t config = c.name == "ncclCommInitRankScalable" ? 5 : 4;
    const bool configured = c.name != "ncclCommInitRank" && c.args.size() > config && !no_config(c.args[config].text);
    if (!path.empty() && tok != token_at.end())
      a.comm_inits.push_back(CommInit{ci, path, flow.conditional(tok->second), configured && sets_nonblocking});
  }
  inherit_split_modes(a);
}

void match_member_communicators(Analysis& a) {
  for (Call& c : a.calls) {
    if (c.comm_paths.size() != 1) continue;
    const std::string& use = c.comm_paths.front();
    if (use.find_first_of(".[") != std::string::npos) continue;  // not a bare name
    if (std::any_of(a.comm_inits.begin(), a.comm_inits.end(), [&](const CommInit& ci) { return ci.path == use; }))
      continue;
    const CommInit* only = nullptr;
    int matches = 0;
    for (const CommInit& ci : a.comm_inits) {
      const std::size_t dot = ci.path.rfind('.');
      if (dot != std::string::npos && ci.path.substr(dot + 1) == use) {
        only = &ci;
        ++matches;
      }
    }
    if (matches != 1) continue;
    c.via.push_back(fmt::format("communicator {} is the field {} (line {}), the only one of that name", use, only->path,
                                a.calls[only->call].line));
    c.comm_paths = {only->path};
  }
}

namespace {

// The code threads run: functions named as a thread's entry (std::thread/jthread, emplace_back into
// a vector of threads, pthread_create, std::async) or called from a body threads run, and those
// bodies (a lambda given to a thread, the statement under `#pragma omp parallel`).
struct ThreadCode {
  std::set<std::string> entries;
  struct Body {
    std::size_t begin = 0, end = 0;  // token range, exclusive
    bool omp = false;                // an OpenMP region, else a lambda
  };
  std::vector<Body> bodies;
  bool unparsed_omp = false;  // an omp region whose statement was not found
  int omp_line = 0;

  bool empty() const { return entries.empty() && bodies.empty() && !unparsed_omp; }
  // Where a thread runs the token at `at` from: "worker()", "a lambda", "an OpenMP region"; empty
  // when no thread does.
  std::string runs(std::size_t at, const BufferFlow& flow) const {
    for (const Body& b : bodies)
      if (at > b.begin && at < b.end) return b.omp ? "an OpenMP region" : "a lambda";
    const std::string via = flow.callers_reach(flow.function_at(at), entries);
    return via.empty() ? "" : via + "()";
  }
};

// The statement that starts at token k (an OpenMP region): a block, a loop or `if` with its body,
// or up to its `;`.
std::size_t region_end(const std::vector<Token>& toks, std::size_t k) {
  if (k >= toks.size()) return k;
  if (toks[k].text == "{") return matching(toks, k);
  if ((toks[k].text == "for" || toks[k].text == "while" || toks[k].text == "if") && k + 1 < toks.size() &&
      toks[k + 1].text == "(")
    return region_end(toks, matching(toks, k + 1) + 1);
  return flow_tokens::statement_end(toks, k, toks.size());
}

ThreadCode find_thread_code(const std::vector<Token>& toks, const std::vector<Token>& all, const BufferFlow& flow) {
  ThreadCode tc;
  for (const Token& t : all) {
    if (t.kind != TokenKind::Preprocessor || t.text.find("pragma") == std::string::npos ||
        t.text.find("omp") == std::string::npos || t.text.find("parallel") == std::string::npos)
      continue;
    // The region is the statement on the lines after the pragma (its first token in `toks`).
    const auto first = std::find_if(toks.begin(), toks.end(), [&](const Token& x) { return x.line > t.line; });
    if (first == toks.end()) {
      tc.unparsed_omp = true, tc.omp_line = t.line;
      continue;
    }
    const std::size_t b = (std::size_t)(first - toks.begin());
    // Stored as starting one before its first token, so `runs` sees the region begin there.
    tc.bodies.push_back({b == 0 ? 0 : b - 1, region_end(toks, b), true});
    tc.omp_line = t.line;
  }
  for (const BufferFlow::ThreadStart& s : flow.thread_starts()) {
    if (s.body_open != 0) tc.bodies.push_back({s.body_open, s.body_close, false});
    else tc.entries.insert(toks[s.entry].text);
  }
  // What those bodies call runs in the threads too.
  for (const ThreadCode::Body& body : tc.bodies)
    for (std::size_t k = body.begin + 1; k + 1 < body.end && k + 1 < toks.size(); ++k)
      if (toks[k].kind == TokenKind::Identifier && toks[k + 1].text == "(") tc.entries.insert(toks[k].text);
  return tc;
}

// A call on a communicator that one rank's thread must make itself: data movement, groups,
// windows and creations. Destruction, queries and unique ids may come from any thread (the
// runtime finds a thread's binding from any thread).
bool rank_thread_call(const Call& c) {
  return nccl_signature(c.name) != nullptr || c.name == "ncclGroupStart" || c.name == "ncclGroupEnd" ||
         c.name == "ncclCommWindowRegister" || creates_by_rank(c.name) || c.name == "ncclCommInitAll" ||
         c.name == "ncclCommSplit";
}

// The places in `creator` where code token `at` (in whatever function) runs: `at` itself when it is
// creator's, else the call sites of its function there, through up to four callers (constructions
// of a class are its constructor's call sites). Nullopt when a path reaches no further (a function
// called nowhere, or only from elsewhere).
std::optional<std::vector<std::size_t>> places_in(const BufferFlow& flow, std::size_t at, const std::string& creator,
                                                  int depth = 0) {
  const std::string fn = flow.function_at(at);
  if (fn == creator) return std::vector<std::size_t>{at};
  if (fn.empty() || depth >= 4) return std::nullopt;
  const std::vector<std::size_t> sites = flow.call_sites_of(fn);
  if (sites.empty()) return std::nullopt;
  std::vector<std::size_t> out;
  for (std::size_t site : sites) {
    auto up = places_in(flow, site, creator, depth + 1);
    if (!up) return std::nullopt;
    out.insert(out.end(), up->begin(), up->end());
  }
  return out;
}

// Whether code token `at` of function `f` sits in a loop of f (its body may run more than once).
bool in_loop(const std::vector<Token>& toks, const FunctionDef& f, std::size_t at) {
  for (std::size_t k = f.body_open + 1; k < at && k < f.body_close; ++k) {
    const std::string& x = toks[k].text;
    std::size_t end = 0;
    if ((x == "for" || x == "while") && toks[k + 1].text == "(") end = region_end(toks, k);
    else if (x == "do") end = region_end(toks, k + 1);
    if (end > at) return true;
  }
  return false;
}

// The handle a pthread_create or pthread_join names, its first argument from `at` to the comma:
// `&h` or `h` gives "h", `&w->thread` or `w->thread` "w->thread" (a field is named with the
// variable that reaches it). "" when it is another expression.
std::string pthread_handle(const std::vector<Token>& toks, std::size_t at) {
  std::string out;
  if (at < toks.size() && toks[at].text == "&") ++at;
  for (bool want_name = true; at < toks.size() && toks[at].text != ","; ++at, want_name = !want_name) {
    const Token& t = toks[at];
    if (want_name ? t.kind != TokenKind::Identifier : (t.text != "->" && t.text != ".")) return "";
    out += t.text;
  }
  return at < toks.size() && !out.empty() && out.back() != '>' && out.back() != '.' ? out : "";
}

// Whether token `at` sits in a loop of the function that holds it.
bool in_helper_loop(const std::vector<Token>& toks, const BufferFlow& flow, std::size_t at) {
  const std::string fn = flow.function_at(at);
  for (const FunctionDef& f : flow.functions())
    if (f.name == fn && f.body_open < at && at < f.body_close) return in_loop(toks, f, at);
  return false;
}

// The end of a pthread's life in the creating function: the first place after `anchor` where a
// `pthread_join` of its handle runs on every path, in `creator` or in a helper called once from it
// (`comm_worker_stop(&w)` joining `w->thread`). The handle's last name is compared (a helper names
// the struct by its parameter); 0 when there is none.
std::size_t pthread_joined_after(const std::vector<Token>& toks, const BufferFlow& flow, const std::string& creator,
                                 const std::string& handle, std::size_t anchor) {
  const auto last_name = [](const std::string& h) {
    const std::size_t cut = h.find_last_of(">.");
    return cut == std::string::npos ? h : h.substr(cut + 1);
  };
  const bool local = last_name(handle) == handle;  // `&h`: a variable of the creating function
  std::size_t best = 0;
  for (std::size_t k = 0; k + 2 < toks.size(); ++k) {
    if (toks[k].text != "pthread_join" || toks[k + 1].text != "(") continue;
    const std::string joined = pthread_handle(toks, k + 2);
    if (joined.empty() || (local ? joined != handle : last_name(joined) != last_name(handle))) continue;
    if (flow.conditional(k)) continue;
    auto places = places_in(flow, k, creator);
    if (!places || places->size() != 1) continue;
    const std::size_t place = places->front();
    if (place > anchor && !flow.conditional(place) && (best == 0 || place < best)) best = place;
  }
  return best;
}

// One rank per process whose communicators background threads call on (a reducer thread fed by a
// queue; a gradient thread and a statistics thread, each on its own communicator). Converted, the
// threads' collectives run as kernels on the device communicators and read the runtime's windows;
// every host NCCL call a conversion adds (a window's registration, which is collective) or a
// release changes them. So it converts only when every thread's whole life lies between the two in
// the creating function's order, the same on every rank: every allocation and creation before the
// first place a thread starts (each start once, not in a loop, not under a condition), every
// release and destruction after the last is joined (`t.join()` of a local std::thread,
// `pthread_join` of a pthread's handle there or in a helper called once, or the end of the block
// whose object holds it: a joinable std::thread left to its destructor ends the program), no
// detach, and the threads make only collectives, outside groups (a group's state is the runtime's,
// shared). Returns why not, or "" with `started`/`joined` set to the lines of the first start and
// of the last end.
namespace {
struct ThreadLife {
  std::size_t start = 0, end = 0;  // tokens: where the thread starts, by where it has ended
  std::string why;                 // why braid cannot place it ("" when placed)
};

ThreadLife thread_life(const std::vector<Token>& toks, const BufferFlow& flow, const FunctionDef& cf,
                       const BufferFlow::ThreadStart& st) {
  const std::string& creator = cf.name;
  ThreadLife life;
  auto at = places_in(flow, st.entry, creator);
  if (!at || at->size() != 1)
    return {0, 0, "starts more than one background thread from one place (or one from more than one place)"};
  const std::size_t anchor = at->front();
  life.start = anchor;
  if (in_loop(toks, cf, anchor) || flow.conditional(anchor))
    return {0, 0, "starts its thread in a loop or under a condition"};
  // Where its life ends: `name.join()` of a local std::thread, `pthread_join(name, ..)` of
  // `pthread_create(&name, ..)`, else the end of the enclosing block (a std::jthread, or an object
  // holding the thread, joins in its destructor).
  const auto block_end = [&](std::size_t from) {
    int depth = 0;
    std::size_t open = from;
    while (open > cf.body_open && !(toks[open].text == "{" && depth == 0)) {
      if (toks[open].text == "}") ++depth;
      else if (toks[open].text == "{") --depth;
      --open;
    }
    return matching(toks, open);
  };
  // The first `name.join()` after the start that runs on every path (one under a condition may
  // leave the thread running past the releases).
  const auto joined_after = [&](const std::string& name) {
    for (std::size_t k = anchor; k + 3 < cf.body_close; ++k)
      if (toks[k].text == name && toks[k + 1].text == "." && toks[k + 2].text == "join" && !flow.conditional(k))
        return k;
    return std::size_t(0);
  };
  // The `(` of the pthread_create that starts it, when one does.
  const std::size_t create = st.open > 0 && toks[st.open - 1].text == "pthread_create" ? st.open : 0;
  // `std::thread name(f, ..)` / `std::jthread name{[&] {..}}`: the start's first argument is the entry.
  if (flow.function_at(st.entry) == creator && anchor >= 3 &&
      (toks[anchor - 1].text == "(" || toks[anchor - 1].text == "{") &&
      toks[anchor - 2].kind == TokenKind::Identifier &&
      (toks[anchor - 3].text == "thread" || toks[anchor - 3].text == "jthread")) {
    const std::string& name = toks[anchor - 2].text;
    life.end = joined_after(name);
    if (life.end == 0 && toks[anchor - 3].text == "jthread") life.end = block_end(anchor - 3);
    if (life.end == 0)
      life.why = fmt::format("starts thread `{}` and joins it nowhere braid can see on every path", name);
  } else if (create != 0) {
    // `pthread_create(&h, ..)`: no destructor ends a pthread; its `pthread_join(h, ..)` does.
    const std::string handle = pthread_handle(toks, create + 1);
    if (handle.empty()) return {0, 0, "starts a pthread that braid cannot follow to its pthread_join"};
    if (flow.function_at(st.open) != creator && (flow.conditional(st.open) || in_helper_loop(toks, flow, st.open)))
      return {0, 0, "starts its thread in a loop or under a condition"};
    life.end = pthread_joined_after(toks, flow, creator, handle, anchor);
    if (life.end == 0)
      life.why = fmt::format("starts pthread `{}` and joins it nowhere braid can see on every path", handle);
  } else {
    life.end = block_end(anchor);
  }
  return life;
}
}  // namespace

std::string background_thread_refusal(const std::vector<Token>& toks, const BufferFlow& flow,
                                      const TokenIndex& token_at, const ThreadCode& tc, const Analysis& a, int& started,
                                      int& joined) {
  const std::string creator = a.calls[a.comm_inits.front().call].function;
  const FunctionDef* cf = nullptr;
  for (const FunctionDef& f : flow.functions())
    if (f.name == creator) cf = cf == nullptr ? &f : nullptr;
  if (cf == nullptr) return "shares a communicator made in a function braid cannot read as one definition";
  for (const Token& t : toks)
    if (t.text == "detach" || t.text == "async" || t.text == "pthread_detach")
      return fmt::format("starts or detaches a thread with {} (line {}), whose end braid cannot place", t.text, t.line);
  if (std::any_of(tc.bodies.begin(), tc.bodies.end(), [](const ThreadCode::Body& b) { return b.omp; }))
    return "runs an OpenMP region";
  const auto token_of = [&](const Call& c) -> std::optional<std::size_t> {
    auto it = token_at.find(c.call_begin);
    if (it == token_at.end()) return std::nullopt;
    return it->second;
  };
  // Every thread's life, in the creating function: from the first start to the last end.
  std::size_t first = SIZE_MAX, last = 0;
  for (const BufferFlow::ThreadStart& st : flow.thread_starts()) {
    const ThreadLife life = thread_life(toks, flow, *cf, st);
    if (!life.why.empty()) return life.why;
    first = std::min(first, life.start);
    last = std::max(last, life.end);
  }
  if (first == SIZE_MAX) return "starts its thread nowhere braid can place";
  started = toks[first].line;
  joined = last < toks.size() ? toks[last].line : 0;
  for (const Call& c : a.calls) {
    auto tok = token_of(c);
    if (!tok) continue;
    const bool in_thread = !tc.runs(*tok, flow).empty();
    if (c.kind == CallKind::Nccl && in_thread) {
      if (nccl_signature(c.name) == nullptr || c.name == "ncclSend" || c.name == "ncclRecv" || c.group >= 0)
        return fmt::format("calls {} (line {}) in the thread: only collectives outside groups may be", c.name, c.line);
      continue;
    }
    const bool makes = allocates(c) || creates_by_rank(c.name) || c.name == "ncclCommSplit";
    const bool ends =
        releases(c) || c.name == "ncclCommDestroy" || c.name == "ncclCommFinalize" || c.name == "ncclCommAbort";
    if (!makes && !ends) continue;
    if (in_thread) return fmt::format("calls {} (line {}) in the thread", c.name, c.line);
    auto places = places_in(flow, *tok, creator);
    if (!places)
      return fmt::format("calls {} (line {}) where braid cannot place it against the thread", c.name, c.line);
    for (std::size_t p : *places)
      if (makes ? p >= first : p <= last)
        return fmt::format("calls {} (line {}) {} the thread {}", c.name, c.line, makes ? "after" : "before",
                           makes ? "starts" : "has ended");
  }
  return "";
}

}  // namespace

void mark_allocations_after_creations(const std::vector<Token>& toks, const BufferFlow& flow,
                                      const TokenIndex& token_at, Analysis& a) {
  const auto token_of = [&](std::size_t call) -> std::optional<std::size_t> {
    auto it = token_at.find(a.calls[call].call_begin);
    if (it == token_at.end()) return std::nullopt;
    return it->second;
  };
  const auto looped = [&](std::size_t at) { return in_helper_loop(toks, flow, at); };
  for (auto& [key, b] : a.buffers) {
    if (b.rank_dependent_size.empty() || b.alloc_call >= a.calls.size()) continue;
    const auto alloc = token_of(b.alloc_call);
    if (!alloc) continue;
    // Made at every trip of a loop (per-step buffers sized by routed token counts), the agreement
    // and the window registration would be collective steps of every trip: not converted.
    b.allocated_in_loop = looped(*alloc);
    if (b.allocated_in_loop) continue;
    for (std::size_t k = 0; k < a.comm_inits.size(); ++k) {
      const CommInit& ci = a.comm_inits[k];
      auto at = token_of(ci.call);
      if (ci.conditional || ci.nonblocking || !at) continue;
      // The creation, then the unconditional call that runs its function (once), and so on up: the
      // allocation must come after one of them in that function, on every path that reaches it.
      for (int up = 0; up < 4 && at && !looped(*at) && !flow.conditional(*at); ++up) {
        const std::string fn = flow.function_at(*at);
        const auto places = places_in(flow, *alloc, fn);
        if (places && std::any_of(places->begin(), places->end(), looped)) b.allocated_in_loop = true;
        if (places && !places->empty() && !b.allocated_in_loop &&
            std::all_of(places->begin(), places->end(), [&](std::size_t p) { return p > *at; })) {
          b.after_creations.push_back(k);
          break;
        }
        // Called at several places of one function (one `split()` helper making the tensor- and the
        // data-parallel communicator), each unconditional: after the last is after every creation.
        const std::vector<std::size_t> sites = flow.call_sites_of(fn);
        const bool one_caller = !sites.empty() && std::all_of(sites.begin(), sites.end(), [&](std::size_t s) {
          return flow.function_at(s) == flow.function_at(sites.front()) && !looped(s) && !flow.conditional(s);
        });
        at = one_caller ? std::optional<std::size_t>(*std::max_element(sites.begin(), sites.end())) : std::nullopt;
      }
    }
  }
}

void detect_threaded_ranks(const std::vector<Token>& toks, const std::vector<Token>& all, const BufferFlow& flow,
                           const TokenIndex& token_at, Analysis& a) {
  if ((a.single_process_multi_gpu && !a.one_thread_drives_ranks) || a.comm_inits.empty()) return;
  const ThreadCode tc = find_thread_code(toks, all, flow);
  if (tc.empty()) return;
  auto runs_in = [&](const Call& c) {
    auto tok = token_at.find(c.call_begin);
    return tok == token_at.end() ? std::string() : tc.runs(tok->second, flow);
  };
  const auto left = [&](std::string why) {
    a.single_process_multi_gpu = true;
    a.one_thread_drives_ranks = a.rank_per_thread = false;
    a.single_process_why = std::move(why);
  };
  if (tc.unparsed_omp)
    return left(
        fmt::format("runs `#pragma omp parallel` (line {}) with no statement braid can find after it (which thread "
                    "makes which NCCL call is unknown)",
                    tc.omp_line));
  const CommInit* threaded = nullptr;
  for (const CommInit& ci : a.comm_inits)
    if (threaded == nullptr && !runs_in(a.calls[ci.call]).empty()) threaded = &ci;
  const Call* outside = nullptr;  // the first call a rank's thread must make that runs outside the threads
  const Call* inside = nullptr;   // the first such call inside them
  for (const Call& c : a.calls) {
    if (c.kind != CallKind::Nccl || !rank_thread_call(c)) continue;
    const Call*& first = runs_in(c).empty() ? outside : inside;
    if (first == nullptr) first = &c;
  }
  if (threaded == nullptr) {
    // Communicators made outside the threads: a problem when the threads call NCCL on them.
    // nccl-tests' `-t` (one thread makes every GPU's communicator, a thread per GPU drives each), or
    // a background thread calling on the process's communicator, unless its whole life lies between
    // the windows' making and release (background_thread_refusal): the conversion registers windows
    // on it from the allocating thread, which NCCL does not allow beside another thread's calls.
    if (inside == nullptr) return;
    const bool several = a.one_thread_drives_ranks;
    int started = 0, joined = 0;
    const std::string refusal = several ? "" : background_thread_refusal(toks, flow, token_at, tc, a, started, joined);
    if (!several && refusal.empty()) {
      const auto says = [&](const std::string& runs) {
        if (flow.thread_starts().size() == 1)
          return fmt::format(
              "a background thread runs {} (started at line {}, ended by line {}): every window is made before it "
              "starts and released after it ends",
              runs, started, joined);
        return fmt::format(
            "a background thread runs {} ({} threads, started from line {}, all ended by line {}): every window is "
            "made before they start and released after they end",
            runs, flow.thread_starts().size(), started, joined);
      };
      a.background_thread = says(runs_in(*inside));
      for (Call& c : a.calls)
        if (c.kind == CallKind::Nccl && !runs_in(c).empty()) c.via.push_back(says(runs_in(c)));
      return;
    }
    return left(fmt::format(
        "creates its communicator{} in one thread (line {}) and calls {} (line {}) in {}, which {} thread runs: the "
        "communicator{} shared between threads{}",
        several ? "s" : "", a.calls[a.comm_inits.front().call].line, inside->name, inside->line, runs_in(*inside),
        several ? "a" : "another", several ? "s are" : " is",
        several ? " (several ranks in one process)"
                : " (one rank, a background thread that " + refusal +
                      ": the windows a conversion registers from the allocating thread are collective calls on that "
                      "communicator, and would be made beside the thread's calls)"));
  }
  const std::string where = runs_in(a.calls[threaded->call]);
  if (outside != nullptr)
    return left(
        fmt::format("creates a communicator (line {}) in {}, which threads run, and calls {} (line {}) "
                    "outside the threads (several ranks in one process)",
                    a.calls[threaded->call].line, where, outside->name, outside->line));
  a.single_process_multi_gpu = a.rank_per_thread = true;
  a.one_thread_drives_ranks = false;
  a.single_process_why = fmt::format("creates a communicator (line {}) in {}, which threads run: a rank per thread",
                                     a.calls[threaded->call].line, where);
}

}  // namespace braid::convert
