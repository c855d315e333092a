// The runner's proposals (search/proposal.hpp), from context to a candidate past the novelty
// gate. Generation g's context (plan, parent, inspirations, meta recommendations) is prepared
// from the population as it stands; the mutator is asked on a ProposalPool when it asks a remote
// model, else at once; answers are settled in generation order, a knob-only edit only once
// every generation before it is settled: it must bring a knob vector that no candidate before
// it (indexed, or accepted and not yet indexed) has, so a replay repeats the outcome. One whose
// vector is already taken before its turn is asked again at once (those vectors only grow: it
// would be taken at its turn too), so a duplicate does not wait for the generations before it.
// The mutator's own `seen` test (Mutator::set_seen) asks the same gate.
// Concurrent proposals from one parent would often bring the same change (their prompts see
// the same population), so generation g's first ask waits for the first answers of the
// generations up to g - sibling_lag (2 x max_parallel_proposals: by then they have nearly always
// come) and its prompt names the parent's one-knob changes they brought as taken: a function of
// answers a replay repeats, whatever their timing. Siblings closer than that are asked blind, so
// each prompt also gets its own share of the parent's one-knob changes to choose from, disjoint
// from theirs (search/sibling_focus.hpp), less the changes it names as taken.
// Search thread only; ask() runs on the pool's threads through thread-safe ProposalSteps.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <vector>

#include "braid/mutate/mutator.hpp"
#include "braid/search/archive.hpp"
#include "braid/search/config.hpp"
#include "braid/search/population.hpp"
#include "braid/search/proposal.hpp"
#include "braid/search/proposal_pool.hpp"
#include "braid/search/selection.hpp"
#include "braid/search/shared_database.hpp"
#include "braid/search/sibling_focus.hpp"

namespace braid {

// What proposals are built from; everything outlives the builder.
struct ProposalContext {
  const SearchConfig& cfg;
  std::uint64_t run_seed;
  const Population& pop;
  std::shared_mutex& pop_mutex;  // held exclusively while the population grows
  const Archive& archive;
  const ParentSelector& selector;
  const std::vector<std::string>& seed_ids;  // per island
  const std::vector<int>& runnable_islands;
  const std::string& task;
  const std::string& language;
  const std::string& meta_recommendations;  // as it stands when a proposal is prepared
  Mutator& mutator;
  SharedDatabase& db;
  std::function<ProgramRecord(const std::string& code, std::int64_t generation, int island)> make_record;
  std::function<bool(const std::string&, const std::vector<std::string>&)> novelty_judge;  // may be empty
  std::function<bool()> stopping;                                                          // the run is stopping
  std::function<void()> wake;  // an ask on the pool returned (called from its thread)
  // A record shown to the model, with its diagnosis awaited (search/candidate_feedback.hpp), and
  // whether it has it already; may be empty.
  std::function<void(ProgramRecord&)> complete_feedback;
  std::function<bool(const ProgramRecord&)> feedback_settled;
};

// A generation's proposal once settled.
struct SettledProposal {
  enum class Kind {
    Accepted,  // `record` waits for an evaluation slot
    Rejected,  // `record` is the generation's result (no attempt left), stored as it is
    Dropped,   // the run is stopping: the generation is proposed again on resume
  };
  Kind kind = Kind::Dropped;
  std::int64_t generation = 0;
  ProgramRecord record;
};

class ProposalBuilder {
 public:
  explicit ProposalBuilder(ProposalContext ctx);
  ~ProposalBuilder();
  ProposalBuilder(const ProposalBuilder&) = delete;
  ProposalBuilder& operator=(const ProposalBuilder&) = delete;

  // Prepares generation g's proposal and asks for it: on the pool, or here and settled at once.
  std::vector<SettledProposal> start(std::int64_t g);
  // The answered proposals whose turn it is, settled lowest generation first.
  std::vector<SettledProposal> settle_answered();
  // Stopping: every proposal not yet settled is dropped; an answer still on its way is lost.
  // Returns their generations.
  std::vector<std::int64_t> drop_all();
  // Generation g was indexed or dropped: its accepted knob vector is no longer pending here.
  void forget(std::int64_t g);
  // The lowest answered knob-only candidate waiting for its turn (its vector not taken yet) that
  // `skip` passes over, as it would be accepted: an idle evaluation slot may evaluate it ahead
  // (search/runner.cpp). Its turn may still find the vector taken: the result is then unused.
  std::optional<ProgramRecord> waiting_candidate(
      const std::function<bool(std::int64_t g, const ProgramRecord& rec)>& skip) const;
  // Whether a candidate of a generation before g (indexed, or accepted and not yet indexed)
  // brought knob vector `key`.
  bool knob_key_taken(const std::string& key, std::int64_t g) const;

  bool concurrent() const { return pool_ != nullptr; }  // asks run on the pool
  bool has_answers() const { return pool_ && pool_->has_finished(); }
  int proposing() const { return int(proposing_.size()); }
  PoolStats pool_stats() const { return pool_ ? pool_->stats() : PoolStats{}; }
  // What generation g's proposal is doing ("" when none is proposing), for the pool's idle causes.
  std::string doing(std::int64_t g) const;
  // The search submits nothing now because of `cause` (ProposalPool::set_idle_cause).
  void set_idle_cause(std::string cause) {
    if (pool_) pool_->set_idle_cause(std::move(cause));
  }
  // Joins the asks still on their way (their answers are dropped).
  void shutdown();

 private:
  ProposalSteps make_steps();
  void submit_ask(PreparedProposal& p, bool first = false);
  // Pool threads: the one-knob changes of p's parent that the first answers of generations up to
  // p.generation - sibling_lag_ brought are named in its prompt; p's own first answer is noted.
  void name_sibling_changes(PreparedProposal& p);
  void note_first_answer(const PreparedProposal& p);
  // `turn`: every generation before p's is settled. A knob-only edit out of turn is settled only
  // when its vector is already taken (it is then asked again at once: the vectors before it only
  // grow, so it would be taken at its turn too); otherwise `*waits` is set and nothing happens.
  std::optional<SettledProposal> settle(PreparedProposal& p, bool turn = true, bool* waits = nullptr);
  void name_taken_changes(PreparedProposal& p, const std::string& key, bool turn) const;

  ProposalContext ctx_;
  ProposalSteps steps_;
  std::map<std::int64_t, std::string> pending_knob_keys_;  // accepted, not yet indexed: generation -> knob key
  std::int64_t sibling_lag_ = 0;
  SiblingFocus focus_;       // search thread: generations' shares of their parents' changes
  SiblingFocus pair_focus_;  // the same of their two-knob changes, for those focus_ cannot serve
  std::mutex first_mu_;
  std::map<std::int64_t, std::string> first_keys_;  // knob vector of a knob-only first answer, by generation
  std::map<std::int64_t, std::unique_ptr<PreparedProposal>> proposing_;
  std::set<std::int64_t> asked_;                            // generations of proposing_ whose ask has returned
  std::map<std::int64_t, int> asks_;                        // asks submitted for each generation of proposing_
  std::vector<std::unique_ptr<PreparedProposal>> dropped_;  // may still be read by a pool thread
  std::unique_ptr<ProposalPool> pool_;                      // declared last: destroyed (threads joined) first
};

}  // namespace braid
