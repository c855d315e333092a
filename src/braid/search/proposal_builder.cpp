#include "braid/search/proposal_builder.hpp"

#include <algorithm>
#include <mutex>

namespace braid {

ProposalBuilder::ProposalBuilder(ProposalContext ctx)
    : ctx_(std::move(ctx)),
      sibling_lag_(2 * std::int64_t(std::max(1, ctx_.cfg.max_parallel_proposals))),
      focus_(sibling_lag_),
      pair_focus_(sibling_lag_) {
  if (ctx_.mutator.remote()) pool_ = std::make_unique<ProposalPool>(ctx_.cfg.max_parallel_proposals, ctx_.wake);
  steps_ = make_steps();
  // The mutator steers away from knob vectors already evaluated or in flight.
  ctx_.mutator.set_seen([this](const std::string& key) { return knob_key_taken(key, kMaxGenerations + 1); });
}

// The pool first: its threads may still be asking.
ProposalBuilder::~ProposalBuilder() {
  pool_.reset();
  ctx_.mutator.set_seen({});
}

// What proposals on other threads may call (every function thread-safe).
ProposalSteps ProposalBuilder::make_steps() {
  ProposalSteps s;
  s.cfg = &ctx_.cfg;
  s.run_seed = ctx_.run_seed;
  s.mutator = &ctx_.mutator;
  s.make_record = ctx_.make_record;
  s.similarity = [this](const std::vector<float>& e, std::size_t rows, std::string* nearest) {
    std::shared_lock lock(ctx_.pop_mutex);
    return ctx_.pop.max_similarity(e, nearest, rows);
  };
  s.code_of = [this](const std::string& id) -> std::optional<std::string> {
    if (auto r = ctx_.db.get(id)) return std::move(r->code);
    return std::nullopt;
  };
  s.novelty_judge = ctx_.novelty_judge;
  s.record_attempt = [this](const AttemptRecord& a) {
    ctx_.db.with([&](ProgramDatabase& db) { db.insert_attempt(a); });
  };
  s.stopping = [this] { return ctx_.stopping() || (pool_ && pool_->cancelled()); };
  s.complete_feedback = ctx_.complete_feedback;
  s.feedback_settled = ctx_.feedback_settled;
  s.pool = pool_.get();
  return s;
}

// Generation g's plan, parent and inspirations are copied now: the population holds exactly
// the generations <= g - lag, whatever the timing.
std::vector<SettledProposal> ProposalBuilder::start(std::int64_t g) {
  ProposalSources src{ctx_.cfg,
                      ctx_.run_seed,
                      ctx_.pop,
                      ctx_.archive,
                      ctx_.selector,
                      ctx_.seed_ids,
                      ctx_.runnable_islands,
                      [this](const std::string& id) { return ctx_.db.get(id); },
                      ctx_.task,
                      ctx_.language,
                      ctx_.meta_recommendations};
  PreparedProposal& p = *(proposing_[g] = prepare_proposal(src, g));
  if (pool_) {
    // Its share of the parent's changes, apart from its siblings' (search/sibling_focus.hpp).
    if (p.parent) {
      p.focus = focus_.assign(g, p.parent_rec.code, p.one_knob, p.ctx.taken_knob_changes, p.one_knob_keys);
      // What is left of its share the earlier siblings will take: a share of pairs instead.
      if (focus_.claimed(g)) {
        p.pairs = knob_pair_changes(*p.parent);
        name_taken_pairs(p, [&](const std::string& key) { return ctx_.pop.knob_key_seen(key); });
        std::vector<std::string> pairs, keys;
        for (const auto& change : p.pairs) {
          pairs.push_back(change.text);
          keys.push_back(change.key);
        }
        p.focus.clear();
        p.pair_focus = pair_focus_.assign(g, p.parent_rec.code, pairs, p.taken_pairs, keys);
      }
    }
    narrow_focus(p);
    submit_ask(p, true);
    return {};
  }
  std::optional<SettledProposal> out;
  do ask(p, steps_);
  while (!(out = settle(p)));
  proposing_.erase(g);
  return {std::move(*out)};
}

void ProposalBuilder::submit_ask(PreparedProposal& p, bool first) {
  ++asks_[p.generation];
  PreparedProposal* raw = &p;  // lives in proposing_ (or dropped_) until the pool is gone
  pool_->submit(
      p.generation,
      [this, raw, first] {
        try {
          if (first) name_sibling_changes(*raw);
          ask(*raw, steps_);
          if (first) note_first_answer(*raw);
        } catch (...) {
          raw->error = std::current_exception();
        }
      },
      first, p.generation - sibling_lag_, [this, raw] { return feedback_ready(*raw, steps_); });
}

// Every first ask up to g - sibling_lag has returned (the pool's gate), so the names are the same
// in a replay. Those already named (evaluated when prepared) are not repeated.
void ProposalBuilder::name_sibling_changes(PreparedProposal& p) {
  if (!p.parent) return;
  std::set<std::string> keys;
  {
    std::lock_guard lock(first_mu_);
    for (auto it = first_keys_.begin(); it != first_keys_.end() && it->first <= p.generation - sibling_lag_; ++it)
      keys.insert(it->second);
  }
  if (keys.empty()) return;
  const auto named = [&](const std::string& k) { return keys.count(k) > 0; };
  for (auto& change : taken_knob_changes(*p.parent, named)) name_change(p.ctx.taken_knob_changes, std::move(change));
  name_taken_pairs(p, named);
  narrow_focus(p);
}

// A knob-only first answer's vector is taken by the time a later generation settles: by this
// one, or by an earlier one it repeated.
void ProposalBuilder::note_first_answer(const PreparedProposal& p) {
  if (p.cancelled || !p.candidate || !p.knob_only) return;
  std::lock_guard lock(first_mu_);
  first_keys_[p.generation] = p.candidate->knob_key;
}

// The search-thread step of an answered proposal: a knob-only edit must bring a knob vector
// no candidate before it has; then the candidate is accepted, or the generation rejected.
// Nullopt: asked again.
// Before p is asked again after its knob vector `key` was taken: the one-knob changes of its
// parent that the prompt names. At its turn that is everything before it; out of turn
// (timing-dependent) only what was prepared plus `key`, so that a replay asks the same.
void ProposalBuilder::name_taken_changes(PreparedProposal& p, const std::string& key, bool turn) const {
  if (!p.parent) return;
  const std::int64_t g = p.generation;
  if (turn) {
    // Every vector taken before g, then what else was named (changes that broke the program).
    const auto taken = [&](const std::string& k) { return knob_key_taken(k, g); };
    auto named = taken_knob_changes(*p.parent, taken);
    for (auto& change : p.ctx.taken_knob_changes) name_change(named, std::move(change));
    p.ctx.taken_knob_changes = std::move(named);
    name_taken_pairs(p, taken);
  } else {
    const auto taken = [&](const std::string& k) { return k == key; };
    for (auto& change : taken_knob_changes(*p.parent, taken)) name_change(p.ctx.taken_knob_changes, std::move(change));
    name_taken_pairs(p, taken);
  }
  narrow_focus(p);
}

std::optional<SettledProposal> ProposalBuilder::settle(PreparedProposal& p, bool turn, bool* waits) {
  const std::int64_t g = p.generation;
  if (p.error) std::rethrow_exception(p.error);
  if (p.cancelled) return SettledProposal{SettledProposal::Kind::Dropped, g, {}};  // proposed again on resume
  if (!p.exhausted && p.knob_only) {
    const std::string key = p.candidate->knob_key;
    if (!knob_key_taken(key, g)) {
      if (!turn) {
        if (waits) *waits = true;
        return std::nullopt;
      }
    } else {
      p.last_text = p.candidate->code;
      p.candidate.reset();
      if (!count_failed_attempt(p, steps_, "novelty", "knob vector already evaluated: " + key)) {
        name_taken_changes(p, key, turn);
        return std::nullopt;
      }
      p.exhausted = true;
    }
  }
  if (p.exhausted) return SettledProposal{SettledProposal::Kind::Rejected, g, rejected_record(p, steps_)};
  ProgramRecord rec = accepted_record(p, ctx_.run_seed);
  if (!rec.knob_key.empty()) pending_knob_keys_[g] = rec.knob_key;
  return SettledProposal{SettledProposal::Kind::Accepted, g, std::move(rec)};
}

// Answered proposals are settled as they come, but a knob-only edit only once every
// generation before it is settled, so it is checked against all their knob vectors and no
// later one; meanwhile later candidates go on to evaluation.
std::vector<SettledProposal> ProposalBuilder::settle_answered() {
  std::vector<SettledProposal> out;
  if (!pool_) return out;
  for (std::int64_t g : pool_->take_finished()) asked_.insert(g);
  for (auto it = proposing_.begin(); it != proposing_.end();) {
    PreparedProposal& p = *it->second;
    const bool first = it == proposing_.begin();
    bool waits = false;
    if (!asked_.count(it->first)) {
      ++it;
      continue;
    }
    auto settled = settle(p, first, &waits);
    if (waits) {
      ++it;
      continue;
    }
    asked_.erase(it->first);
    if (settled) {
      out.push_back(std::move(*settled));
      asks_.erase(it->first);
      it = proposing_.erase(it);
      if (first) it = proposing_.begin();  // the next may now be a knob-only edit's turn
    } else {
      submit_ask(p);
      ++it;
    }
  }
  return out;
}

// After settle_answered(), the answered proposals left are knob-only edits waiting for their turn.
std::optional<ProgramRecord> ProposalBuilder::waiting_candidate(
    const std::function<bool(std::int64_t g, const ProgramRecord& rec)>& skip) const {
  for (std::int64_t g : asked_) {
    auto it = proposing_.find(g);
    if (it == proposing_.end()) continue;
    const PreparedProposal& p = *it->second;
    if (!p.candidate || !p.knob_only || p.exhausted || p.cancelled || p.error) continue;
    ProgramRecord rec = candidate_record(p, ctx_.run_seed);
    if (!skip(g, rec)) return rec;
  }
  return std::nullopt;
}

std::vector<std::int64_t> ProposalBuilder::drop_all() {
  if (pool_) pool_->cancel();
  std::vector<std::int64_t> gens;
  for (auto& [g, p] : proposing_) {
    gens.push_back(g);
    dropped_.push_back(std::move(p));
  }
  proposing_.clear();
  asked_.clear();
  asks_.clear();
  return gens;
}

std::string ProposalBuilder::doing(std::int64_t g) const {
  if (!proposing_.count(g)) return "";
  if (asked_.count(g)) return "answered, waiting for its turn";
  auto it = asks_.find(g);
  return it != asks_.end() && it->second > 1 ? "asked again" : "first ask";
}

void ProposalBuilder::forget(std::int64_t g) { pending_knob_keys_.erase(g); }

// Nothing after g is indexed while g is pending, so the population and the pending keys
// before g are exactly what came before it.
bool ProposalBuilder::knob_key_taken(const std::string& key, std::int64_t g) const {
  if (ctx_.pop.knob_key_seen(key)) return true;
  for (auto it = pending_knob_keys_.begin(); it != pending_knob_keys_.end() && it->first < g; ++it)
    if (it->second == key) return true;
  return false;
}

void ProposalBuilder::shutdown() {
  pool_.reset();
  dropped_.clear();
}

}  // namespace braid
