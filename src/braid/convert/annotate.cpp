#include "braid/convert/annotate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "braid/convert/gate.hpp"
#include "braid/convert/lexer.hpp"
#include "braid/convert/rewrite_loop.hpp"
#include "braid/llm/client.hpp"
#include "braid/platform/toolchain.hpp"
#include "braid/program/program.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/text.hpp"

namespace braid::convert {
namespace {

constexpr const char* kPreludeEnd = "==== end of braid convert's replacements ====";
constexpr const char* kKnobsBlock = "knobs";

// Replacements whose launch shape the knobs set (send/recv are tuned through their group_end).
const std::set<std::string> kTunable = {"all_gather", "all_reduce", "reduce_scatter", "broadcast",
                                        "bcast",      "all_to_all", "group_end"};
const std::set<std::string> kCommOnly = {"group_start", "send", "recv"};

const char* const kIssuerDomain = "braid::dev::Issuer::Thread|braid::dev::Issuer::Warp|braid::dev::Issuer::Cta";
const char* const kCtasDomain = "0|8|16|32|64|132";
const char* const kChunkDomain = "0|16384|65536|262144|1048576";
const char* const kBackendDomain = "braid::dev::Backend::Lsa|braid::dev::Backend::Gin";

// The site number becomes one Site type (no comma: the call may sit inside a one-argument
// error-check macro such as BRAID_NCCL(...)).
std::string site_type(int site) { return fmt::format("BraidSite{}", site); }

// ---- statements of one scope ----

enum class StmtKind { Stop, Comm, Compute, Neutral };

struct Stmt {
  std::size_t first = 0, last = 0;  // code token indices, inclusive
  StmtKind kind = StmtKind::Neutral;
};

std::size_t matching(const std::vector<Token>& code, std::size_t open) {
  const std::string o = code[open].text, c = o == "{" ? "}" : (o == "(" ? ")" : "]");
  int depth = 0;
  for (std::size_t k = open; k < code.size(); ++k) {
    if (code[k].text == o) ++depth;
    if (code[k].text == c && --depth == 0) return k;
  }
  return code.size() - 1;
}

bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

// Calls that must stay frozen: synchronisation, events, streams, allocation, communicator,
// harness hooks, host NCCL, output.
bool is_stop_call(const std::vector<Token>& code, std::size_t k) {
  const std::string& n = code[k].text;
  static const std::set<std::string> allowed_cuda = {"cudaMemcpyAsync", "cudaMemsetAsync", "cudaMemcpy2DAsync",
                                                     "cudaGetLastError", "cudaPeekAtLastError"};
  static const std::set<std::string> stop_names = {
      "adopt_harness", "release_harness", "sym_malloc",    "sym_free",     "sym_nccl_alloc",
      "sym_nccl_free", "comm_destroy",    "comm_finalize", "comm_abort",   "harness_main",
      "init_comm",     "bootstrap_rank",  "printf",        "fprintf",      "puts",
      "exit",          "abort",           "cublasCreate",  "cublasDestroy", "sym_malloc_agreed", "sym_nccl_alloc_agreed"};
  if (starts_with(n, "nccl")) return true;
  if (starts_with(n, "cuda") && !allowed_cuda.count(n)) return true;
  if (starts_with(n, "MPI_")) return true;
  return stop_names.count(n) > 0;
}

bool is_compute_call(const std::vector<Token>& code, std::size_t k) {
  const std::string& n = code[k].text;
  static const std::set<std::string> not_calls = {
      "if",         "for",          "while",         "switch",      "return",
      "sizeof",     "alignof",      "decltype",      "static_cast", "reinterpret_cast",
      "const_cast", "dynamic_cast", "static_assert", "new",         "delete"};
  if (not_calls.count(n)) return false;
  if (k > 0 && (code[k - 1].text == "." || code[k - 1].text == "->")) return false;  // member calls: accessors
  if (k > 1 && code[k - 1].text == "::" && code[k - 2].text == "std") return false;
  if (starts_with(n, "cublas")) return n != "cublasSetStream" && n != "cublasSetWorkspace" && n != "cublasSetMathMode";
  if (n == "cudaMemcpyAsync" || n == "cudaMemcpy2DAsync" || n == "cudaMemsetAsync")
    return true;  // stream-ordered data movement
  if (starts_with(n, "cuda") || starts_with(n, "nccl") || n == "braid_converted") return false;
  // Upper-case names are error-check macros (BRAID_CUDA, CHECK): their argument decides.
  if (std::all_of(n.begin(), n.end(), [](char c) {
        return std::isupper(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '_';
      }))
    return false;
  // A declaration with a constructor call (`Type name(args)`) is neutral: the name follows a type.
  if (k > 0 && code[k - 1].kind == TokenKind::Identifier) return false;
  return true;
}

StmtKind classify(const std::vector<Token>& code, const Stmt& s, bool compound) {
  if (compound) return StmtKind::Stop;
  bool comm = false, compute = false;
  for (std::size_t k = s.first; k <= s.last; ++k) {
    const Token& t = code[k];
    if (t.kind == TokenKind::Identifier && t.text == "return") return StmtKind::Stop;
    if (t.kind == TokenKind::LaunchOpen) compute = true;
    if (t.text == "braid_converted" && k + 2 <= s.last && code[k + 1].text == "::") {
      const std::string& f = code[k + 2].text;
      if (kTunable.count(f) || kCommOnly.count(f)) {
        comm = true;
        k += 2;
        continue;
      }
      return StmtKind::Stop;  // sym_malloc, adopt_harness, ...
    }
    if (t.kind != TokenKind::Identifier || k + 1 > s.last) continue;
    // name( or name<...>( (template calls, kernel launches)
    std::size_t after = k + 1;
    if (code[after].text == "<" && code[k].text != "braid_converted") {
      int depth = 0;
      for (std::size_t m = after; m <= s.last; ++m) {
        if (code[m].text == "<") ++depth;
        if (code[m].text == ">" && --depth == 0) {
          after = m + 1;
          break;
        }
        if (code[m].text == ";" || code[m].text == "{") break;
      }
    }
    if (after > s.last || code[after].text != "(") {
      if (after <= s.last && code[after].kind == TokenKind::LaunchOpen) compute = true;
      continue;
    }
    if (is_stop_call(code, k)) return StmtKind::Stop;
    if (is_compute_call(code, k)) compute = true;
  }
  if (comm) return StmtKind::Comm;
  return compute ? StmtKind::Compute : StmtKind::Neutral;
}

// Statements directly inside the braces code[open]..code[close].
std::vector<Stmt> scope_statements(const std::vector<Token>& code, std::size_t open, std::size_t close) {
  static const std::set<std::string> control = {"for", "while", "if", "do", "switch", "else", "try", "{"};
  std::vector<Stmt> out;
  std::size_t j = open + 1;
  while (j < close) {
    Stmt s;
    s.first = j;
    const bool is_control = control.count(code[j].text) > 0;
    const bool is_do = code[j].text == "do";
    bool compound = false;
    int paren = 0;
    std::size_t k = j;
    for (; k < close; ++k) {
      const std::string& t = code[k].text;
      if (t == "(" || t == "[") ++paren;
      if (t == ")" || t == "]") --paren;
      if (t == "{" && paren == 0) {
        compound = true;
        k = matching(code, k);
        if (!is_control) continue;
        if (k + 1 < close && (code[k + 1].text == "else" || code[k + 1].text == "catch")) continue;
        if (is_do && k + 1 < close && code[k + 1].text == "while") {
          while (k < close && code[k].text != ";") ++k;
        }
        break;
      }
      if (t == ";" && paren == 0) {
        if (is_control && k + 1 < close && code[k + 1].text == "else") continue;
        break;
      }
    }
    s.last = std::min(k, close - 1);
    s.kind = classify(code, s, compound || is_control);
    out.push_back(s);
    j = s.last + 1;
  }
  return out;
}

// The innermost '{' enclosing code token i, or SIZE_MAX at file scope.
std::size_t enclosing_open(const std::vector<Token>& code, std::size_t i) {
  int depth = 0;
  for (std::size_t k = i; k-- > 0;) {
    if (code[k].text == "}") ++depth;
    if (code[k].text == "{") {
      if (depth == 0) return k;
      --depth;
    }
  }
  return SIZE_MAX;
}

struct Site {
  int site = 0;
  std::string function;
  std::size_t token = 0;                         // index of `braid_converted`
  std::size_t number_begin = 0, number_end = 0;  // the site number's bytes (replaced by its Site type)
  int line = 0;
};

std::vector<Site> find_sites(const std::vector<Token>& code) {
  // A group_end launches the group's sends and receives; a group of collectives only has nothing
  // for its knobs to shape, so it gets none.
  std::set<std::string> p2p_sites;
  for (std::size_t i = 0; i + 4 < code.size(); ++i)
    if (code[i].text == "braid_converted" && code[i + 1].text == "::" &&
        (code[i + 2].text == "send" || code[i + 2].text == "recv") && code[i + 3].text == "<")
      p2p_sites.insert(code[i + 4].text);
  std::vector<Site> out;
  for (std::size_t i = 0; i + 6 < code.size(); ++i) {
    if (code[i].text != "braid_converted" || code[i + 1].text != "::" || code[i + 3].text != "<" ||
        code[i + 4].kind != TokenKind::Number || code[i + 5].text != ">" || code[i + 6].text != "(")
      continue;
    if (!kTunable.count(code[i + 2].text)) continue;
    if (code[i + 2].text == "group_end" && !p2p_sites.count(code[i + 4].text)) continue;
    Site s;
    s.site = std::stoi(code[i + 4].text);
    s.function = code[i + 2].text;
    s.token = i;
    s.number_begin = code[i + 4].offset;
    s.number_end = code[i + 4].end;
    s.line = code[i].line;
    out.push_back(s);
  }
  return out;
}

// Line helpers over the raw text.
std::size_t line_begin(const std::string& s, std::size_t pos) {
  const std::size_t nl = pos == 0 ? std::string::npos : s.rfind('\n', pos - 1);
  return nl == std::string::npos ? 0 : nl + 1;
}
std::size_t line_end(const std::string& s, std::size_t pos) {  // offset past the newline
  const std::size_t nl = s.find('\n', pos);
  return nl == std::string::npos ? s.size() : nl + 1;
}
bool only_space(const std::string& s, std::size_t a, std::size_t b) {
  for (std::size_t k = a; k < b; ++k)
    if (!is_space(s[k])) return false;
  return true;
}

// Anything between two statements that must stay frozen: a braid: annotation or a directive.
bool frozen_between(const std::vector<Token>& all, std::size_t a, std::size_t b) {
  for (const Token& t : all) {
    if (t.offset < a || t.offset >= b) continue;
    if (t.kind == TokenKind::Preprocessor) return true;
    if (t.kind == TokenKind::Comment &&
        (t.text.find("braid:") != std::string::npos || t.text.find("EVOLVE-BLOCK") != std::string::npos))
      return true;
  }
  return false;
}

struct Region {
  std::size_t begin = 0, end = 0;  // whole lines: [begin, end)
  std::vector<int> sites;
};

std::string site_knob_lines(const Site& s) {
  std::string t =
      fmt::format("// site {}: braid_converted::{} (line {} of the converted program)\n", s.site, s.function, s.line);
  t += fmt::format("constexpr braid::dev::Issuer kSite{}Issuer = braid::dev::Issuer::Cta;  // braid:knob {}\n", s.site,
                   kIssuerDomain);
  t += fmt::format("constexpr int kSite{}Ctas = 0;  // braid:knob {}\n", s.site, kCtasDomain);
  t += fmt::format("constexpr size_t kSite{}ChunkBytes = 0;  // braid:knob {}\n", s.site, kChunkDomain);
  t += fmt::format("constexpr braid::dev::Backend kSite{}Backend = braid::dev::Backend::Lsa;  // braid:knob {}\n",
                   s.site, kBackendDomain);
  t += fmt::format("// braid:require kSite{}Backend == braid::dev::Backend::Lsa\n", s.site);
  t += fmt::format(
      "using BraidSite{0} = braid_converted::Site<{0}, kSite{0}Issuer, kSite{0}Ctas, kSite{0}ChunkBytes, "
      "kSite{0}Backend>;\n",
      s.site);
  return t;
}

struct Insert {
  std::size_t at = 0;
  std::string text;
  int order = 0;             // among inserts at one offset: END markers (0) before START markers (1)
  std::size_t replaced = 0;  // bytes at `at` that `text` replaces
};

std::string apply_inserts(const std::string& src, std::vector<Insert> ins) {
  std::stable_sort(ins.begin(), ins.end(),
                   [](const Insert& a, const Insert& b) { return a.at != b.at ? a.at > b.at : a.order > b.order; });
  std::string out = src;
  for (const Insert& i : ins) out.replace(i.at, i.replaced, i.text);
  return out;
}

std::vector<std::string> split_lines_keep(const std::string& s) {
  std::vector<std::string> out;
  std::size_t p = 0;
  while (p < s.size()) {
    const std::size_t e = line_end(s, p);
    out.emplace_back(trim_right(std::string_view(s).substr(p, e - p)));
    p = e;
  }
  return out;
}

// Lines outside the blocks of a parsed program, marker lines excluded.
std::vector<std::string> frozen_lines(const Program& p) {
  std::vector<std::string> out;
  const std::string& t = p.text();
  std::size_t pos = 0;
  auto add_range = [&](std::size_t a, std::size_t b) {
    for (const std::string& l : split_lines_keep(t.substr(a, b - a)))
      if (l.find("EVOLVE-BLOCK-") == std::string::npos) out.push_back(l);
  };
  for (const EvolveBlock& b : p.blocks()) {
    add_range(pos, b.begin);
    pos = b.end;
  }
  add_range(pos, t.size());
  return out;
}

// Lines that only frozen code may hold (the prelude aside): what the harness, initialisation and
// verification are made of.
bool frozen_only_line(const std::string& line) {
  static const char* const needles[] = {
      "braid:input",     "braid:output", "harness_main", "Synchronize",         "cudaMalloc",
      "cudaFree",        "ncclComm",     "init_comm",    "bootstrap_rank",      "adopt_harness",
      "release_harness", "sym_",         "cudaEvent",    "cudaStreamWaitEvent", "return"};
  for (const char* n : needles)
    if (line.find(n) != std::string::npos) return true;
  return false;
}

void count_parts(AnnotatedProgram& a) {
  Program p = Program::parse(a.source, "annotated");
  a.blocks.clear();
  a.knob_count = 0;
  if (!p.ok()) return;
  for (const EvolveBlock& b : p.blocks()) a.blocks.push_back(b.name);
  a.knob_count = (int)p.knobs().size();
}

}  // namespace

json AnnotatedProgram::to_json() const {
  json sites_j = json::array();
  for (const AnnotatedSite& s : sites)
    sites_j.push_back(
        {{"site", s.site}, {"function", s.function}, {"line", s.line}, {"block", s.block}, {"knobs", s.knobs}});
  json j = {{"method", method}, {"blocks", blocks}, {"knob_count", knob_count}, {"sites", sites_j}};
  if (!llm_outcome.empty()) {
    j["llm_outcome"] = llm_outcome;
    j["llm_detail"] = llm_detail;
  }
  return j;
}

AnnotatedProgram annotate_rules(const std::string& file, const std::string& src) {
  const LexResult lexed = lex(src);
  if (!lexed.error.empty()) throw UserError(file, lexed.error);
  for (const Token& t : lexed.tokens)
    if (t.kind == TokenKind::Comment && t.text.find("EVOLVE-BLOCK-START") != std::string::npos)
      throw UserError(
          file, "line " + std::to_string(t.line) + ": already annotated (EVOLVE-BLOCK markers); evolve it as it is");
  const std::vector<Token> code = code_tokens(lexed.tokens);
  const std::vector<Site> sites = find_sites(code);
  if (sites.empty()) throw UserError(file, "no converted collective (braid_converted::<call><SITE>) to annotate");
  const std::size_t prelude_end = src.find(kPreludeEnd);
  if (prelude_end == std::string::npos)
    throw UserError(file, "not a program converted by braid (no prelude of replacements)");

  AnnotatedProgram a;
  a.method = "rules";
  std::vector<Insert> inserts;
  // Knobs block after the prelude (file scope, before any use).
  std::string knobs =
      "\n// EVOLVE-BLOCK-START knobs\n"
      "// Launch shape of each converted collective, passed to braid_converted::<call><SITE, issuer, CTAs,\n"
      "// chunk bytes, backend>. 0 CTAs / 0 bytes = the rules' choice; the defaults are the converted program.\n";
  std::set<int> seen;
  for (const Site& s : sites) {
    if (!seen.insert(s.site).second) continue;
    knobs += site_knob_lines(s);
  }
  knobs += "// EVOLVE-BLOCK-END\n";
  inserts.push_back(Insert{line_end(src, prelude_end), knobs, 1});
  for (const Site& s : sites)
    inserts.push_back(Insert{s.number_begin, site_type(s.site), 0, s.number_end - s.number_begin});

  // Regions around each site's statement.
  std::vector<Region> regions;
  std::map<int, std::size_t> region_of_site;
  for (const Site& s : sites) {
    const std::size_t open = enclosing_open(code, s.token);
    if (open == SIZE_MAX) continue;
    const std::size_t close = matching(code, open);
    const std::vector<Stmt> stmts = scope_statements(code, open, close);
    std::size_t k = SIZE_MAX;
    for (std::size_t m = 0; m < stmts.size(); ++m)
      if (stmts[m].first <= s.token && s.token <= stmts[m].last) k = m;
    if (k == SIZE_MAX || stmts[k].kind != StmtKind::Comm) continue;
    auto gap_frozen = [&](std::size_t m) {
      return frozen_between(lexed.tokens, code[stmts[m].last].end, code[stmts[m + 1].first].offset);
    };
    std::size_t lo = k, hi = k;
    while (lo > 0 && stmts[lo - 1].kind != StmtKind::Stop && !gap_frozen(lo - 1)) --lo;
    while (hi + 1 < stmts.size() && stmts[hi + 1].kind != StmtKind::Stop && !gap_frozen(hi)) ++hi;
    while (lo < k && stmts[lo].kind == StmtKind::Neutral) ++lo;
    while (hi > k && stmts[hi].kind == StmtKind::Neutral) --hi;
    // Whole lines only, and no directive or braid: comment inside.
    const std::size_t b = code[stmts[lo].first].offset, e = code[stmts[hi].last].end;
    const std::size_t lb = line_begin(src, b), le = line_end(src, e);
    if (!only_space(src, lb, b)) continue;
    bool tail_ok = true;
    for (const Token& t : lexed.tokens)
      if (t.offset >= e && t.offset < le &&
          !(t.kind == TokenKind::Comment && t.text.find("braid:") == std::string::npos))
        tail_ok = false;
    if (!tail_ok || frozen_between(lexed.tokens, b, e)) continue;
    regions.push_back(Region{lb, le, {s.site}});
  }
  std::sort(regions.begin(), regions.end(), [](const Region& x, const Region& y) { return x.begin < y.begin; });
  std::vector<Region> merged;
  for (const Region& r : regions) {
    if (!merged.empty() && (r.begin < merged.back().end || only_space(src, merged.back().end, r.begin))) {
      merged.back().end = std::max(merged.back().end, r.end);
      merged.back().sites.insert(merged.back().sites.end(), r.sites.begin(), r.sites.end());
    } else {
      merged.push_back(r);
    }
  }
  std::map<int, std::string> block_of_site;
  for (const Region& r : merged) {
    const int first = *std::min_element(r.sites.begin(), r.sites.end());
    const std::string name = fmt::format("comm_{}", first);
    std::size_t ind = r.begin;
    while (ind < src.size() && (src[ind] == ' ' || src[ind] == '\t')) ++ind;
    const std::string indent = src.substr(r.begin, ind - r.begin);
    inserts.push_back(Insert{r.begin, indent + "// EVOLVE-BLOCK-START " + name + "\n", 1});
    const bool newline_at_end = r.end > 0 && src[r.end - 1] == '\n';
    inserts.push_back(Insert{r.end, std::string(newline_at_end ? "" : "\n") + indent + "// EVOLVE-BLOCK-END\n", 0});
    for (int s : r.sites) block_of_site[s] = name;
  }
  a.source = apply_inserts(src, inserts);
  a.rules_source = a.source;
  for (const Site& s : sites) {
    AnnotatedSite as;
    as.site = s.site;
    as.function = s.function;
    as.line = s.line;
    as.block = block_of_site.count(s.site) ? block_of_site[s.site] : "";
    for (const char* k : {"Issuer", "Ctas", "ChunkBytes", "Backend"})
      as.knobs.push_back(fmt::format("kSite{}{}", s.site, k));
    a.sites.push_back(as);
  }
  count_parts(a);
  Program check = Program::parse(a.source, file);
  if (!check.ok()) throw SystemError("annotation of " + file + " does not parse: " + check.error()->message);
  return a;
}

std::string strip_annotation(const std::string& annotated) {
  std::string out;
  bool in_knobs = false;
  for (std::size_t p = 0; p < annotated.size();) {
    const std::size_t e = line_end(annotated, p);
    const std::string_view line(annotated.data() + p, e - p);
    const std::string_view t = trim(line);
    if (t.rfind("// EVOLVE-BLOCK-START " + std::string(kKnobsBlock), 0) == 0 && trim(t.substr(22)) == kKnobsBlock) {
      in_knobs = true;
      // the blank line written before the knobs block
      if (out.size() >= 2 && out[out.size() - 1] == '\n' && out[out.size() - 2] == '\n') out.pop_back();
    } else if (in_knobs) {
      if (t.rfind("// EVOLVE-BLOCK-END", 0) == 0) in_knobs = false;
    } else if (t.rfind("// EVOLVE-BLOCK-", 0) != 0) {
      out.append(line);
    }
    p = e;
  }
  // Site types back to site numbers: `<BraidSite3>` -> `<3>`.
  const std::string lead = "<BraidSite";
  for (std::size_t p = out.find(lead); p != std::string::npos; p = out.find(lead, p + 1)) {
    std::size_t n = p + lead.size();
    while (n < out.size() && std::isdigit(static_cast<unsigned char>(out[n]))) ++n;
    if (n > p + lead.size() && n < out.size() && out[n] == '>') out.erase(p + 1, lead.size() - 1);
  }
  return out;
}

std::string annotate_llm_problem(const std::string& converted_source, const std::string& candidate) {
  Program p = Program::parse(candidate, "answer");
  if (!p.ok()) return "does not parse: " + p.error()->message;
  if (p.blocks().empty() || p.knobs().empty()) return "has no evolve block with a knob";
  const std::vector<std::string> frozen = frozen_lines(p);
  const std::vector<std::string> original = split_lines_keep(converted_source);
  // In order, every frozen line of the answer is a line of the converted program.
  std::size_t j = 0;
  std::multiset<std::string> kept;
  for (const std::string& l : frozen) {
    if (trim(l).empty()) continue;  // blank lines carry nothing (the knobs block brings one)
    while (j < original.size() && original[j] != l) ++j;
    if (j == original.size()) return "a line outside the blocks is not in the converted program: `" + trimmed(l) + "`";
    kept.insert(l);
    ++j;
  }
  // The prelude and the frozen-only lines all stay outside blocks.
  const std::size_t prelude_end = converted_source.find(kPreludeEnd);
  const std::size_t prelude_start = converted_source.find("// ==== braid convert: device-initiated replacements");
  std::multiset<std::string> need;
  std::size_t offset = 0;
  for (const std::string& l : original) {
    const bool in_prelude = prelude_start != std::string::npos &&
                            offset >= line_begin(converted_source, prelude_start) && prelude_end != std::string::npos &&
                            offset <= prelude_end;
    if ((in_prelude || frozen_only_line(l)) && !trim(l).empty()) need.insert(l);
    offset = line_end(converted_source, offset);
  }
  for (const std::string& l : need)
    if (kept.count(l) < need.count(l)) return "frozen line moved into a block or removed: `" + trimmed(l) + "`";
  return "";
}

AnnotatedProgram annotate(const std::string& file, const std::string& converted_source,
                          const AnnotateOptions& options) {
  AnnotatedProgram rules = annotate_rules(file, converted_source);
  if (options.llm == nullptr) return rules;
  llm::LlmRequest req;
  req.system =
      "You annotate CUDA programs for braid, an evolutionary search over program variants. Regions between "
      "`// EVOLVE-BLOCK-START name` and `// EVOLVE-BLOCK-END` lines may be changed by the search; everything else is "
      "frozen. "
      "Knobs are lines `constexpr T kName = value;  // braid:knob v1|v2|...` inside a block, optional constraints "
      "`// braid:require expr`. Answer with the whole annotated program in one fenced ```cuda block.";
  req.messages.push_back(llm::ChatMessage{
      "user",
      "Below is a converted program with braid's rule-based annotation. Improve the annotation: place evolve blocks "
      "around the "
      "communication (braid_converted:: calls) and the compute that can overlap with it, and add knobs wired to real "
      "code "
      "(each knob value must select a working variant; the default values must reproduce the program as it is). Rules: "
      "do not "
      "change any line outside the blocks; keep the prelude, `// braid:input` / `// braid:output` lines, allocation, "
      "synchronisation, communicator set-up and teardown outside the blocks; no preprocessor directive inside a block; "
      "keep the "
      "existing knobs.\n\n```cuda\n" +
          rules.source + "```\n"});
  req.max_tokens = options.llm_max_tokens;
  req.temperature = 0.0;
  req.purpose = "annotate";
  req.replay_key = "annotate/" + file;
  const llm::LlmResponse resp = options.llm->complete(req);
  if (!options.record_dir.empty()) {
    std::filesystem::create_directories(options.record_dir);
    write_file_atomic(options.record_dir / "annotate_prompt.md", req.messages.front().content);
    write_file_atomic(options.record_dir / "annotate_answer.md", resp.ok() ? resp.text : "error: " + resp.error);
  }
  auto fall_back = [&](const std::string& outcome, const std::string& detail) {
    AnnotatedProgram a = rules;
    a.llm_outcome = outcome;
    a.llm_detail = detail;
    return a;
  };
  if (!resp.ok()) return fall_back("llm_error", resp.error_kind + ": " + resp.error);
  const std::string code = extract_program(resp.text);
  if (code.empty()) return fall_back("no_code", "the answer holds no fenced program");
  Program parsed = Program::parse(code, file);
  if (!parsed.ok()) return fall_back("parse_failed", parsed.error()->message);
  if (const std::string problem = annotate_llm_problem(converted_source, code); !problem.empty())
    return fall_back("frozen_changed", problem);
  if (!find_cuda_toolchain())
    return fall_back("build_failed", "no nvcc here: the answer could not be compiled, so it is not taken");
  const BuildResult built =
      compile_only(code, options.work_dir / "annotate-llm", "annotated", options.source_dir, options.flags);
  if (!built.ok) return fall_back("build_failed", built.error);
  AnnotatedProgram a = rules;
  a.source = code;
  a.method = "llm";
  a.llm_outcome = "accepted";
  count_parts(a);
  return a;
}

}  // namespace braid::convert
