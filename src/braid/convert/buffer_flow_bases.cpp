// BufferFlow (buffer_flow.hpp) on class inheritance: a field a base class declares and a derived
// class's constructor allocates (`class Linear : public Layer { Linear(..) { cudaMalloc(&grad_, ..); } }`)
// is a write of the base's field too, so the base's getter (`Layer::grad()`, virtual or not) is
// followed into every derived class's allocation.
#include <set>

#include "braid/convert/buffer_flow.hpp"
#include "braid/convert/buffer_flow_tokens.hpp"

namespace braid::convert {

// The classes `cls` names after `:` in its head (`class Linear : public Layer, private Logged`), in order.
std::vector<std::string> BufferFlow::base_classes(const std::string& cls) const {
  static const std::set<std::string> kAccess = {"public", "protected", "private", "virtual"};
  std::vector<std::string> bases;
  for (const ClassBody& c : classes_) {
    if (c.name != cls) continue;
    std::size_t k = c.open;
    while (k > 0 && code_[k - 1].text != cls && code_[k - 1].text != ";" && code_[k - 1].text != "}") --k;
    if (k == 0 || code_[k - 1].text != cls || code_[k].text != ":") continue;
    for (std::size_t j = k + 1; j < c.open; ++j) {
      if (code_[j].kind != TokenKind::Identifier || kAccess.count(code_[j].text)) continue;
      const std::string& next = code_[j + 1].text;
      if (next == "," || next == "{" || next == "<") bases.push_back(code_[j].text);
      if (next == "<") j = flow_tokens::after_template_args(code_, j + 1, c.open) - 1;
      if (j >= c.open) break;
    }
  }
  return bases;
}

// `cls` itself when it declares `field`, else the nearest base class that does ("" when none).
std::string BufferFlow::declaring_class(const std::string& cls, const std::string& field, int depth) const {
  if (declares_field(cls, field)) return cls;
  for (const std::string& base : depth > 0 ? base_classes(cls) : std::vector<std::string>{})
    if (std::string d = declaring_class(base, field, depth - 1); !d.empty()) return d;
  return "";
}

// "Owner::field" and, when a base class declares the field, "Base::field" as well.
std::vector<std::string> BufferFlow::member_keys(const std::string& owner, const std::string& field) const {
  std::vector<std::string> keys = {owner + "::" + field};
  if (const std::string d = declaring_class(owner, field); !d.empty() && d != owner) keys.push_back(d + "::" + field);
  return keys;
}

}  // namespace braid::convert
