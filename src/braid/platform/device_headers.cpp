#include "braid/platform/device_headers.hpp"

#include <algorithm>
#include <cctype>
#include <set>
#include <sstream>
#include <utility>

#include "braid/util/fs.hpp"
#include "braid/util/text.hpp"

namespace braid {

std::string HeaderContract::prompt_section() const { return "### braid/" + name + "\n" + contract + "\n"; }

std::vector<HeaderContract> device_header_contracts(const std::filesystem::path& device_include) {
  std::vector<std::filesystem::path> headers;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(device_include / "braid", ec)) {
    const auto ext = e.path().extension().string();
    if (ext == ".cuh" || ext == ".h" || ext == ".hpp") headers.push_back(e.path());
  }
  std::sort(headers.begin(), headers.end());
  std::vector<HeaderContract> out;
  for (const auto& h : headers)
    if (auto text = try_read_file(h)) {
      std::string contract = leading_comment(*text, 80);
      if (!contract.empty()) out.push_back({h.filename().string(), std::move(contract)});
    }
  return out;
}

namespace {

bool is_ident(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// The line without a trailing `//` comment (headers put no "//" inside string literals).
std::string_view code_of(std::string_view line) {
  auto p = line.find("//");
  return p == std::string_view::npos ? line : line.substr(0, p);
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  for (auto p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
}

// Trimmed, runs of spaces squeezed, NCCL's attribute macros spelled as what they mean to a kernel.
std::string normalized(std::string_view raw) {
  std::string s;
  for (char c : trim(raw)) {
    if (c == '\t') c = ' ';
    if (c == ' ' && !s.empty() && s.back() == ' ') continue;
    s += c;
  }
  replace_all(s, "NCCL_EXTERN_C ", "");
  replace_all(s, "NCCL_HOST_DEVICE_INLINE", "__host__ __device__");
  replace_all(s, "NCCL_DEVICE_INLINE", "__device__");
  return s;
}

int count(std::string_view s, char c) { return static_cast<int>(std::count(s.begin(), s.end(), c)); }

// The identifier after `keyword ` in `code`, "" when absent.
std::string word_after(const std::string& code, const std::string& keyword) {
  for (auto p = code.find(keyword); p != std::string::npos; p = code.find(keyword, p + 1)) {
    bool starts = p == 0 || !is_ident(code[p - 1]);
    auto q = p + keyword.size();
    if (!starts || q >= code.size() || code[q] != ' ') continue;
    while (q < code.size() && code[q] == ' ') ++q;
    if (code.compare(q, 6, "class ") == 0) q += 6;  // enum class X
    auto e = q;
    while (e < code.size() && is_ident(code[e])) ++e;
    return code.substr(q, e - q);
  }
  return "";
}

// The statement's code without comments and without a leading template<...> clause.
std::string statement_code(const std::vector<std::string>& stmt) {
  std::string code;
  for (const auto& l : stmt) code += std::string(code_of(l)) + " ";
  if (code.rfind("template", 0) == 0) {
    int depth = 0;
    for (std::size_t i = 0; i < code.size(); ++i) {
      if (code[i] == '<') ++depth;
      if (code[i] == '>' && --depth == 0) {
        code = trimmed(code.substr(i + 1));
        break;
      }
    }
  }
  return trimmed(code);
}

bool is_type_statement(const std::string& code) {
  auto paren = code.find('(');
  for (const char* kw : {"struct ", "class ", "union ", "enum "})
    if (auto p = code.find(kw); p != std::string::npos && p < paren && (p == 0 || !is_ident(code[p - 1]))) return true;
  return false;
}

// Where a variable's name ends (its initializer, array bounds, braces or the statement's end),
// and the line that closes a type's scope.
constexpr std::string_view kAfterVariableName = ";=[{";
constexpr std::string_view kScopeEnd = "};";

// `operator+=` (one per symbol is shown), or the identifier before the parameter list.
std::string function_name(const std::string& code, std::size_t paren) {
  if (auto op = code.find("operator"); op != std::string::npos && op < paren)
    return trimmed(code.substr(op, paren - op));
  auto e = paren;
  while (e > 0 && code[e - 1] == ' ') --e;
  auto b = e;
  while (b > 0 && is_ident(code[b - 1])) --b;
  return code.substr(b, e - b);
}

// The last identifier before the variable's initializer, bounds or ';'.
std::string variable_name(const std::string& code) {
  auto e = code.find_last_of(kAfterVariableName);
  e = e == std::string::npos ? code.size() : e;
  while (e > 0 && !is_ident(code[e - 1])) --e;
  auto b = e;
  while (b > 0 && is_ident(code[b - 1])) --b;
  return code.substr(b, e - b);
}

// The name a statement declares: a type's, an alias's, a function's or a variable's.
std::string declared_name(const std::string& code) {
  if (is_type_statement(code)) {
    for (const char* kw : {"struct", "class", "union", "enum"})
      if (auto w = word_after(code, kw); !w.empty()) return w;
  }
  if (code.rfind("using ", 0) == 0) return word_after(code, "using");
  if (auto paren = code.find('('); paren != std::string::npos) return function_name(code, paren);
  return variable_name(code);
}

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool is_implementation_detail(const std::string& name) {
  return name.empty() || name[0] == '_' || ends_with(name, "_internal") || ends_with(name, "_stash");
}

// `struct X;` or `template<...> struct X;`: says nothing a prompt needs.
bool is_forward_declaration(const std::string& code) {
  return is_type_statement(code) && code.find('{') == std::string::npos && code.back() == ';' &&
         code.find('(') == std::string::npos && std::count(code.begin(), code.end(), ' ') <= 2;
}

// Reads a header line by line: comments gather until a declaration takes them; a declaration ends
// at a ';' or '{' outside parentheses; a type's '{' opens a scope whose members are read the same
// way; a function's '{' starts a body that is skipped.
class DeclarationReader {
 public:
  std::vector<ApiDeclaration> read(const std::string& text) {
    std::istringstream in(text);
    for (std::string raw; std::getline(in, raw);) line(normalized(raw));
    return std::move(out_);
  }

 private:
  struct Scope {
    ApiDeclaration decl;
    bool keep = true;
    bool raw = false;                 // an enum: its lines are copied as they are
    std::set<std::string> operators;  // operator overloads already shown
  };

  void line(const std::string& l) {
    if (in_block_comment_) {
      in_block_comment_ = l.find("*/") == std::string::npos;
      return;
    }
    if (skip_braces_ > 0) {
      skip_braces_ += count(code_of(l), '{') - count(code_of(l), '}');
      return;
    }
    if (stmt_.empty() && l.rfind("/*", 0) == 0) {
      in_block_comment_ = l.find("*/") == std::string::npos;
      return;
    }
    if (l.empty() || l[0] == '#') {
      if (l.empty() && stmt_.empty()) pending_.clear();
      return;
    }
    if (l.rfind("//", 0) == 0) {
      if (!stmt_.empty()) stmt_.push_back(l);
      else if (l.find_first_not_of('/') != std::string::npos) pending_.push_back(l);
      return;
    }
    if (stmt_.empty() && !scopes_.empty() && l[0] == '}') return close_scope();
    if (stmt_.empty() && !scopes_.empty() && scopes_.back().raw)
      return scopes_.back().decl.lines.push_back(indent(0) + l);
    if (stmt_.empty() && (l == "public:" || l == "private:" || l == "protected:")) return;
    stmt_.push_back(l);
    // Braces count only outside parentheses: `mmHandle={}` is a default argument.
    int opens = 0, closes = 0;
    std::size_t first_open = std::string::npos;
    for (std::size_t i = 0; i < code_of(l).size(); ++i) {
      const char c = l[i];
      parens_ += (c == '(') - (c == ')');
      if (parens_ > 0) continue;
      if (c == '{' && opens++ == 0) first_open = i;
      closes += c == '}';
    }
    if (parens_ > 0) return;
    if (opens > 0) return brace(first_open, opens - closes);
    if (code_of(l).find(';') != std::string_view::npos) finish(std::move(stmt_));
  }

  void brace(std::size_t first_open, int unclosed) {
    const std::string code = statement_code(stmt_);
    if (is_type_statement(code)) {
      if (unclosed <= 0) return finish(std::move(stmt_));  // struct ncclGin_None {};
      Scope s;
      s.decl.name = declared_name(code);
      s.keep = !is_implementation_detail(s.decl.name);
      s.raw = code.find("enum") != std::string::npos && code.find("struct") == std::string::npos;
      s.decl.lines = indented(take_pending(), stmt_);
      stmt_.clear();
      scopes_.push_back(std::move(s));
      return;
    }
    // An inline function: its signature only (no body, no constructor initializer list).
    stmt_.back() = trimmed(stmt_.back().substr(0, first_open));
    cut_initializer_list();
    stmt_.back() += ";";
    skip_braces_ = unclosed;
    finish(std::move(stmt_));
  }

  // `X(int a): a(a)` -> `X(int a)`: cut after the parameter list's closing parenthesis.
  void cut_initializer_list() {
    int depth = 0;
    bool opened = false;
    for (std::size_t li = 0; li < stmt_.size(); ++li) {
      const std::string_view code = code_of(stmt_[li]);
      for (std::size_t i = 0; i < code.size(); ++i) {
        depth += (code[i] == '(') - (code[i] == ')');
        opened = opened || code[i] == '(';
        if (!opened || depth != 0 || code[i] != ')') continue;
        const auto rest = trim(code.substr(i + 1));
        if (rest.empty() || rest[0] != ':') return;
        stmt_[li] = stmt_[li].substr(0, i + 1);
        stmt_.resize(li + 1);
        return;
      }
    }
  }

  void finish(std::vector<std::string> stmt) {
    stmt_.clear();
    parens_ = 0;
    const std::string code = statement_code(stmt);
    std::string name = declared_name(code);
    auto comments = take_pending();
    if (is_forward_declaration(code) || is_implementation_detail(name)) return;
    if (name.rfind("operator", 0) == 0 && !scopes_.empty() && !scopes_.back().operators.insert(name).second) return;
    add({std::move(name), indented(std::move(comments), stmt)});
  }

  void close_scope() {
    Scope s = std::move(scopes_.back());
    scopes_.pop_back();
    pending_.clear();
    s.decl.lines.push_back(indent(0) + std::string(kScopeEnd));
    if (s.keep) add(std::move(s.decl));
  }

  void add(ApiDeclaration d) {
    if (scopes_.empty()) return out_.push_back(std::move(d));
    auto& lines = scopes_.back().decl.lines;
    lines.insert(lines.end(), d.lines.begin(), d.lines.end());
  }

  std::vector<std::string> take_pending() { return std::exchange(pending_, {}); }

  std::string indent(int extra) const { return std::string(2 * (scopes_.size() + extra), ' '); }

  // Comments and the first line at the scope's indentation, continuation lines two further.
  std::vector<std::string> indented(std::vector<std::string> comments, const std::vector<std::string>& stmt) const {
    std::vector<std::string> lines;
    for (auto& c : comments) lines.push_back(indent(0) + c);
    for (std::size_t i = 0; i < stmt.size(); ++i) {
      const bool after_template = i > 0 && stmt[i - 1].rfind("template", 0) == 0 && stmt[i - 1].back() == '>';
      lines.push_back(indent(i == 0 || after_template ? 0 : 1) + stmt[i]);
    }
    return lines;
  }

  std::vector<ApiDeclaration> out_;
  std::vector<Scope> scopes_;
  std::vector<std::string> pending_, stmt_;
  int parens_ = 0, skip_braces_ = 0;
  bool in_block_comment_ = false;
};

}  // namespace

std::vector<ApiDeclaration> header_declarations(const std::string& text) { return DeclarationReader().read(text); }

std::string ApiHeader::prompt_section() const {
  std::string s = "### " + name + "\n";
  for (std::size_t i = 0; i < declarations.size(); ++i) {
    const auto& d = declarations[i];
    // Blank lines only around multi-line declarations: runs of one-liners stay compact.
    bool spaced = d.lines.size() > 1 || (i > 0 && declarations[i - 1].lines.size() > 1);
    if (i > 0 && spaced) s += "\n";
    for (const auto& l : d.lines) s += l + "\n";
  }
  return s;
}

std::vector<ApiHeader> nccl_device_api(const std::filesystem::path& nccl_include) {
  std::error_code ec;
  if (nccl_include.empty() || !std::filesystem::is_regular_file(nccl_include / "nccl_device.h", ec)) return {};
  // utility.h (NCCL's internal helpers) and net_device.h (the network plugin's ABI) declare
  // nothing a kernel calls.
  const std::set<std::string> internal = {"utility.h", "net_device.h"};
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(nccl_include / "nccl_device", ec))
    if (e.is_regular_file() && e.path().extension() == ".h" && !internal.count(e.path().filename().string()))
      files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<ApiHeader> out;
  for (const auto& f : files)
    if (auto text = try_read_file(f)) {
      ApiHeader h{"nccl_device/" + f.filename().string(), header_declarations(*text)};
      if (!h.declarations.empty()) out.push_back(std::move(h));
    }
  if (auto text = try_read_file(nccl_include / "nccl_device" / "impl" / "comm__types.h")) {
    ApiHeader h{"nccl_device/impl/comm__types.h", {}};
    for (auto& d : header_declarations(*text))
      if (d.name == "ncclDevComm") h.declarations.push_back(std::move(d));
    if (!h.declarations.empty()) out.push_back(std::move(h));
  }
  return out;
}

}  // namespace braid
