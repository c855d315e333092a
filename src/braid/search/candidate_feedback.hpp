// The model's diagnosis of each evaluated candidate (text_feedback), asked after the candidate
// counts. The search indexes an evaluated candidate at once and its diagnosis is asked beside the
// search: a model call holds up neither an evaluation slot nor the proposals that wait for that
// generation to be indexed. What the outcome changes in the search's own state (a model's reward)
// is noted before indexing. Whatever shows the candidate to a model (a mutation prompt, a remote
// meta summary) waits for its diagnosis first, so it reads the same whatever the timing, and a
// replayed run repeats the run.
#pragma once
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "braid/db/record.hpp"
#include "braid/mutate/agents.hpp"
#include "braid/search/shared_database.hpp"

namespace braid {

class CandidateFeedback {
 public:
  // `agent` null or `enabled` false (use_text_feedback): no feedback, no reward.
  CandidateFeedback(FeedbackAgent* agent, bool enabled, SharedDatabase& db)
      : agent_(enabled ? agent : nullptr), db_(db) {}
  bool asks() const { return agent_ != nullptr; }

  // A seed: its outcome noted and its diagnosis ("" without one) asked at once.
  std::string now(const ProgramRecord& rec);
  // An evaluated candidate, before it is indexed: its outcome noted, its diagnosis expected.
  void note_outcome(const ProgramRecord& rec);
  // ... after it is handed back: its diagnosis asked and stored (none when `stopped`).
  void ask(const ProgramRecord& rec, bool stopped);

  // The diagnosis of `id`, waiting while it is asked (until `stopping`); nullopt when none was
  // expected here (a record of an earlier session, a seed: its stored feedback holds).
  std::optional<std::string> await(const std::string& id, const std::function<bool()>& stopping);
  // Whether the diagnosis of `id` is there (or none is expected here): awaiting it would not wait.
  bool settled(const std::string& id);
  // `rec` with its diagnosis (awaited) in place of what it was read with.
  void complete(ProgramRecord& rec, const std::function<bool()>& stopping);

 private:
  std::optional<ProgramRecord> parent_of(const ProgramRecord& rec) const;
  void settle(const std::string& id, std::string text);

  FeedbackAgent* agent_;
  SharedDatabase& db_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::optional<std::string>> by_id_;  // nullopt: still asked
};

}  // namespace braid
