// LlmMutator: asks a model (chosen round robin or by the UCB bandit) for a diff, full or
// cross patch of the parent, with prompts built from the templates in prompts/. When the
// search resamples a generation (ctx.previous_error), the model sees its own previous answer
// and the exact error, as a follow-up turn of the same conversation.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "braid/mutate/llm_runtime.hpp"
#include "braid/mutate/mutator.hpp"

namespace braid {

class LlmMutator final : public Mutator {
 public:
  explicit LlmMutator(std::shared_ptr<LlmRuntime> runtime);
  Proposal propose(const Program& parent, const MutationContext& ctx) override;
  std::string name() const override { return "llm"; }
  bool remote() const override { return true; }  // thread-safe: the runtime and mu_ guard shared state

  // The messages a proposal would send (no call made); used by propose() and tests.
  std::string system_message(const MutationContext& ctx) const;
  std::string user_message(const Program& parent, const MutationContext& ctx) const;

 private:
  struct Turn {
    std::string model;
    std::string user;
    std::string answer;
  };
  std::shared_ptr<LlmRuntime> rt_;
  std::mutex mu_;
  std::map<std::int64_t, int> attempts_;       // generation -> calls made for it
  std::map<std::int64_t, Turn> last_turn_;     // generation -> last exchange (for resampling)
};

struct ExtractedPatch {
  PatchType type = PatchType::Diff;
  std::string text;
};

// Finds the patch in a model's answer. An answer in the other form than asked (blocks for a
// diff, SEARCH/REPLACE for a full rewrite) is taken in the form it has. nullopt with `why`
// when the answer holds neither.
std::optional<ExtractedPatch> extract_patch(PatchType requested, const std::string& answer, std::string* why);

// Middle of `text` elided beyond `max_chars` (compiler errors: the head matters most).
std::string elide(const std::string& text, std::size_t max_chars);

}  // namespace braid
