// Evaluator of braid:require expressions.
//
//   integers, true/false (True/False), knob names, enum values (Strategy::Serial, Algo.RING,
//   or a bare name listed in `symbols`), string literals ("ring"),
//   + - * / % (C semantics, integer), unary - and !,
//   == != < <= > >=, && || (also Python's and/or/not), parentheses.
//
// Enum values compare by text, only with == and !=. && and || short-circuit, so
// `kB != 0 && kA / kB > 2` is fine when kB is 0.
#pragma once
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace braid {

struct ConstraintCheck {
  bool holds = false;
  std::string error;  // non-empty: the expression could not be evaluated (holds is false)
  bool ok() const { return error.empty(); }
};

// `values` maps knob names to their value text; `symbols` lists bare names that stand for
// themselves (unscoped enum values). Any other bare name is an error.
ConstraintCheck evaluate_constraint(std::string_view expr, const std::map<std::string, std::string>& values,
                                    const std::vector<std::string>& symbols = {});

}  // namespace braid
