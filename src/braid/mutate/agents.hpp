// Optional helpers of the search that an LLM may supply; without an LLM the search uses its
// own statistics-based versions (search/meta_stats.*) and stores no feedback text.
#pragma once
#include <string>
#include <vector>

#include "braid/db/record.hpp"
#include "braid/util/json.hpp"

namespace braid {

// Short diagnosis of a candidate's outcome after evaluation, stored as text_feedback.
class FeedbackAgent {
 public:
  virtual ~FeedbackAgent() = default;
  // `candidate` holds the evaluated record (failure kind, error_text, metrics filled in).
  // Called from the evaluation threads, several at once: it must be thread-safe.
  virtual std::string diagnose(const ProgramRecord& candidate, const ProgramRecord* parent) = 0;
  // What the outcome changes in the search's own state (a model's reward), at once, before the
  // candidate counts; the diagnosis may come later, beside the search. Thread-safe too.
  virtual void note_outcome(const ProgramRecord& candidate, const ProgramRecord* parent) {
    (void)candidate;
    (void)parent;
  }
};

struct MetaUpdate {
  std::string summary;          // digest of the recent batch
  json scratchpad;              // persistent: strategies tried / won / failed
  std::vector<std::string> recommendations;  // ranked, injected into later prompts
};

// Every meta_rec_interval generations. `memory` is the previous meta_memory.json content
// ({"summaries": [...], "scratchpad": ..., "recommendations": [...]}) or an empty object.
class MetaSummarizer {
 public:
  virtual ~MetaSummarizer() = default;
  virtual MetaUpdate summarize(const std::vector<ProgramRecord>& recent, const ProgramRecord* best,
                               const json& memory, std::int64_t generation) = 0;
  // True when it asks a remote model: the search then calls summarize on a thread of its own
  // (search/meta_journal.hpp), so it must be thread-safe.
  virtual bool remote() const { return false; }
};

}  // namespace braid
