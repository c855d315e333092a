// inline_headers (header_inline.hpp): which quoted headers are written in, and the text with them.
#include "braid/convert/header_inline.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "braid/convert/analyzer_passes.hpp"
#include "braid/util/fs.hpp"

namespace braid::convert {
namespace {

namespace fs = std::filesystem;

std::string canonical_name(const fs::path& p) {
  std::error_code ec;
  return fs::weakly_canonical(p, ec).string();
}

bool is_pragma_once(const std::string& directive) {
  const std::size_t p = directive.find("pragma");
  return p != std::string::npos && directive.find("once", p) != std::string::npos;
}

int newlines(const std::string& s, std::size_t b, std::size_t e) {
  return static_cast<int>(
      std::count(s.begin() + static_cast<std::ptrdiff_t>(b), s.begin() + static_cast<std::ptrdiff_t>(e), '\n'));
}

class Inliner {
 public:
  Inliner(fs::path own, const std::vector<std::string>& dirs) : own_(std::move(own)), dirs_(dirs) {}

  // `text` with its qualifying quoted includes written in; the blocks' spans (offsets in the
  // returned text) appended to `spans`. `include_line`: the line the blocks take (0: each
  // #include's own, for the file itself).
  std::string render(const std::string& text, const std::vector<Token>& tokens, const fs::path& folder, bool header,
                     int include_line, std::vector<InlinedHeader>& spans) {
    std::string out;
    std::size_t pos = 0;
    auto take_until = [&](std::size_t at) { out.append(text, pos, at - pos); };
    for (const Token& t : tokens) {
      if (t.kind != TokenKind::Preprocessor) continue;
      if (header && is_pragma_once(t.text)) {
        take_until(t.offset);
        out += "// #pragma once (braid: this header is written into the file)";
        pos = t.end;
        continue;
      }
      const std::string name = quoted_include(t.text);
      if (name.empty()) continue;
      const fs::path found = find_header(name, folder, dirs_);
      if (found.empty()) continue;
      if (qualifies(found)) {
        take_until(t.offset);
        pos = t.end;
        if (!written_.insert(canonical_name(found)).second) {
          out += "// braid: \"" + name + "\" is written in above";
          continue;
        }
        write_block(found, name, include_line > 0 ? include_line : t.line, out, spans);
      } else if (header && !reachable_through_dirs(name, found)) {
        // Found beside the header, which is no longer where the text is: named from the file's folder.
        take_until(t.offset);
        pos = t.end;
        out += "#include \"" + relative_to_file(found) + "\"";
      }
    }
    take_until(text.size());
    return out;
  }

 private:
  struct Read {
    std::string text;
    std::vector<Token> tokens;
    HeaderCalls calls = HeaderCalls::None;
  };

  void write_block(const fs::path& found, const std::string& name, int include_line, std::string& out,
                   std::vector<InlinedHeader>& spans) {
    InlinedHeader h;
    h.name = name;
    h.include_line = include_line;
    h.begin = out.size();
    out += "// braid: begin of \"" + name + "\", written into the file so that its calls convert with the file's\n";
    h.text_begin = out.size();
    const Read* r = read(found);
    std::vector<InlinedHeader> inner;
    const std::string body = render(r->text, r->tokens, found.parent_path(), true, include_line, inner);
    out += body;
    if (body.empty() || body.back() != '\n') out += '\n';
    out += "// braid: end of \"" + name + "\"";
    h.end = out.size();
    h.added_lines = newlines(out, h.begin, h.end);
    spans.push_back(h);
    for (InlinedHeader x : inner) {
      x.begin += h.text_begin;
      x.end += h.text_begin;
      x.text_begin += h.text_begin;
      x.nested = true;
      spans.push_back(x);
    }
  }

  // The header's text and tokens; null when it cannot be read or lexed (the compiler will say),
  // or past 64 headers.
  const Read* read(const fs::path& header) {
    const std::string key = canonical_name(header);
    if (auto it = cache_.find(key); it != cache_.end()) return it->second ? &*it->second : nullptr;
    std::optional<Read> r;
    if (cache_.size() < 64)
      if (std::optional<HeaderText> h = read_header(header)) {
        r = Read{std::move(h->text), std::move(h->lexed.tokens), HeaderCalls::None};
        r->calls = header_calls(code_tokens(r->tokens));
      }
    auto& slot = cache_[key] = std::move(r);
    return slot ? &*slot : nullptr;
  }

  // Its code, or that of a quoted header it includes, calls what the rules follow (not the
  // library's own declarations).
  bool qualifies(const fs::path& header) {
    const std::string key = canonical_name(header);
    if (auto it = qualifies_.find(key); it != qualifies_.end()) return it->second;
    qualifies_[key] = false;  // an include cycle ends here
    const Read* r = read(header);
    bool yes = r && r->calls == HeaderCalls::Program;
    if (r && r->calls == HeaderCalls::None)
      for (const Token& t : r->tokens) {
        if (yes) break;
        if (t.kind != TokenKind::Preprocessor) continue;
        if (const std::string name = quoted_include(t.text); !name.empty())
          if (const fs::path nested = find_header(name, header.parent_path(), dirs_); !nested.empty())
            yes = qualifies(nested);
      }
    return qualifies_[key] = yes;
  }

  std::string relative_to_file(const fs::path& found) const {
    const fs::path from = fs::absolute(own_).lexically_normal();
    return fs::absolute(found).lexically_normal().lexically_relative(from).generic_string();
  }

  // The same file is found under `name` from the -I folders (the compiler finds it wherever the text is).
  bool reachable_through_dirs(const std::string& name, const fs::path& found) const {
    const fs::path through = find_header(name, {}, dirs_);
    return !through.empty() && canonical_name(through) == canonical_name(found);
  }

  fs::path own_;
  const std::vector<std::string>& dirs_;
  std::map<std::string, std::optional<Read>> cache_;
  std::map<std::string, bool> qualifies_;
  std::set<std::string> written_;
};

}  // namespace

InlinedSource inline_headers(const std::string& file, const std::string& source, const SourceContext& context) {
  InlinedSource in{source, {}};
  const LexResult lr = lex(source);
  if (!lr.error.empty()) return in;
  for (const Token& t : lr.tokens)
    if (t.kind == TokenKind::Preprocessor && quoted_include(t.text).rfind("braid/", 0) == 0) return in;
  fs::path own = fs::path(file).parent_path();
  if (own.empty()) own = ".";
  Inliner inliner(own, context.include_dirs);
  in.text = inliner.render(source, lr.tokens, own, false, 0, in.headers);
  std::sort(in.headers.begin(), in.headers.end(),
            [](const InlinedHeader& a, const InlinedHeader& b) { return a.begin < b.begin; });
  return in;
}

SourceContext with_inlined(SourceContext context, const InlinedSource& in) {
  context.inlined = in.headers;
  return context;
}

std::size_t before_written_headers(const std::string& text, const std::vector<InlinedHeader>& headers) {
  std::size_t first = text.size();
  for (const InlinedHeader& h : headers) first = std::min(first, h.begin);
  if (first == text.size()) return first;
  // The start of the top-level construct holding it: after the last `;`, `}` or directive at depth 0.
  std::size_t start = 0;
  int depth = 0;
  for (const Token& t : lex(text.substr(0, first)).tokens) {
    if (t.kind == TokenKind::Comment) continue;
    if (t.text == "{") ++depth;
    else if (t.text == "}") --depth;
    if (depth == 0 && (t.text == ";" || t.text == "}" || t.kind == TokenKind::Preprocessor)) start = t.end;
  }
  return depth > 0 ? start : first;
}

void keep_user_lines(std::vector<Token>& tokens, const std::vector<InlinedHeader>& headers) {
  if (headers.empty()) return;
  for (Token& t : tokens) {
    int shift = 0;
    for (const InlinedHeader& h : headers) {
      if (h.nested || h.begin > t.offset) continue;
      if (t.offset < h.end) {
        t.line = h.include_line;
        shift = 0;
        break;
      }
      shift += h.added_lines;
    }
    t.line -= shift;
  }
}

void name_inlined_calls(const std::string& text, const std::vector<InlinedHeader>& headers, Analysis& a) {
  a.inlined = headers;
  for (Call& c : a.calls) {
    // The innermost block holding the call (blocks are sorted by start; nested ones lie inside).
    const InlinedHeader* in = nullptr;
    for (const InlinedHeader& h : headers)
      if (h.text_begin <= c.call_begin && c.call_begin < h.end) in = &h;
    if (!in) continue;
    // Its line in the header: the text's lines before it, less those of blocks nested directly in it.
    int line = 1 + newlines(text, in->text_begin, c.call_begin);
    std::size_t skipped_to = 0;
    for (const InlinedHeader& h : headers)
      if (&h != in && h.begin >= in->text_begin && h.end <= c.call_begin && h.begin >= skipped_to) {
        line -= h.added_lines;
        skipped_to = h.end;
      }
    c.inlined_from = in->name + ":" + std::to_string(line);
  }
}

}  // namespace braid::convert
