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
// braid:require; an optional `seen` test steers away from knob vectors already evaluated. All
// randomness comes from ctx.rng. Where the domains' product is small enough to enumerate (200k),
// the valid vectors are listed once per knob set: an explore resample then decides knob by knob,
// each uniformly among the values that keep a valid completion (plain rejection sampling is
// uniform over valid vectors and so favours whichever value frees the most other knobs), and a
// move that breaks a braid:require keeps the knobs it chose and changes the fewest others.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "braid/mutate/mutator.hpp"

namespace braid {

class KnobMutator : public Mutator {
 public:
  static constexpr int kDefaultMaxTries = 200;

  explicit KnobMutator(SeenKnobVector seen = {}, int max_tries = kDefaultMaxTries);

  Proposal propose(const Program& parent, const MutationContext& ctx) override;
  std::string name() const override { return "knob"; }

  void set_seen(SeenKnobVector seen) override { seen_ = std::move(seen); }

 private:
  SeenKnobVector seen_;
  int max_tries_;
  // Valid vectors per knob set (names, domains, constraints); null when too many to list.
  std::mutex valid_cache_mutex_;
  std::map<std::string, std::shared_ptr<const std::vector<std::vector<std::uint16_t>>>> valid_cache_;
};

}  // namespace braid
