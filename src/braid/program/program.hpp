// A Program is a source text with EVOLVE-BLOCK regions; everything outside them is frozen.
//
//   // EVOLVE-BLOCK-START [name]        (any comment syntax: //, #, /* */, --)
//   constexpr int kChunks = 4;  // braid:knob 1|2|4|8|16
//   constexpr Strategy kS = Strategy::Serial;  // braid:knob Strategy::Serial|Strategy::Pipelined
//   constexpr bool kPush = true;  // braid:knob            (bool: domain true|false implied)
//   // braid:require kChunks * kCommCtas <= 132
//   // EVOLVE-BLOCK-END
//
// Parsing is strict: a block with a preprocessor directive other than #pragma, unbalanced or
// nested markers, a knob whose current value is outside its domain, or a seed without any block
// is an error naming the file (origin) and line.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace braid {

enum class KnobKind { Int, Bool, Enum };

struct Knob {
  std::string name;                 // identifier declared on the knob line, e.g. kChunks
  KnobKind kind = KnobKind::Int;
  std::vector<std::string> domain;  // allowed values as written in source, in declared order
  std::string value;                // current value as written in source
  std::size_t block = 0;            // index of the block holding it
  std::size_t line = 0;             // 1-based line in the program text
  std::size_t value_offset = 0;     // byte offset of `value` in the program text
};

struct EvolveBlock {
  std::string name;          // from the START marker; "block<i>" when unnamed
  std::size_t begin = 0;     // byte offset of the first character after the START marker line
  std::size_t end = 0;       // byte offset of the first character of the END marker line
  std::size_t start_line = 0;  // 1-based line of the START marker
};

// braid:require expression over knob names: integers, + - * / %, comparisons, && || !,
// parentheses, true/false; enum knobs compare by value text (kS == Strategy::Serial).
struct Constraint {
  std::string expr;
  std::size_t line = 0;
};

// Result of parse or of any edit: either a program or a one-line error.
struct ProgramError {
  std::string message;  // "<origin>:<line>: <problem>" where a line is known
};

class Program {
 public:
  // Throws nothing; check ok(). `origin` names the file in errors.
  static Program parse(std::string text, std::string origin = "<program>");

  bool ok() const { return !error_.has_value(); }
  const std::optional<ProgramError>& error() const { return error_; }

  const std::string& text() const { return text_; }
  const std::string& origin() const { return origin_; }
  const std::vector<EvolveBlock>& blocks() const { return blocks_; }
  const std::vector<Knob>& knobs() const { return knobs_; }
  const std::vector<Constraint>& constraints() const { return constraints_; }
  std::string_view block_text(std::size_t i) const;

  // xxhash of every byte outside the blocks (markers included); equal for parent and any
  // valid child.
  const std::string& frozen_fingerprint() const { return fingerprint_; }

  // Knob values by name, and a canonical "name=value;..." key (sorted by name) used for
  // novelty of knob-only edits and MAP-Elites cells.
  std::map<std::string, std::string> knob_values() const;
  std::string knob_key() const;
  const Knob* find_knob(std::string_view name) const;

  // Evaluate every braid:require under `values` (missing names take current values).
  // Returns the first failing constraint's text, or nullopt when all hold; an expression
  // that cannot be evaluated is reported as failing with the reason.
  std::optional<std::string> violated_constraint(const std::map<std::string, std::string>& values) const;

 private:
  std::string text_;
  std::string origin_;
  std::vector<EvolveBlock> blocks_;
  std::vector<Knob> knobs_;
  std::vector<Constraint> constraints_;
  std::string fingerprint_;
  std::optional<ProgramError> error_;
};

// Text of `program` with the given knob values substituted on their declaration lines
// (only the value token changes). Error if a name is unknown or a value outside its domain.
struct EditResult {
  std::string text;                   // valid when error is empty
  std::string error;
  bool ok() const { return error.empty(); }
};
EditResult with_knobs(const Program& program, const std::map<std::string, std::string>& values);

// The canonical knob key of a value vector, as Program::knob_key() writes it.
std::string knob_key_of(const std::map<std::string, std::string>& values);

}  // namespace braid
