// KnobMutator: the embedded variation operator that needs no LLM. It edits only the declared
// braid:knob values and emits exactly the patch text an LLM would (SEARCH/REPLACE of the knob
// lines for diff, the blocks' full text for full and cross), so the search treats both alike.
//
//   diff   change 1-2 knobs
//   full   resample every knob
//   cross  take each knob from the parent or one of ctx.cross_parents
//
// Explore draws uniformly over a knob's domain; Exploit moves to an adjacent domain value
// (temperature widens the step). Every proposal stays inside the domains and satisfies every
// braid:require (rejection sampling, bounded); an optional `seen` test steers away from knob
// vectors already evaluated. All randomness comes from ctx.rng.
#pragma once
#include <functional>
#include <string>

#include "braid/mutate/mutator.hpp"

namespace braid {

// True when a knob vector (Program::knob_key() form) was already proposed or evaluated.
using SeenKnobVector = std::function<bool(const std::string& knob_key)>;

class KnobMutator : public Mutator {
 public:
  static constexpr int kDefaultMaxTries = 200;

  explicit KnobMutator(SeenKnobVector seen = {}, int max_tries = kDefaultMaxTries);

  Proposal propose(const Program& parent, const MutationContext& ctx) override;
  std::string name() const override { return "knob"; }

  void set_seen(SeenKnobVector seen) { seen_ = std::move(seen); }

 private:
  SeenKnobVector seen_;
  int max_tries_;
};

}  // namespace braid
