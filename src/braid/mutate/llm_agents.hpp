// LLM versions of the search's helper agents (mutate/agents.hpp) and the novelty judge.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "braid/mutate/agents.hpp"
#include "braid/mutate/llm_runtime.hpp"

namespace braid {

// Diagnoses each evaluated candidate in a few sentences (stored as text_feedback). Its
// note_outcome rewards the model bandit with the candidate's improvement over its parent, so it is
// created even when no feedback model is configured (diagnose then returns "").
class LlmFeedbackAgent final : public FeedbackAgent {
 public:
  explicit LlmFeedbackAgent(std::shared_ptr<LlmRuntime> runtime);
  std::string diagnose(const ProgramRecord& candidate, const ProgramRecord* parent) override;
  void note_outcome(const ProgramRecord& candidate, const ProgramRecord* parent) override;

 private:
  std::shared_ptr<LlmRuntime> rt_;
};

// Summarize the recent batch, update the scratchpad (tried / won / failed), rank
// recommendations. A model answer that is not the requested JSON still yields a summary (its
// text) and recommendations (its list lines); the scratchpad is then carried over unchanged.
class LlmMetaSummarizer final : public MetaSummarizer {
 public:
  explicit LlmMetaSummarizer(std::shared_ptr<LlmRuntime> runtime);
  MetaUpdate summarize(const std::vector<ProgramRecord>& recent, const ProgramRecord* best, const json& memory,
                       std::int64_t generation) override;
  bool remote() const override { return true; }  // thread-safe: only the runtime is shared

 private:
  std::shared_ptr<LlmRuntime> rt_;
};

// Parses a meta answer; exposed for tests.
MetaUpdate parse_meta_answer(const std::string& answer, const json& previous_memory);

// true = novel. An unusable answer or a failed call counts as novel: the judge only ever
// removes candidates it positively calls duplicates.
bool judge_novelty(LlmRuntime& rt, const std::string& candidate_code, const std::vector<std::string>& similar_codes);

}  // namespace braid
