// The analyzer's passes before the walk (analyzer_passes.hpp): what the whole token stream says
// before calls are read in order — is it source at all, its annotations, constants, pointer types
// and the harness's buffers.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <set>

#include "braid/convert/analyzer_passes.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"

namespace braid::convert {
namespace {

bool is(const Token& t, const char* text) { return t.text == text; }

bool harness_buffer_call(const std::string& s) { return s == "buffer" || s == "alloc" || s == "alloc_window"; }

// The buffer a `// braid:input x` / `// braid:output x` comment names, if it holds the marker.
void read_annotation(const std::string& file, const Token& t, const char* kind, Analysis& a) {
  const std::string marker = std::string("braid:") + kind;
  auto p = t.text.find(marker);
  if (p == std::string::npos) return;
  std::string rest = t.text.substr(p + marker.size());
  std::size_t b = rest.find_first_not_of(" \t");
  std::size_t e = b == std::string::npos ? b : rest.find_first_of(" \t*", b);
  std::string name = b == std::string::npos ? "" : rest.substr(b, e == std::string::npos ? std::string::npos : e - b);
  if (name.empty()) throw UserError(fmt::format("{}:{}", file, t.line), marker + " names no buffer");
  a.annotations.push_back(Annotation{kind, name, t.line, t.offset, t.end});
}

// A header's preprocessor lines, its own quoted includes' first, numbered at `at` (the include in
// the analysed file). A header that cannot be read or lexed adds nothing (the compiler will say).
void header_directives(const std::filesystem::path& header, const Token& at, const std::vector<std::string>& dirs,
                       std::set<std::string>& seen, std::vector<Token>& out) {
  const std::optional<HeaderText> read = lex_header_once(header, seen);
  if (!read) return;
  for (const Token& t : read->lexed.tokens) {
    if (t.kind != TokenKind::Preprocessor) continue;
    if (const std::string name = quoted_include(t.text); !name.empty()) {
      if (const auto nested = find_header(name, header.parent_path(), dirs); !nested.empty())
        header_directives(nested, at, dirs, seen, out);
      continue;
    }
    Token d = t;
    d.offset = at.offset;
    d.end = at.offset;
    d.line = at.line;
    out.push_back(d);
  }
}

// What a conversion rewrites or the rules follow: NCCL's data-moving calls, groups, communicator
// creation and destruction, allocations and releases.
const std::vector<std::string>& followed_calls() {
  static const std::vector<std::string> calls = [] {
    std::vector<std::string> c = {
        "ncclGroupStart",    "ncclGroupEnd",    "ncclCommInitRank", "ncclCommInitRankConfig",
        "ncclCommSplit",     "ncclCommInitAll", "ncclCommDestroy",  "ncclCommFinalize",
        "ncclMemAlloc",      "ncclMemFree",     "cudaMalloc",       "cudaMallocAsync",
        "cudaMallocManaged", "cudaFree",        "cudaFreeAsync",    "ncclCommInitRankScalable",
        "ncclCommAbort"};
    c.push_back("cudaMallocFromPoolAsync");  // stream-ordered, from the program's own cudaMemPool_t
    c.push_back("cudaMallocPitch");          // rows padded to a pitch the call returns
    for (const NcclSignature& s : nccl_signatures()) c.push_back(s.name);
    return c;
  }();
  return calls;
}

std::vector<std::size_t> line_starts(const std::string& text) {
  std::vector<std::size_t> starts = {0};
  for (std::size_t i = 0; i < text.size(); ++i)
    if (text[i] == '\n') starts.push_back(i + 1);
  return starts;
}

// A header's code, its own quoted includes' first, when it calls what the rules follow: numbered
// from out.end, each token given the line of `at` (the include in the analysed file).
void header_code(const std::filesystem::path& header, const std::string& name, const Token& at,
                 const std::vector<std::string>& dirs, std::set<std::string>& seen, HeaderCode& out,
                 std::vector<Token>& toks) {
  const std::optional<HeaderText> read = lex_header_once(header, seen);
  if (!read) return;
  const std::string& text = read->text;
  const LexResult& lr = read->lexed;
  const std::vector<Token> code = code_tokens(lr.tokens);
  const HeaderCalls calls = header_calls(code);
  if (calls == HeaderCalls::Library) return;
  for (const Token& t : lr.tokens)
    if (t.kind == TokenKind::Preprocessor)
      if (const std::string nested = quoted_include(t.text); !nested.empty())
        if (const auto path = find_header(nested, header.parent_path(), dirs); !path.empty())
          header_code(path, nested, at, dirs, seen, out, toks);
  if (calls == HeaderCalls::None) return;
  HeaderSpan span{name, out.end, out.end + text.size(), at.offset, line_starts(text)};
  for (Token x : code) {
    x.offset += span.begin;
    x.end += span.begin;
    x.line = at.line;
    toks.push_back(std::move(x));
  }
  out.end = span.end + 1;
  out.spans.push_back(std::move(span));
}

}  // namespace

// `#include "name"` -> name; "" for any other line (system includes are not read).
std::string quoted_include(const std::string& directive) {
  const std::size_t hash = directive.find('#');
  const std::size_t kw = directive.find_first_not_of(" \t", hash + 1);
  if (hash == std::string::npos || kw == std::string::npos || directive.compare(kw, 7, "include") != 0) return "";
  const std::size_t open = directive.find_first_not_of(" \t", kw + 7);
  if (open == std::string::npos || directive[open] != '"') return "";
  const std::size_t close = directive.find('"', open + 1);
  return close == std::string::npos ? "" : directive.substr(open + 1, close - open - 1);
}

std::filesystem::path find_header(const std::string& name, const std::filesystem::path& from,
                                  const std::vector<std::string>& dirs) {
  std::error_code ec;
  if (!from.empty() && std::filesystem::is_regular_file(from / name, ec)) return from / name;
  for (const std::string& d : dirs)
    if (std::filesystem::is_regular_file(std::filesystem::path(d) / name, ec)) return std::filesystem::path(d) / name;
  return {};
}

std::optional<HeaderText> read_header(const std::filesystem::path& header) {
  try {
    HeaderText h{read_file(header), {}};
    h.lexed = lex(h.text);
    if (h.lexed.error.empty()) return h;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

std::optional<HeaderText> lex_header_once(const std::filesystem::path& header, std::set<std::string>& seen) {
  std::error_code ec;
  if (!seen.insert(std::filesystem::weakly_canonical(header, ec).string()).second || seen.size() > 64)
    return std::nullopt;
  return read_header(header);
}

HeaderCalls header_calls(const std::vector<Token>& code) {
  const std::vector<std::string>& followed = followed_calls();
  HeaderCalls calls = HeaderCalls::None;
  for (std::size_t i = 0; i + 1 < code.size(); ++i) {
    if (code[i + 1].text != "(" || std::find(followed.begin(), followed.end(), code[i].text) == followed.end())
      continue;
    // The library's own header declares the API (`ncclResult_t ncclAllReduce(`, cuda_runtime.h's
    // `cudaError_t cudaMalloc(` wrappers, `CUDARTAPI cudaFree(`), found through `-I` to the toolkit:
    // not the program's code, nor are the headers it includes.
    const std::string& before = i > 0 ? code[i - 1].text : "";
    if (before == "ncclResult_t" || before == "cudaError_t" || before == "CUDARTAPI") return HeaderCalls::Library;
    calls = HeaderCalls::Program;
  }
  return calls;
}

HeaderCode with_header_code(const std::string& file, const std::vector<Token>& all, const std::vector<Token>& code,
                            const SourceContext& context, std::size_t source_size) {
  HeaderCode out;
  out.end = source_size + 1;
  std::vector<std::pair<std::size_t, std::vector<Token>>> inserts;  // include offset -> its headers' code
  const std::filesystem::path own = std::filesystem::path(file).parent_path();
  std::set<std::string> seen;
  for (const Token& t : all) {
    if (t.kind != TokenKind::Preprocessor) continue;
    const std::string name = quoted_include(t.text);
    if (name.rfind("braid/", 0) == 0) return HeaderCode{code, {}, source_size + 1};  // braid's own workload
    if (name.empty()) continue;
    const auto header = find_header(name, own.empty() ? std::filesystem::path(".") : own, context.include_dirs);
    std::vector<Token> toks;
    if (!header.empty()) header_code(header, name, t, context.include_dirs, seen, out, toks);
    if (!toks.empty()) inserts.emplace_back(t.offset, std::move(toks));
  }
  std::size_t next = 0;
  for (const Token& t : code) {
    for (; next < inserts.size() && inserts[next].first < t.offset; ++next)
      out.code.insert(out.code.end(), inserts[next].second.begin(), inserts[next].second.end());
    out.code.push_back(t);
  }
  for (; next < inserts.size(); ++next)
    out.code.insert(out.code.end(), inserts[next].second.begin(), inserts[next].second.end());
  return out;
}

std::vector<Token> with_context_directives(const std::string& file, const std::vector<Token>& all,
                                           const SourceContext& context) {
  std::vector<Token> out;
  for (const std::string& d : context.defines) {
    const std::size_t eq = d.find('=');
    Token t;
    t.kind = TokenKind::Preprocessor;
    t.text = "#define " + (eq == std::string::npos ? d + " 1" : d.substr(0, eq) + " " + d.substr(eq + 1));
    out.push_back(t);
  }
  const std::filesystem::path own = std::filesystem::path(file).parent_path();
  std::set<std::string> seen;
  for (const Token& t : all) {
    if (t.kind == TokenKind::Preprocessor)
      if (const std::string name = quoted_include(t.text); !name.empty())
        if (const auto header = find_header(name, own.empty() ? std::filesystem::path(".") : own, context.include_dirs);
            !header.empty())
          header_directives(header, t, context.include_dirs, seen, out);
    out.push_back(t);
  }
  return out;
}

LexResult lex_source(const std::string& file, const std::string& source) {
  if (source.find('\0') != std::string::npos) throw UserError(file, "is not C++/CUDA source (binary data)");
  LexResult lr = lex(source);
  if (!lr.error.empty())
    throw UserError(fmt::format("{}:{}", file, lr.error_line),
                    "not C++/CUDA: " + lr.error.substr(lr.error.find(": ") + 2));
  return lr;
}

void require_translation_unit(const std::string& file, const std::string& source, const LexResult& lexed,
                              const std::vector<Token>& code) {
  // A C++/CUDA translation unit has at least one declaration ending in ';' or '}' and identifiers.
  std::size_t idents = 0, semis = 0, braces = 0;
  for (const Token& t : code) {
    idents += t.kind == TokenKind::Identifier;
    semis += t.text == ";";
    braces += t.text == "{";
  }
  const bool has_include = std::any_of(lexed.tokens.begin(), lexed.tokens.end(), [](const Token& t) {
    return t.kind == TokenKind::Preprocessor && t.text.find("include") != std::string::npos;
  });
  if (idents == 0 || semis == 0 || braces == 0 || (!has_include && source.find("int main") == std::string::npos))
    throw UserError(file, "is not C++/CUDA source (no includes, declarations or functions)");
}

void read_annotations(const std::string& file, const std::vector<Token>& all, Analysis& a) {
  for (const Token& t : all)
    if (t.kind == TokenKind::Comment)
      for (const char* kind : {"input", "output"}) read_annotation(file, t, kind, a);
}

namespace {

// A macro building a braced table entry from the address of its argument (llm.c's
// `#define TENSOR_SPEC(pointer, size) TensorSpec{(void**)(&pointer), (size), dtype_of(pointer)}`): its
// uses are read expanded, so the flow sees which field the entry points at.
bool builds_entry_from_address(const MacroDefinition& m) {
  const std::vector<Token>& b = m.body;
  const auto is_param = [&](const Token& t) {
    return std::find(m.params.begin(), m.params.end(), t.text) != m.params.end();
  };
  if (!m.function_like || std::none_of(b.begin(), b.end(), [](const Token& t) { return t.text == "{"; })) return false;
  for (std::size_t k = 0; k + 1 < b.size(); ++k)
    if (b[k].text == "&" && (is_param(b[k + 1]) || (b[k + 1].text == "(" && k + 2 < b.size() && is_param(b[k + 2]))))
      return true;
  return false;
}

}  // namespace

std::vector<Token> splice_macro_uses(const std::vector<Token>& code, const MacroTable& macros, std::size_t source_size,
                                     Analysis& a) {
  if (macros.definitions().empty()) return code;
  // What a conversion rewrites or the rules follow: a use whose expansion calls one of these is a call site.
  const std::vector<std::string>& calls = followed_calls();
  std::map<const MacroDefinition*, bool> matters;
  const MacroTable::Expands expands = [&](const MacroDefinition& m) {
    auto it = matters.find(&m);
    return it != matters.end() ? it->second
                               : (matters[&m] = macros.calls_any(m, calls) || builds_entry_from_address(m));
  };
  std::vector<Token> out;
  std::size_t next = source_size + 1;
  for (std::size_t i = 0; i < code.size(); ++i) {
    const Token& t = code[i];
    const MacroDefinition* m = t.kind == TokenKind::Identifier ? macros.at(t.text, t.offset) : nullptr;
    const bool member = i > 0 && (code[i - 1].text == "." || code[i - 1].text == "->");
    if (!m || member || !expands(*m) || (m->function_like && (i + 1 >= code.size() || code[i + 1].text != "("))) {
      out.push_back(t);
      continue;
    }
    const MacroExpansion e = macros.expand_use(code, i, expands);
    if (!e.error.empty()) {
      a.unsupported.push_back(
          Issue{t.line, t.text + " (macro)",
                fmt::format("NCCL or memory calls inside macro `{}` (line {}) are not followed here: "
                            "{}; the use stays as written (host NCCL)",
                            t.text, m->line, e.error)});
      out.push_back(t);
      continue;
    }
    a.macro_uses.push_back(MacroUse{t.text, t.line, t.offset, code[e.close].end, e.text, next});
    for (Token x : code_tokens(lex(e.text).tokens)) {
      x.offset += next;
      x.end += next;
      x.line = t.line;
      out.push_back(std::move(x));
    }
    next += e.text.size() + 1;
    i = e.close;
  }
  return out;
}

void collect_macro_constants(const MacroTable& macros, Analysis& a) {
  for (const MacroDefinition& m : macros.definitions())
    if (!m.function_like && !m.ambiguous && !m.body.empty())
      if (auto v = evaluate_integer(join_tokens(m.body), a.constants)) a.constants.emplace(m.name, *v);
}

std::size_t source_offset(const Analysis& a, std::size_t offset) {
  for (const MacroUse& u : a.macro_uses)
    if (offset >= u.expansion_offset && offset <= u.expansion_offset + u.expansion.size()) return u.begin;
  return offset;
}

void collect_constants(const std::vector<Token>& toks, Analysis& a) {
  // Enumerators (`enum { FWD = 0, BWD, NDIR };`, `enum class Dir : int { ... }`): each the one
  // before it plus one unless given a value.
  for (std::size_t i = 0; i + 2 < toks.size(); ++i) {
    if (!is(toks[i], "enum")) continue;
    std::size_t open = i + 1;
    while (open < toks.size() && !is(toks[open], "{") && !is(toks[open], ";")) ++open;
    if (open >= toks.size() || !is(toks[open], "{")) continue;
    int64_t next = 0;
    for (std::size_t k = open + 1; k < toks.size() && toks[k].kind == TokenKind::Identifier;) {
      std::size_t e = k + 1;
      while (e < toks.size() && !is(toks[e], ",") && !is(toks[e], "}")) ++e;
      const std::optional<int64_t> v =
          e > k + 2 && is(toks[k + 1], "=") ? evaluate_integer(normalise(toks, k + 2, e), a.constants) : next;
      if (!v) break;
      a.constants[toks[k].text] = *v;
      next = *v + 1;
      if (e >= toks.size() || is(toks[e], "}")) break;
      k = e + 1;
    }
  }
  for (std::size_t i = 0; i + 3 < toks.size(); ++i) {
    if (!(is(toks[i], "constexpr") || is(toks[i], "const"))) continue;
    std::size_t j = i + 1;
    while (j < toks.size() && (toks[j].kind == TokenKind::Identifier || is(toks[j], "::")) && j + 1 < toks.size() &&
           !is(toks[j + 1], "="))
      ++j;
    if (j + 1 >= toks.size() || toks[j].kind != TokenKind::Identifier || !is(toks[j + 1], "=")) continue;
    std::size_t e = j + 2;
    while (e < toks.size() && !is(toks[e], ";") && !is(toks[e], ",")) ++e;
    if (auto v = evaluate_integer(normalise(toks, j + 2, e), a.constants)) a.constants[toks[j].text] = *v;
  }
}

PointerTypes declared_pointer_types(const std::vector<Token>& toks) {
  PointerTypes pointer_types;
  for (std::size_t i = 1; i + 1 < toks.size(); ++i) {
    if (!is(toks[i], "*") || toks[i + 1].kind != TokenKind::Identifier || toks[i - 1].kind != TokenKind::Identifier)
      continue;
    if (i + 2 < toks.size() &&
        !(is(toks[i + 2], "=") || is(toks[i + 2], ";") || is(toks[i + 2], ",") || is(toks[i + 2], ")")))
      continue;
    if (element_size(toks[i - 1].text) == 0 && toks[i - 1].text != "void") continue;
    pointer_types.emplace(toks[i + 1].text, toks[i - 1].text);
  }
  return pointer_types;
}

void collect_harness_buffers(const std::vector<Token>& toks, Analysis& a) {
  // `const Buffer& x = c.buffer("name")` binds a variable; `c.alloc("name", bytes, ...)` sizes it.
  std::map<std::string, std::pair<std::string, int>> harness_alloc;  // harness name -> bytes expr, line
  for (std::size_t i = 0; i + 3 < toks.size(); ++i) {
    if (!(is(toks[i], ".") || is(toks[i], "->")) || !harness_buffer_call(toks[i + 1].text) || !is(toks[i + 2], "("))
      continue;
    if (toks[i + 3].kind != TokenKind::String) continue;
    std::string hname = toks[i + 3].text.substr(1, toks[i + 3].text.size() - 2);
    std::size_t close = matching(toks, i + 2);
    auto args = split_args(toks, i + 2, close);
    if (toks[i + 1].text != "buffer" && args.size() >= 2) harness_alloc[hname] = {args[1].text, toks[i].line};
    // Variable bound to it: `Buffer& x = c.buffer("name")` (x precedes `=` precedes object).
    if (i >= 3 && is(toks[i - 2], "=") && toks[i - 3].kind == TokenKind::Identifier) {
      Buffer b;
      b.name = toks[i - 3].text;
      b.harness_name = hname;
      b.allocator = "harness";
      b.line = toks[i].line;
      b.path = b.name;
      a.buffers[b.name] = b;
    }
    a.uses_harness = true;
  }
  for (auto& [name, b] : a.buffers) {
    if (b.allocator != "harness") continue;
    auto it = harness_alloc.find(b.harness_name);
    if (it != harness_alloc.end()) {
      b.bytes_expr = it->second.first;
      b.line = it->second.second;
      b.bytes = evaluate_integer(b.bytes_expr, a.constants);
    } else {
      b.bytes_expr = b.name + ".bytes";  // sized by the workload at run time (Buffer::bytes)
    }
  }
}

}  // namespace braid::convert
