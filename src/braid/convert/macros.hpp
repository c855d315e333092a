// Macros defined in the file (`#define NAME body`, `#define NAME(a, b) body`), expanded the way the
// preprocessor does it (arguments expanded before substitution unless next to # or ##, `#a`
// stringised, `a ## b` pasted, `__VA_ARGS__`, a macro not re-expanded inside its own expansion),
// so that calls written inside a macro's body are seen at each use. Definitions are in scope from
// their #define to an #undef; a name defined twice with no #undef between (alternatives under
// #if/#else) is ambiguous: which body applies depends on the build, so it is never expanded.
// Branches whose condition is known from the macros defined so far (the build's -D ones first,
// see SourceContext in analyzer.hpp) are followed: a definition in a branch not compiled is none.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "braid/convert/lexer.hpp"

namespace braid::convert {

struct MacroDefinition {
  std::string name;
  bool function_like = false;
  bool variadic = false;            // `...` last: its arguments are __VA_ARGS__
  std::vector<std::string> params;  // named parameters (without __VA_ARGS__)
  std::vector<Token> body;          // the replacement list's code tokens
  int line = 0;
  std::size_t defined_at = 0;           // byte offset of the #define
  std::size_t undefined_at = SIZE_MAX;  // byte offset of the #undef that ends it
  bool ambiguous = false;               // another definition of the name is in scope at the same time
  bool uncertain = false;               // made in an #if branch that may or may not be compiled
};

// The text of a macro's expansion, or why it could not be made.
struct MacroExpansion {
  std::string text;
  std::size_t close = 0;  // code token that ends the use (its ')' or the name of an object-like macro)
  std::string error;      // "" when expanded
};

class MacroTable {
 public:
  // Reads the #define/#undef lines among all tokens (lex()).
  explicit MacroTable(const std::vector<Token>& all);

  // The definition of `name` in scope at byte `offset`, or nullptr.
  const MacroDefinition* at(const std::string& name, std::size_t offset) const;
  const std::vector<MacroDefinition>& definitions() const { return defs_; }

  // Which macros an expansion expands (all, or those that matter to the caller).
  using Expands = std::function<bool(const MacroDefinition&)>;
  // The use of `code[i]` (a macro in scope there): nested macros that `expands` accepts are expanded
  // too, others are left as written (the compiler expands them later).
  MacroExpansion expand_use(const std::vector<Token>& code, std::size_t i, const Expands& expands) const;
  // `text` at byte `offset` with every macro in scope expanded (an argument as the compiler sees it).
  std::string expand_text(const std::string& text, std::size_t offset) const;
  // Whether `m`'s body calls one of `names` (`name(`), itself or through macros it uses, or is an
  // object-like alias of one (`#define AR ncclAllReduce`).
  bool calls_any(const MacroDefinition& m, const std::vector<std::string>& names) const;
  // `code` without the tokens of branches known not to be compiled (`#if 0`, `#ifdef X` after
  // `#undef X`, the `#else` of a macro the build defines): the compiler never sees them.
  std::vector<Token> compiled_only(const std::vector<Token>& code) const;

 private:
  std::vector<MacroDefinition> defs_;
  std::vector<std::pair<std::size_t, std::size_t>> skipped_;  // [begin, end) byte ranges, in order
  std::map<std::string, std::vector<std::size_t>> by_name_;   // name -> indices into defs_
};

// Tokens joined into C++ text: a space only where the tokens would otherwise merge or read badly.
std::string join_tokens(const std::vector<Token>& toks);

}  // namespace braid::convert
