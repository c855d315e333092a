// Mutator: the variation operator. The search never knows whether an LLM was involved; it
// gets a patch text (stored as code_diff) and applies it itself.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "braid/db/record.hpp"
#include "braid/program/patch.hpp"
#include "braid/program/program.hpp"

namespace braid {

enum class Phase { Explore, Exploit };
std::string_view to_string(Phase p);              // "explore", "exploit"
std::optional<Phase> phase_from(std::string_view s);

struct MutationContext {
  std::int64_t generation = 0;
  int island = 0;
  Phase phase = Phase::Explore;
  PatchType patch_type = PatchType::Diff;
  double temperature = 0.0;
  std::string system_message;             // task message (+ island's own), for LLM operators
  std::string language = "cpp";
  const ProgramRecord* parent = nullptr;  // never null
  std::vector<const ProgramRecord*> cross_parents;   // 1-2 extra parents for cross
  std::vector<const ProgramRecord*> archive_inspirations;
  std::vector<const ProgramRecord*> top_k_inspirations;
  std::vector<const ProgramRecord*> failed_neighbours;  // negative examples
  const ProgramRecord* best = nullptr;    // best correct program so far (may be null)
  std::string meta_recommendations;
  std::string previous_error;             // why the last attempt at this generation failed
  // Single-knob changes of the parent ("kName = value") already evaluated when the proposal was
  // prepared, brought by the first answers of earlier concurrent proposals, or that broke the
  // program in an earlier answer of this one: a knob-only edit that repeats one is rejected and
  // asked again, so the prompt names them (each a function of recorded answers, so a replayed
  // run shows the same list).
  std::vector<std::string> taken_knob_changes;
  // The parent's one-knob changes this proposal is asked to choose from when it changes one knob:
  // its own share of the parent's changes, disjoint from the shares of the proposals for the same
  // parent text asked at the same time (search/sibling_focus.hpp), less the taken ones. Empty: no
  // focus (asked alone, nothing left in its share, or an operator that is not concurrent).
  std::vector<std::string> focus_knob_changes;
  // Changes of two knobs together ("kA = a, kB = b", valid under the program's constraints) to
  // choose from instead, when the proposals asked at the same time hold every one-knob change left
  // in this one's share, or none is left: its share of the parent's pairs, less the taken ones.
  std::vector<std::string> focus_knob_pairs;
  // Every one-knob change of the parent is taken: the prompt says so and asks for two or more
  // knobs changed together, or the code (else a model keeps answering repeats, each rejected).
  bool one_knob_changes_spent = false;
  std::mt19937_64* rng = nullptr;         // never null
};

struct Proposal {
  PatchType patch_type = PatchType::Diff;
  std::string patch;       // text applied by the search with apply_patch()
  std::string model;       // "knob" or the LLM model string
  double cost_usd = 0.0;
  std::string error;       // non-empty: no patch could be produced (counted, resampled)
  // The model refused for its rate limit (429): the search waits and asks again, uncounted.
  bool rate_limited = false;
  double retry_after_s = -1.0;  // the server's Retry-After; < 0: none given
  bool ok() const { return error.empty(); }
};

// True when a knob vector (Program::knob_key() form) was already proposed or evaluated.
using SeenKnobVector = std::function<bool(const std::string& knob_key)>;

class Mutator {
 public:
  virtual ~Mutator() = default;
  virtual Proposal propose(const Program& parent, const MutationContext& ctx) = 0;
  virtual std::string name() const = 0;
  // True when propose() asks a remote model (seconds, not microseconds): the search then asks
  // several at once on other threads (search/proposal_pool.hpp), so propose() must be
  // thread-safe. False: it runs on the search's thread, as the KnobMutator needs.
  virtual bool remote() const { return false; }
  // The search's test for knob vectors already evaluated or in flight, for an operator that
  // steers away from them (the KnobMutator); others ignore it.
  virtual void set_seen(SeenKnobVector seen) {}
};

}  // namespace braid
