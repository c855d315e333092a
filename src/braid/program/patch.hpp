// Patch forms. The text of a patch is exactly what an LLM (or the KnobMutator) emits and what
// the database stores as code_diff; applying it to the parent gives the child's full text.
//
// diff:   one or more edits, each
//           <<<<<<< SEARCH
//           old lines
//           =======
//           new lines
//           >>>>>>> REPLACE
//         (also accepted: "<<<< SEARCH" / "==== REPLACE" / ">>>>" as in the seed text).
//         SEARCH text must occur exactly once inside one evolve block; matching first tries
//         exact text, then tolerates differences in indentation and trailing whitespace.
//         A SEARCH that is missing, ambiguous, or outside every block is an error naming the
//         block (or "frozen code") and quoting the nearest text.
// full:   the new contents of every block, each introduced by its START marker and closed by
//         its END marker, in order (a whole program text is also accepted: its blocks are
//         taken and its frozen parts must equal the parent's).
// cross:  same text format as full; the child is built from 2-3 parents, recorded as parents.
//
// Prose and ``` code fences around a patch are ignored. After applying, the child is parsed
// again; a change to frozen text, broken markers or a directive in a block is an error.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "braid/program/program.hpp"

namespace braid {

enum class PatchType { Diff, Full, Cross };
std::string_view to_string(PatchType t);           // "diff", "full", "cross"
std::optional<PatchType> patch_type_from(std::string_view s);

struct PatchOutcome {
  std::string text;           // child's full program text, when ok
  std::string error;          // one readable paragraph for the next prompt, when not ok
  std::string rejected_text;  // when not ok: the patched text that failed validation, if it got that far
  int edits = 0;              // diff: number of SEARCH/REPLACE edits applied
  bool ok() const { return error.empty(); }
};

PatchOutcome apply_patch(const Program& parent, PatchType type, std::string_view patch_text);

// Emitters used by the KnobMutator and by tests (LLMs produce the same shapes).
// A diff replacing each given line of the parent with its new text; lines must be in blocks.
std::string make_diff(const std::vector<std::pair<std::string, std::string>>& search_replace);
// A full/cross patch: the given contents for every block, in the parent's block order.
std::string make_full(const Program& parent, const std::vector<std::string>& block_contents);

// Unified diff of two texts (for display and the code_diff of full/cross children).
std::string unified_diff(std::string_view before, std::string_view after, int context = 3);

}  // namespace braid
