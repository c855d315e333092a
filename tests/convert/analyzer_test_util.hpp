// What the analyzer's tests of users' idioms share: finding a call, converting a text, reading
// what stayed host NCCL and why.
#pragma once
#include <stdexcept>
#include <string>

#include "braid/convert/analyzer.hpp"
#include "braid/convert/transform.hpp"

namespace braid::convert::test {

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

inline const Call& first_call(const Analysis& a, const std::string& name) {
  for (const Call& c : a.calls)
    if (c.name == name) return c;
  throw std::runtime_error("no call " + name);
}

inline Conversion convert_text(const std::string& src, const SourceContext& context = {}) {
  return transform(analyze("user.cu", src, true, context), src);
}

// Every reason a call or buffer stays host NCCL, one a line.
inline std::string left_text(const Conversion& c) {
  std::string out;
  for (const Unconverted& u : c.left) out += u.reason + "\n";
  return out;
}

// Some reason names `part`.
inline bool told(const Conversion& c, const std::string& part) { return contains(left_text(c), part); }

}  // namespace braid::convert::test
