// The analyzer's passes on communicators (analyzer_passes.hpp): their creations and modes
// (blocking or not, inherited through splits), the communicator a member function names, and
// programs that run several ranks in one process.
#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <set>

#include "braid/convert/analyzer_passes.hpp"

namespace braid::convert {

// A config argument that gives none (the defaults, or the parent's for a split).
static bool no_config(const std::string& arg) { return arg == "nullptr" || arg == "NULL" || arg == "0"; }

// A creation of one rank's communicator from unique ids (the kinds a process may repeat per GPU).
static bool creates_by_rank(const std::string& name) {
  return name == "ncclCommInitRank" || name == "ncclCommInitRankConfig" || name == "ncclCommInitRankScalable";
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
    if (c.name != "ncclCommSplit" && (c.loop >= 0 || several_here) && !a.single_process_multi_gpu) {
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

void detect_threaded_ranks(const std::vector<Token>& toks, const std::vector<Token>& all, const BufferFlow& flow,
                           const TokenIndex& token_at, Analysis& a) {
  // Creations in a loop may still run in threads (nccl-tests' `-t`): a rank per thread wins.
  if ((a.single_process_multi_gpu && !a.one_thread_drives_ranks) || a.comm_inits.empty()) return;
  for (const Token& t : all)
    if (t.kind == TokenKind::Preprocessor && t.text.find("pragma") != std::string::npos &&
        t.text.find("omp") != std::string::npos && t.text.find("parallel") != std::string::npos) {
      a.single_process_multi_gpu = true;
      a.one_thread_drives_ranks = false;
      a.single_process_why =
          fmt::format("creates a communicator and runs `#pragma omp parallel` (line {}): a rank per thread", t.line);
      return;
    }
  // Thread entries: the first argument of a thread's construction, a function name or a lambda.
  std::set<std::string> entries;
  std::vector<std::pair<std::size_t, std::size_t>> lambda_bodies;
  const bool has_threads = std::any_of(toks.begin(), toks.end(), [](const Token& t) {
    return t.text == "thread" || t.text == "jthread" || t.text == "pthread_create" || t.text == "async";
  });
  if (!has_threads) return;
  for (std::size_t k = 0; k + 2 < toks.size(); ++k) {
    const std::string& x = toks[k].text;
    std::size_t open = 0;
    int skip_args = 0;
    if (x == "thread" || x == "jthread") {  // std::thread t(f, ...), std::thread(f, ...), std::thread{f, ...}
      open = toks[k + 1].text == "(" || toks[k + 1].text == "{" ? k + 1
             : (toks[k + 1].kind == TokenKind::Identifier && (toks[k + 2].text == "(" || toks[k + 2].text == "{"))
                 ? k + 2
                 : 0;
    } else if ((x == "emplace_back" || x == "push_back") && toks[k + 1].text == "(") {
      open = k + 1;
    } else if (x == "pthread_create" && toks[k + 1].text == "(") {
      open = k + 1;
      skip_args = 2;
    } else if (x == "async" && toks[k + 1].text == "(") {
      open = k + 1;
      skip_args = toks[k + 2].text == "std" ? 1 : 0;  // std::async(std::launch::async, f, ...)
    }
    if (open == 0) continue;
    const std::size_t close = matching(toks, open);
    std::size_t at = open + 1;
    for (int n = 0; n < skip_args && at < close; ++at) {
      if (toks[at].text == ",") ++n;
      else if (toks[at].text == "(" || toks[at].text == "[" || toks[at].text == "{") at = matching(toks, at);
    }
    while (at < close &&
           (toks[at].text == "&" || toks[at].text == "(" || toks[at].text == "void" || toks[at].text == "*" ||
            toks[at].text == ")" || toks[at].text == "::" || toks[at].text == "std"))
      ++at;
    if (at >= close) continue;
    if (toks[at].text == "[") {  // a lambda: its body
      std::size_t b = matching(toks, at) + 1;
      while (b < close && toks[b].text != "{") ++b;
      if (b < close) lambda_bodies.emplace_back(b, matching(toks, b));
    } else if (toks[at].kind == TokenKind::Identifier && toks[at + 1].text != "(") {
      entries.insert(toks[at].text);
    }
  }
  for (const CommInit& ci : a.comm_inits) {
    auto tok = token_at.find(a.calls[ci.call].call_begin);
    if (tok == token_at.end()) continue;
    const bool in_lambda = std::any_of(lambda_bodies.begin(), lambda_bodies.end(),
                                       [&](const auto& r) { return tok->second > r.first && tok->second < r.second; });
    const std::string runs_in = flow.callers_reach(flow.function_at(tok->second), entries);
    if (!in_lambda && runs_in.empty()) continue;
    a.single_process_multi_gpu = true;
    a.one_thread_drives_ranks = false;
    a.single_process_why = fmt::format("creates a communicator (line {}) in {} that a thread runs: a rank per thread",
                                       a.calls[ci.call].line, in_lambda ? std::string("a lambda") : runs_in + "()");
    return;
  }
}

}  // namespace braid::convert
