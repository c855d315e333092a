// One generation's proposal, in named steps:
//   prepare (search thread, proposal_builder.cpp): plan, parent, inspirations, copied into a
//       PreparedProposal at the moment generation g - lag is indexed;
//   ask (any thread, proposal_pool.hpp): [the first ask: the one-knob changes that the first
//       answers of generations <= g - sibling_lag brought are named as taken, proposal_builder.hpp;
//       its focus, a share of the parent's changes no sibling asked blind holds, sibling_focus.hpp]
//       the mutator's answer -> patch applied -> novelty against
//       the population as it was when prepared (embedding similarity, the judge); patch and
//       novelty failures are asked again here, 429s wait in the pool uncounted;
//   settle (search thread, in generation order, proposal_builder.cpp): a knob-only edit is
//       checked against every knob vector evaluated or in flight; then the candidate is
//       evaluated, recorded as rejected, or asked again.
// What a proposal sees is fixed when it is prepared, so a replayed run repeats whatever the
// timing of the model's answers.
#pragma once
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "braid/db/record.hpp"
#include "braid/mutate/mutator.hpp"
#include "braid/program/program.hpp"
#include "braid/search/archive.hpp"
#include "braid/search/config.hpp"
#include "braid/search/population.hpp"
#include "braid/search/selection.hpp"

namespace braid {

class ProposalPool;

// A change of a program's knobs as a prompt names it ("kA = a, kB = b") and the knob vector it makes.
struct KnobChange {
  std::string text;
  std::string key;
};

struct PreparedProposal {
  std::int64_t generation = 0;
  int island = 0;
  std::mt19937_64 rng;
  ProgramRecord parent_rec;
  std::optional<Program> parent;
  std::vector<ProgramRecord> cross_parents, archive, top_k, failed;
  std::optional<ProgramRecord> best;
  MutationContext ctx;              // points into the members above: never moved once made
  // The share of the parent's one-knob changes this proposal focuses on (search/sibling_focus.hpp;
  // empty: none); ctx.focus_knob_changes is it less the taken ones (narrow_focus).
  std::vector<std::string> focus;
  std::vector<std::string> one_knob;  // every one-knob change of the parent (one_knob_changes)
  std::vector<std::string> one_knob_keys;  // the knob vector each of them makes
  // When the siblings asked beside it hold every one-knob change left in its share: its share of
  // the parent's two-knob changes (knob_pair_changes); ctx.focus_knob_pairs is it less the taken.
  std::vector<std::string> pair_focus;
  std::vector<KnobChange> pairs;         // the parent's two-knob changes, made only for pair_focus
  std::vector<std::string> taken_pairs;  // those of `pairs` evaluated or brought by a sibling
  std::size_t similarity_rows = 0;    // population rows with an embedding when prepared

  // Attempts so far.
  int patch_failures = 0, novelty_failures = 0, rate_limits = 0;
  std::string last_text, last_patch, reasons;
  Proposal last;
  // Outcome of the latest ask.
  std::optional<ProgramRecord> candidate;  // passed the checks of ask()
  bool knob_only = false;                  // candidate differs from its parent only in knob values
  bool exhausted = false;                  // no attempt left: the generation is recorded as rejected
  bool cancelled = false;                  // the run is stopping: dropped, proposed again on resume
  std::exception_ptr error;                // thrown on a pool thread; rethrown on the search thread

  PreparedProposal() = default;
  PreparedProposal(const PreparedProposal&) = delete;
  PreparedProposal& operator=(const PreparedProposal&) = delete;
};

// What a proposal is prepared from: the search's state at that moment (search thread only).
struct ProposalSources {
  const SearchConfig& cfg;
  std::uint64_t run_seed;
  const Population& pop;
  const Archive& archive;
  const ParentSelector& selector;
  const std::vector<std::string>& seed_ids;  // per island
  const std::vector<int>& runnable_islands;
  std::function<std::optional<ProgramRecord>(const std::string& id)> get;
  const std::string& task;
  const std::string& language;
  const std::string& meta_recommendations;
};

// Generation g's plan (from its own random stream), parent, inspirations, failed neighbours and
// crossover partners, copied out of the population as it stands.
std::unique_ptr<PreparedProposal> prepare_proposal(const ProposalSources& src, std::int64_t g);

// What ask() needs from the search; every function is safe to call from any thread.
struct ProposalSteps {
  const SearchConfig* cfg = nullptr;
  std::uint64_t run_seed = 0;
  Mutator* mutator = nullptr;
  std::function<ProgramRecord(const std::string& code, std::int64_t generation, int island)> make_record;
  // Highest similarity among the first `rows` embeddings of the population, and its id.
  std::function<float(const std::vector<float>& embedding, std::size_t rows, std::string* nearest)> similarity;
  std::function<std::optional<std::string>(const std::string& id)> code_of;
  std::function<bool(const std::string&, const std::vector<std::string>&)> novelty_judge;  // may be empty
  std::function<void(const AttemptRecord&)> record_attempt;
  std::function<bool()> stopping;
  ProposalPool* pool = nullptr;  // null: asked on the search thread (no rate-limit pause)
  // The records a prompt shows, each with its diagnosis once asked (may be empty), and whether a
  // record's diagnosis is there already (may be empty: always).
  std::function<void(ProgramRecord&)> complete_feedback;
  std::function<bool(const ProgramRecord&)> feedback_settled;
};

// Whether every record p's prompt shows has its diagnosis: asked then, p waits for none.
bool feedback_ready(const PreparedProposal& p, const ProposalSteps& s);

// Asks until a candidate passes the patch and similarity checks, the attempts run out, or the
// run stops. Resets the outcome fields first.
void ask(PreparedProposal& p, const ProposalSteps& s);

// Records a failed attempt (attempts table, reasons, the next prompt's previous_error); true when
// this generation has no attempt of that kind left.
bool count_failed_attempt(PreparedProposal& p, const ProposalSteps& s, const std::string& reason,
                          const std::string& error);

// The record of a generation: its accepted candidate, or a rejected one with every reason.
ProgramRecord accepted_record(PreparedProposal& p, std::uint64_t run_seed);
// What accepted_record would return now, leaving p as it is.
ProgramRecord candidate_record(const PreparedProposal& p, std::uint64_t run_seed);
ProgramRecord rejected_record(PreparedProposal& p, const ProposalSteps& s);

// The parent's one-knob changes ("kName = value", valid under its constraints) whose knob vector
// `taken` names: shown in the mutation prompt (MutationContext::taken_knob_changes).
std::vector<std::string> taken_knob_changes(const Program& parent,
                                            const std::function<bool(const std::string& key)>& taken);
// Every one-knob change of the parent ("kName = value") valid under its constraints, in the
// knobs' and their domains' order.
std::vector<std::string> one_knob_changes(const Program& parent);
// The parent's changes of two knobs together ("kA = a, kB = b"), valid under its constraints, at
// most `limit`, in an order that mixes the knobs (by the change's hash), fixed for a parent text.
std::vector<KnobChange> knob_pair_changes(const Program& parent, std::size_t limit = 256);
// Names in p.taken_pairs those of p.pairs whose knob vector `taken` names.
void name_taken_pairs(PreparedProposal& p, const std::function<bool(const std::string& key)>& taken);
// The prompt's focus: p.focus (p.pair_focus) less the changes named as taken, and whether the
// taken ones are all of the parent's one-knob changes (call after naming more).
void narrow_focus(PreparedProposal& p);
// Adds `change` to a list of named changes unless it is there already (the order is the prompt's).
void name_change(std::vector<std::string>& named, std::string change);

// The id of generation g's child (stable across resume and replay).
std::string child_id(std::uint64_t run_seed, std::int64_t generation);

bool knob_only_edit(const Program& parent, const Program& child);

}  // namespace braid
