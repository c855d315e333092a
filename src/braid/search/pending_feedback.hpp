// Text feedback asked after a candidate counts. The search indexes an evaluated candidate at once
// and the model's diagnosis of it is asked beside the search: a model call holds up neither an
// evaluation slot nor the proposals that wait for that generation to be indexed. Whatever shows the
// candidate to a model (a mutation prompt, a meta summary) waits for its diagnosis first, so it
// reads the same whatever the timing, and a replayed run repeats the run.
#pragma once
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "braid/db/record.hpp"

namespace braid {

class PendingFeedback {
 public:
  // Candidate `id`'s diagnosis is being asked.
  void expect(const std::string& id);
  // ... and is `text` ("" when the model gave none, or the run stopped first).
  void settle(const std::string& id, std::string text);
  // The diagnosis of `id`, waiting while it is asked (until `stopping`); nullopt when none was
  // expected here (a record of an earlier session, a seed: its stored feedback holds).
  std::optional<std::string> await(const std::string& id, const std::function<bool()>& stopping);
  // `rec` with its diagnosis (awaited) in place of what it was read with.
  void complete(ProgramRecord& rec, const std::function<bool()>& stopping);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::optional<std::string>> by_id_;  // nullopt: still asked
};

}  // namespace braid
