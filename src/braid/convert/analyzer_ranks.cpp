// The analyzer's rank pass (analyzer_passes.hpp): which values of the file depend on the rank (or
// differ between ranks: what a rank copies back from its own device or receives alone), and
// the allocations whose size is one of them. A symmetric window is registered collectively, with
// the same size on every rank (NCCL's default), so a buffer sized by role or rank (a decode
// worker's larger KV pool, a receive buffer sized by this rank's expected tokens) stays as written.
// A field path is followed by its text across the file (the object is passed around), a plain
// name within its function (a parameter through every call's argument): a path or name that is
// rank-dependent anywhere counts everywhere, which may keep a buffer host without need. An
// allocation under conditions every rank evaluates alike (a lazy `if (buf == NULL)`) is made by
// every rank: it is not conditional for the rules (uniform_guards).
#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "braid/convert/analyzer_passes.hpp"
#include "braid/convert/buffer_flow_tokens.hpp"

namespace braid::convert {
namespace {

using flow_tokens::join;
using flow_tokens::match_forward;
using flow_tokens::split_top;
using flow_tokens::statement_end;

using flow_tokens::is_member_step;

// Rank-dependent names: a field path (`w.pool.num_blocks`, `p->n` read as `p.n`) by its text in
// every function (the object is passed around), a plain name in its own function (or, written at
// file scope, in every one).
struct Tainted {
  std::set<std::string> keys;
  static std::string key(const std::string& function, const std::string& path) {
    return path.find('.') != std::string::npos ? path : function + "|" + path;
  }
  bool has(const std::string& function, const std::string& path) const {
    return keys.count(key(function, path)) || (path.find('.') == std::string::npos && keys.count("|" + path));
  }
  bool add(const std::string& function, const std::string& path) {
    return !path.empty() && keys.insert(key(function, path)).second;
  }
};

// The first rank-dependent name among tokens [b, e) of `function` (a path or one of its prefixes),
// or an environment variable naming the rank; "" when none is.
std::string tainted_in(const std::vector<Token>& t, std::size_t b, std::size_t e, const std::string& function,
                       const Tainted& tainted) {
  for (std::size_t i = b; i < e && i < t.size(); ++i) {
    if (t[i].kind == TokenKind::String &&
        (t[i].text.find("RANK") != std::string::npos || t[i].text.find("PROCID") != std::string::npos))
      return t[i].text;
    if (t[i].kind != TokenKind::Identifier || (i > b && (is_member_step(t[i - 1]) || t[i - 1].text == "::"))) continue;
    std::string path = t[i].text;
    if (tainted.has(function, path)) return path;
    for (std::size_t j = i; j + 2 < e && is_member_step(t[j + 1]) && t[j + 2].kind == TokenKind::Identifier; j += 2)
      if (tainted.has(function, path += "." + t[j + 2].text)) return path;
  }
  return "";
}

// Where the value assigned from t[from] ends: `;` or `,` at its depth, or a bracket it did not open
// (`for (int h = x; h < n; h += step)`).
std::size_t value_end(const std::vector<Token>& t, std::size_t from) {
  int depth = 0;
  for (std::size_t i = from; i < t.size(); ++i) {
    const std::string& w = t[i].text;
    if (w == "(" || w == "[" || w == "{") ++depth;
    else if (w == ")" || w == "]" || w == "}") {
      if (--depth < 0) return i;
    } else if ((w == ";" || w == ",") && depth == 0) return i;
  }
  return t.size();
}

// The path assigned by the `=` (or `+=`, ...) at t[q]: `w.role`, `counts` for `counts[i]`; "".
std::string assigned_path(const std::vector<Token>& t, std::size_t q) {
  std::size_t k = q;
  if (k > 0 && t[k - 1].text == "]") {
    for (int depth = 0; k > 0;) {
      --k;
      if (t[k].text == "]") ++depth;
      if (t[k].text == "[" && --depth == 0) break;
    }
  }
  std::string path;
  for (std::size_t i = k; i > 0 && t[i - 1].kind == TokenKind::Identifier; i -= 2) {
    path = t[i - 1].text + (path.empty() ? "" : "." + path);
    if (i < 2 || !is_member_step(t[i - 2])) break;
  }
  return path;
}

// The token ranges run under a condition naming a rank-dependent value (`if (role == Prefill)
// n = 256; else n = 4096;`, a loop bounded by the rank): what they assign depends on the rank.
std::vector<std::pair<std::size_t, std::size_t>> tainted_ranges(const std::vector<Token>& t, const BufferFlow& flow,
                                                                const Tainted& tainted) {
  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  for (std::size_t i = 0; i + 1 < t.size(); ++i) {
    const std::string& w = t[i].text;
    if ((w != "if" && w != "while" && w != "for" && w != "switch") || t[i + 1].text != "(") continue;
    const std::size_t close = match_forward(t, i + 1, t.size());
    if (close + 2 >= t.size() || tainted_in(t, i + 2, close, flow.function_at(i), tainted).empty()) continue;
    const auto body_end = [&](std::size_t at) {
      return t[at].text == "{" ? match_forward(t, at, t.size()) : statement_end(t, at, t.size());
    };
    std::size_t end = body_end(close + 1);
    if (end + 2 < t.size() && t[end + 1].text == "else") end = body_end(end + 2);
    ranges.push_back({close, end});
  }
  return ranges;
}

// Taints `lhs` (of `lhs_function`; "" for a member, read in every function of its class) with
// value tokens [b, e) of `function`: all of it when the value names a rank-dependent value, the
// rank-dependent fields of a whole struct given (`Model m(cfg)` after `cfg.layers = 2 + rank`: the
// parameter's `.layers`, then `cfg_(cfg)`'s `cfg_.layers`). Whether it grew.
bool give(const std::vector<Token>& v, std::size_t b, std::size_t e, const std::string& function,
          const std::string& lhs_function, const std::string& lhs, Tainted& tainted) {
  if (lhs.empty() || b >= e) return false;
  if (!tainted_in(v, b, e, function, tainted).empty()) return tainted.add(lhs_function, lhs);
  const std::string whole = access_path(join(v, b, e), false);
  if (whole.empty() || whole.find('[') != std::string::npos) return false;
  std::vector<std::string> fields;  // field paths are keys by their text alone (Tainted::key)
  for (auto k = tainted.keys.lower_bound(whole + "."); k != tainted.keys.end() && k->rfind(whole + ".", 0) == 0; ++k)
    fields.push_back(k->substr(whole.size()));
  bool grew = false;
  for (const std::string& f : fields) grew = tainted.add(lhs_function, lhs + f) || grew;
  return grew;
}

bool grow_once(const std::vector<Token>& t, const BufferFlow& flow, Tainted& tainted) {
  bool grew = false;
  const auto ranges = tainted_ranges(t, flow, tainted);
  const auto under = [&](std::size_t q) {
    return std::any_of(ranges.begin(), ranges.end(), [&](const auto& r) { return q > r.first && q < r.second; });
  };
  static const std::set<std::string> kAssign = {"=", "+=", "-=", "*=", "/=", "<<=", ">>=", "%="};
  for (std::size_t q = 1; q + 1 < t.size(); ++q) {
    if (t[q].kind != TokenKind::Punct || !kAssign.count(t[q].text)) continue;
    const std::string lhs = assigned_path(t, q), function = flow.function_at(q);
    if (lhs.empty() || tainted.has(function, lhs)) continue;
    // A variable declared under such a condition lives in that branch only (a loop counter of the
    // same name elsewhere is another variable): it depends on the rank through its value alone.
    const bool declared = q >= 2 && t[q - 1].text == lhs &&
                          (t[q - 2].kind == TokenKind::Identifier || t[q - 2].text == "*" || t[q - 2].text == "&" ||
                           t[q - 2].text == ">" || t[q - 2].text == ",");
    if (under(q) && !declared) grew = tainted.add(function, lhs) || grew;
    else grew = give(t, q + 1, value_end(t, q + 1), function, function, lhs, tainted) || grew;
  }
  // A member given a rank-dependent value by its class's code (`cfg_(cfg)`, `n_ = n;`): read by
  // every member function, so tainted by its name in all.
  for (const auto& [key, writes] : flow.member_writes())
    for (const MemberWrite& w : writes) {
      const std::vector<Token> v = code_tokens(lex(w.expr).tokens);
      grew = give(v, 0, v.size(), w.function, "", key.substr(key.find("::") + 2), tainted) || grew;
    }
  // An object made from a rank-dependent value (`std::mt19937 rng(1000 + rank);`, `Shape s{rows};`):
  // what it gives (`rng() % n`) depends on the rank. Taking a call for such a declaration only adds
  // dependence (the safe side).
  for (std::size_t q = 2; q + 2 < t.size(); ++q) {
    if (t[q].kind != TokenKind::Identifier || (t[q + 1].text != "(" && t[q + 1].text != "{")) continue;
    if ((t[q - 1].text != ">" && !flow_tokens::declaring_word(t[q - 1])) || t[q - 1].text == "new" ||
        t[q - 1].text == "operator")
      continue;
    const std::string function = flow.function_at(q);
    if (function.empty() || tainted.has(function, t[q].text)) continue;
    const std::size_t close = match_forward(t, q + 1, t.size());
    if (!tainted_in(t, q + 2, close, function, tainted).empty()) grew = tainted.add(function, t[q].text) || grew;
  }
  // A parameter given a rank-dependent argument at any call (`Arena arena(rank_bytes)`, `alloc(p, n)`).
  // The arguments as each site gives them: a template class's construction (`Buffer<float> x(n)`)
  // and a thread's start (`std::thread(worker, r, n)`) are call sites too.
  for (const FunctionDef& f : flow.functions())
    for (const auto& [site, args] : flow.call_arguments_of(f.name)) {
      for (std::size_t i = 0; i < args.size() && i < f.params.size(); ++i) {
        const std::vector<Token> arg = code_tokens(lex(args[i]).tokens);
        grew = give(arg, 0, arg.size(), flow.function_at(site), f.name, f.params[i], tainted) || grew;
      }
    }
  return grew;
}

// A name that may hold a different value on each rank though braid saw no rank flow into it: one
// that says so (`rank`, `local_rank`, `is_root`, `leader`, `peer`, `device`, ...), or the command
// line (a launcher may give each rank its own).
bool names_a_per_rank_value(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return (char)std::tolower(c); });
  for (const char* word : {"rank", "root", "leader", "master", "role", "peer", "node", "local", "device", "gpu", "host",
                           "pid", "tid", "thread", "env"})
    if (n.find(word) != std::string::npos) return true;
  return n == "argc" || n == "argv" || n == "me" || n == "id";
}

// Whether function `name`, called with arguments every rank has alike, returns alike on every
// rank: one of this file whose body names nothing per-rank or rank-dependent and calls only such
// functions (`static int use_big_workspace() { return 1; }`), or one braid cannot see that takes
// arguments and is not named for per-rank state (llm.c's `ends_with_bin(load_filename)` in
// llmc/utils.h). Functions of no arguments braid cannot see (`rand()`, `time(NULL)` aside) may
// read anything: not alike.
bool alike_function(const std::vector<Token>& t, const BufferFlow& flow, const std::string& name, bool has_args,
                    const Tainted& tainted, int depth) {
  static const std::set<std::string> kKeywords = {"if",        "for",     "while",    "switch",      "return",
                                                  "sizeof",    "alignof", "decltype", "static_cast", "reinterpret_cast",
                                                  "const_cast"};
  static const std::set<std::string> kVarying = {"rand",         "random", "drand48",     "lrand48",
                                                 "rand_r",       "time",   "clock",       "clock_gettime",
                                                 "gettimeofday", "getpid", "gethostname", "MPI_Wtime"};
  if (kVarying.count(name) || names_a_per_rank_value(name) || name.rfind("MPI_", 0) == 0 ||
      name.rfind("nccl", 0) == 0 || name.rfind("cuda", 0) == 0)
    return false;
  const FunctionDef* def = nullptr;
  for (const FunctionDef& f : flow.functions())
    if (f.name == name && f.owner.empty() && f.enclosing.empty()) def = def == nullptr ? &f : nullptr;
  if (def == nullptr) {
    for (const FunctionDef& f : flow.functions())
      if (f.name == name) return false;  // overloads or members: not followed
    return has_args;
  }
  if (depth <= 0 || !tainted_in(t, def->body_open + 1, def->body_close, def->name, tainted).empty()) return false;
  for (std::size_t k = def->body_open + 1; k + 1 < def->body_close; ++k) {
    if (t[k].kind != TokenKind::Identifier) continue;
    if (names_a_per_rank_value(t[k].text)) return false;
    if (t[k + 1].text == "(" && !kKeywords.count(t[k].text) && t[k].text != name &&
        !alike_function(t, flow, t[k].text, t[k + 2].text != ")", tainted, depth - 1))
      return false;
  }
  return true;
}

// Whether every condition code token `at` runs under is one every rank evaluates alike: an `if`
// (or else, else-if) whose conditions name nothing rank-dependent and call only functions that
// return alike for alike arguments (a null check of a buffer made lazily, a step counter, a file
// name's suffix). A switch or `?:` is not followed.
bool uniform_guards(const std::vector<Token>& t, const BufferFlow& flow, std::size_t at, const Tainted& tainted) {
  for (std::size_t open : flow.guards(at)) {
    if (open == BufferFlow::kUnknownGuard || open >= t.size()) return false;
    const std::size_t close = match_forward(t, open, t.size());
    // A container's own query (`mine.empty()`) is not alike: what a rank put in it is not followed.
    for (std::size_t k = open + 1; k + 1 < close; ++k) {
      if (t[k].kind == TokenKind::Identifier && t[k + 1].text == "(" && t[k].text != "sizeof" &&
          !alike_function(t, flow, t[k].text, k + 2 < close && t[k + 2].text != ")", tainted, 3))
        return false;
      if (t[k].kind == TokenKind::Identifier && names_a_per_rank_value(t[k].text)) return false;
    }
    if (!tainted_in(t, open + 1, close, flow.function_at(open), tainted).empty()) return false;
  }
  return true;
}

// The line of a `for`/`while` around code token `at` in its function whose header reads a value that
// depends on the rank (`for (b = 0; b < nblk; ++b)` with `nblk = 1 + rank % 3`): what runs in it runs
// a different number of times on each rank. 0 when there is none.
int rank_dependent_trip(const std::vector<Token>& t, const BufferFlow& flow, std::size_t at, const Tainted& tainted) {
  const std::string function = flow.function_at(at);
  for (std::size_t h = 0; h + 1 < at; ++h) {
    if ((t[h].text != "for" && t[h].text != "while") || t[h + 1].text != "(" || flow.function_at(h) != function)
      continue;
    const std::size_t close = match_forward(t, h + 1, t.size());
    if (close + 1 >= t.size() || close >= at) continue;
    const std::size_t end =
        t[close + 1].text == "{" ? match_forward(t, close + 1, t.size()) : statement_end(t, close + 1, t.size());
    if (at >= end) continue;
    // A `for`'s own counter is no trip count: with one thread driving every rank it is the rank
    // itself (`for (i = 0; i < n; ++i) ncclCommInitRank(&c[i], n, id, i)`). Its condition and
    // increment are read without it.
    std::vector<Token> header(t.begin() + (std::ptrdiff_t)h + 2, t.begin() + (std::ptrdiff_t)close);
    if (t[h].text == "for") {
      const std::size_t init_end = statement_end(header, 0, header.size());
      std::string counter;
      for (std::size_t k = 0; k + 1 < init_end; ++k)
        if (header[k].kind == TokenKind::Identifier && header[k + 1].text == "=") counter = header[k].text;
      header.erase(header.begin(), header.begin() + (std::ptrdiff_t)std::min(init_end + 1, header.size()));
      for (Token& x : header)
        if (x.text == counter) x.text = "0", x.kind = TokenKind::Number;
    }
    if (!tainted_in(header, 0, header.size(), function, tainted).empty()) return t[h].line;
  }
  return 0;
}

}  // namespace

void mark_rank_dependent_sizes(const std::vector<Token>& toks, const BufferFlow& flow, const TokenIndex& token_at,
                               Analysis& a) {
  // The seeds: the rank itself (also the variable a communicator is created with as its rank: a thread
  // per rank has no other), and what each rank reads from its own device (per-peer token counts
  // copied back after a router kernel or an all-to-all) or receives alone over MPI.
  // A name with several entries writes several outputs (a Cartesian shift's source and destination).
  static const std::multimap<std::string, std::size_t> kSeeds = {
      {"MPI_Comm_rank", 1},    {"MPI_Cart_coords", 3},        {"MPI_Cart_shift", 3},
      {"MPI_Cart_shift", 4},   {"MPI_Cart_rank", 2},          {"ncclCommUserRank", 1},
      {"ncclCommInitRank", 3}, {"ncclCommInitRankConfig", 3}, {"ncclCommInitRankScalable", 2},
      {"cudaMemcpy", 0},       {"cudaMemcpyAsync", 0},        {"MPI_Recv", 0},
      {"MPI_Alltoall", 3},     {"MPI_Alltoallv", 4},          {"MPI_Scatter", 3},
      {"MPI_Scatterv", 4}};
  // The size of a communicator split from another differs between its groups when the split is
  // uneven (`color = rank == 0 ? 0 : 1`): ncclCommCount of one is a seed too.
  std::set<std::string> split;
  for (std::size_t i = 0; i + 1 < toks.size(); ++i)
    if (toks[i].text == "ncclCommSplit" && toks[i + 1].text == "(")
      if (const auto args = split_top(toks, i + 1, match_forward(toks, i + 1, toks.size())); args.size() >= 4)
        split.insert(access_path(args[3], true));
  Tainted tainted;
  for (std::size_t i = 0; i + 1 < toks.size(); ++i) {
    if (toks[i].text == "ncclCommCount" && toks[i + 1].text == "(")
      if (const auto args = split_top(toks, i + 1, match_forward(toks, i + 1, toks.size()));
          args.size() == 2 && split.count(access_path(args[0], false)))
        if (const std::string count = access_path(args[1], true); !count.empty())
          tainted.add(flow.function_at(i), count);
    const auto [seeds_begin, seeds_end] = kSeeds.equal_range(toks[i].text);
    for (auto seed = seeds_begin; seed != seeds_end; ++seed) {
      if (toks[i + 1].text != "(") continue;
      const std::vector<std::string> args = split_top(toks, i + 1, match_forward(toks, i + 1, toks.size()));
      if (args.size() <= seed->second) continue;
      const bool copy = toks[i].text.rfind("cudaMemcpy", 0) == 0;
      if (copy && (args.size() < 4 || (args[3].find("DeviceToHost") == std::string::npos &&
                                       args[3].find("cudaMemcpyDefault") == std::string::npos)))
        continue;
      std::string dst = args[seed->second];  // split_top's text, its tokens joined with blanks: `w -> rank`
      dst.erase(std::remove(dst.begin(), dst.end(), ' '), dst.end());
      // The creations name the rank by value (`r`, `w->rank`; an expression such as `rank * ngpus` is
      // built from values tainted already, and its first name may be a whole struct), the others by
      // the address they write (`&rank`).
      const bool by_value = toks[i].text.rfind("ncclCommInitRank", 0) == 0;
      const std::string path = access_path(dst, !by_value);
      if (by_value && path.empty()) continue;
      tainted.add(flow.function_at(i), path.empty() ? base_variable(dst) : path);
    }
  }
  for (int round = 0; round < 16 && grow_once(toks, flow, tainted); ++round) {
  }
  // An allocation under conditions every rank evaluates alike is made by every rank, in the same
  // order (llm.c's `if (model->grads_memory == NULL)`): its window registration is collective.
  const auto rank_conditional = [&](std::size_t tok) {
    return !uniform_guards(toks, flow, tok, tainted);  // no guards: unconditional
  };
  // Each allocation again, with its guards: also those of returns before it, which leave it
  // unconditional unless some rank may take them (`if (color == NCCL_SPLIT_NOCOLOR) return 0;`).
  for (auto& [key, b] : a.buffers) {
    if (b.alloc_call >= a.calls.size()) continue;
    const auto tok = token_at.find(a.calls[b.alloc_call].call_begin);
    if (tok == token_at.end()) continue;
    const auto [caller, line] = flow.conditional_caller(flow.function_at(tok->second), rank_conditional);
    b.conditional_caller = caller;
    b.conditional_call_line = line;
    b.conditional = rank_conditional(tok->second) || line > 0;
  }
  for (auto& [key, b] : a.buffers) {
    if (b.conditional || b.alloc_call >= a.calls.size()) continue;
    const auto tok = token_at.find(a.calls[b.alloc_call].call_begin);
    if (tok == token_at.end()) continue;
    b.rank_dependent_trip_line = rank_dependent_trip(toks, flow, tok->second, tainted);
    if (b.rank_dependent_trip_line == 0)  // or a call of its function, or a construction of its class, in one
      b.rank_dependent_trip_line =
          flow.conditional_caller(flow.function_at(tok->second),
                                  [&](std::size_t site) { return rank_dependent_trip(toks, flow, site, tainted) > 0; })
              .second;
    b.conditional = b.rank_dependent_trip_line > 0;
  }
  for (auto& [key, b] : a.buffers) {
    if (b.bytes || b.bytes_expr.empty() || b.alloc_call >= a.calls.size()) continue;
    const auto tok = token_at.find(a.calls[b.alloc_call].call_begin);
    if (tok == token_at.end()) continue;
    const std::vector<Token> size = code_tokens(lex(b.bytes_expr).tokens);
    b.rank_dependent_size = tainted_in(size, 0, size.size(), flow.function_at(tok->second), tainted);
  }
}

}  // namespace braid::convert
