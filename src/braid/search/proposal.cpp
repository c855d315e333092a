#include "braid/search/proposal.hpp"

#include <algorithm>
#include <chrono>
#include <set>

#include <fmt/format.h>

#include "braid/program/origin.hpp"
#include "braid/program/patch.hpp"
#include "braid/search/proposal_pool.hpp"
#include "braid/search/schedule.hpp"
#include "braid/util/clock.hpp"
#include "braid/util/error.hpp"
#include "braid/util/hash.hpp"

namespace braid {

namespace {

// A model that answers 429 this many times in a row for one generation is taken at its word (a
// spent quota also answers 429): the attempt then counts as failed, as other errors do.
constexpr int kMaxRateLimitWaits = 20;
// The two-knob changes a prompt lists at most (its share may hold more).
constexpr std::size_t kShownPairs = 4;

// Why `rec` (not a knob-only edit) is no new program: too close to one the proposal was
// prepared with, or the judge says so. "" when novel.
std::string novelty_error(const PreparedProposal& p, const ProposalSteps& s, const ProgramRecord& rec) {
  std::string nearest;
  float sim = s.similarity(rec.embedding, p.similarity_rows, &nearest);
  if (sim > float(s.cfg->code_embed_sim_threshold))
    return fmt::format("too similar to {} (cosine {:.4f} > {})", nearest, sim, s.cfg->code_embed_sim_threshold);
  if (!s.novelty_judge) return "";
  std::vector<std::string> similar;
  if (auto code = s.code_of(nearest)) similar.push_back(std::move(*code));
  if (!s.novelty_judge(rec.code, similar)) return "novelty judge: no meaningful difference from " + nearest;
  return "";
}

// The model's answer, waiting out rate limits in the pool (uncounted) when there is one.
Proposal answer(PreparedProposal& p, const ProposalSteps& s) {
  while (true) {
    if (s.pool) s.pool->await_clear();
    Proposal prop = s.mutator->propose(*p.parent, p.ctx);
    if (!s.pool) return prop;
    if (!prop.rate_limited || ++p.rate_limits > kMaxRateLimitWaits || s.stopping()) {
      if (!prop.rate_limited) s.pool->answered();
      return prop;
    }
    s.pool->rate_limited(prop.retry_after_s);
  }
}

// The parent's one-knob change ("kName = value") that turns it into `text`, if that is all it does.
std::optional<std::string> one_knob_change(const Program& parent, const std::string& text) {
  for (const auto& k : parent.knobs())
    for (const auto& v : k.domain) {
      if (v == k.value) continue;
      EditResult e = with_knobs(parent, {{k.name, v}});
      if (e.ok() && e.text == text) return k.name + " = " + v;
    }
  return std::nullopt;
}

}  // namespace

namespace {

const ProgramSummary* choose_parent(const ProposalSources& src, int island, std::mt19937_64& rng) {
  const Population& pop = src.pop;
  const auto* ranked = &pop.ranked(island);
  if (ranked->empty()) ranked = &pop.ranked_all();
  if (auto idx = src.selector.select(pop, *ranked, rng)) return &pop.at(*idx);
  return pop.find(src.seed_ids[std::size_t(island)]);  // nothing correct yet: mutate the seed
}

std::vector<ProgramRecord> load_records(const ProposalSources& src, const std::vector<std::size_t>& idxs) {
  std::vector<ProgramRecord> out;
  for (std::size_t i : idxs)
    if (auto r = src.get(src.pop.at(i).id)) out.push_back(std::move(*r));
  return out;
}

std::vector<std::size_t> top_k(const Population& pop, int k, const std::string& exclude,
                               const std::set<std::string>& also_exclude) {
  std::vector<std::size_t> out;
  for (std::size_t i : pop.ranked_all()) {
    if (int(out.size()) >= k) break;
    const auto& id = pop.at(i).id;
    if (id == exclude || also_exclude.count(id)) continue;
    out.push_back(i);
  }
  return out;
}

std::vector<std::size_t> failed_neighbours(const Population& pop, const std::string& parent_id, int n) {
  std::vector<std::size_t> children, others;
  const auto& f = pop.failures();
  for (auto it = f.rbegin(); it != f.rend(); ++it) {
    const auto& p = pop.at(*it);
    if (p.failure == FailureKind::Rejected) continue;
    (p.parent_id == parent_id ? children : others).push_back(*it);
    if (int(children.size()) >= n) break;
  }
  for (std::size_t i : others) {
    if (int(children.size()) >= n) break;
    children.push_back(i);
  }
  return children;
}

// Crossover partners: 1-2 programs from the inspirations, else from the best.
std::vector<ProgramRecord> cross_partners(const ProposalSources& src, const PreparedProposal& p, std::mt19937_64& rng) {
  const Population& pop = src.pop;
  std::vector<const ProgramRecord*> pool_of;
  for (auto& r : p.archive) pool_of.push_back(&r);
  for (auto& r : p.top_k) pool_of.push_back(&r);
  std::shuffle(pool_of.begin(), pool_of.end(), rng);
  int want = std::uniform_int_distribution<int>(1, 2)(rng);
  std::vector<ProgramRecord> out;
  for (auto* r : pool_of)
    if (int(out.size()) < want && r->id != p.parent_rec.id && r->correct) out.push_back(*r);
  if (out.empty()) {
    for (std::size_t i : pop.ranked_all())
      if (pop.at(i).id != p.parent_rec.id) {
        if (auto r = src.get(pop.at(i).id)) out.push_back(*r);
        break;
      }
  }
  return out;
}

}  // namespace

void name_change(std::vector<std::string>& named, std::string change) {
  if (std::find(named.begin(), named.end(), change) == named.end()) named.push_back(std::move(change));
}

namespace {

// Calls `fn(change, key)` for each one-knob change of `parent` valid under its constraints
// ("kName = value" and the knob vector it makes), in the knobs' and their domains' order.
template <class Fn>
void for_each_one_knob_change(const Program& parent, Fn&& fn) {
  const auto values = parent.knob_values();
  for (const auto& k : parent.knobs())
    for (const auto& v : k.domain) {
      if (v == k.value) continue;
      auto changed = values;
      changed[k.name] = v;
      if (!parent.violated_constraint(changed)) fn(k.name + " = " + v, knob_key_of(changed));
    }
}

}  // namespace

std::vector<std::string> taken_knob_changes(const Program& parent,
                                            const std::function<bool(const std::string& key)>& taken) {
  std::vector<std::string> out;
  for_each_one_knob_change(parent, [&](std::string change, const std::string& key) {
    if (taken(key)) out.push_back(std::move(change));
  });
  return out;
}

std::vector<std::string> one_knob_changes(const Program& parent) {
  std::vector<std::string> out;
  for_each_one_knob_change(parent, [&](std::string change, const std::string&) { out.push_back(std::move(change)); });
  return out;
}

std::vector<KnobChange> knob_pair_changes(const Program& parent, std::size_t limit) {
  const auto values = parent.knob_values();
  const auto& knobs = parent.knobs();
  std::vector<std::pair<std::string, KnobChange>> out;  // (hash, change)
  for (std::size_t i = 0; i < knobs.size(); ++i)
    for (std::size_t j = i + 1; j < knobs.size(); ++j)
      for (const auto& a : knobs[i].domain)
        for (const auto& b : knobs[j].domain) {
          if (a == knobs[i].value || b == knobs[j].value) continue;
          auto changed = values;
          changed[knobs[i].name] = a;
          changed[knobs[j].name] = b;
          if (parent.violated_constraint(changed)) continue;
          std::string change = knobs[i].name + " = " + a + ", " + knobs[j].name + " = " + b;
          out.emplace_back(hash_hex(change), KnobChange{std::move(change), knob_key_of(changed)});
        }
  std::sort(out.begin(), out.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<KnobChange> changes;
  for (std::size_t k = 0; k < out.size() && k < limit; ++k) changes.push_back(std::move(out[k].second));
  return changes;
}

void name_taken_pairs(PreparedProposal& p, const std::function<bool(const std::string& key)>& taken) {
  if (!p.parent) return;
  for (const auto& change : p.pairs)
    if (taken(change.key)) name_change(p.taken_pairs, change.text);
}

void narrow_focus(PreparedProposal& p) {
  auto& focus = p.ctx.focus_knob_changes;
  focus.clear();
  const auto& taken = p.ctx.taken_knob_changes;
  const auto is_taken = [&](const std::string& change) {
    return std::find(taken.begin(), taken.end(), change) != taken.end();
  };
  for (const auto& change : p.focus)
    if (!is_taken(change)) focus.push_back(change);
  // A model reads a few pairs; the share's others stay for the next proposal.
  auto& pairs = p.ctx.focus_knob_pairs;
  pairs.clear();
  for (const auto& change : p.pair_focus)
    if (pairs.size() < kShownPairs && std::find(p.taken_pairs.begin(), p.taken_pairs.end(), change) == p.taken_pairs.end())
      pairs.push_back(change);
  p.ctx.one_knob_changes_spent = !p.one_knob.empty() && std::all_of(p.one_knob.begin(), p.one_knob.end(), is_taken);
}

std::unique_ptr<PreparedProposal> prepare_proposal(const ProposalSources& src, std::int64_t g) {
  const SearchConfig& cfg = src.cfg;
  const Population& pop = src.pop;
  const auto& runnable_islands = src.runnable_islands;
  auto p = std::make_unique<PreparedProposal>();
  p->generation = g;
  p->rng = generation_rng(src.run_seed, g);
  auto& rng = p->rng;
  bool can_cross = pop.ranked_all().size() >= 2;
  GenerationPlan plan = plan_generation(cfg, g, can_cross, rng);
  if (std::find(runnable_islands.begin(), runnable_islands.end(), plan.island) == runnable_islands.end())
    plan.island = runnable_islands[std::size_t(g - 1) % runnable_islands.size()];
  p->island = plan.island;
  const ProgramSummary* parent_s = choose_parent(src, plan.island, rng);
  if (!parent_s) throw SystemError("no parent program available (seed missing)");
  auto parent_rec = src.get(parent_s->id);
  if (!parent_rec) throw SystemError("parent " + parent_s->id + " missing from the database");
  p->parent_rec = std::move(*parent_rec);
  p->parent = Program::parse(p->parent_rec.code, "parent " + p->parent_rec.id);
  p->last_text = p->parent_rec.code;

  auto archive_idx = src.archive.sample_inspirations(pop, cfg.num_archive_inspirations, p->parent_rec.id, rng);
  std::set<std::string> shown;
  for (auto i : archive_idx) shown.insert(pop.at(i).id);
  auto topk_idx = top_k(pop, cfg.num_top_k_inspirations, p->parent_rec.id, shown);
  p->archive = load_records(src, archive_idx);
  p->top_k = load_records(src, topk_idx);
  p->failed = load_records(src, failed_neighbours(pop, p->parent_rec.id, cfg.num_failed_neighbours));
  if (!pop.ranked_all().empty()) p->best = src.get(pop.at(pop.ranked_all().front()).id);
  if (plan.patch_type == PatchType::Cross) {
    p->cross_parents = cross_partners(src, *p, rng);
    if (p->cross_parents.empty()) plan.patch_type = PatchType::Diff;
  }

  MutationContext& ctx = p->ctx;
  ctx.generation = g;
  ctx.island = plan.island;
  ctx.phase = plan.phase;
  ctx.patch_type = plan.patch_type;
  ctx.temperature = plan.temperature;
  ctx.system_message = src.task;
  if (!cfg.task_sys_msg_per_island.empty())
    ctx.system_message += "\n\n" + cfg.task_sys_msg_per_island[std::size_t(plan.island)];
  ctx.language = src.language;
  ctx.parent = &p->parent_rec;
  for (auto& r : p->cross_parents) ctx.cross_parents.push_back(&r);
  for (auto& r : p->archive) ctx.archive_inspirations.push_back(&r);
  for (auto& r : p->top_k) ctx.top_k_inspirations.push_back(&r);
  for (auto& r : p->failed) ctx.failed_neighbours.push_back(&r);
  ctx.best = p->best ? &*p->best : nullptr;
  ctx.meta_recommendations = src.meta_recommendations;
  if (p->parent) {
    ctx.taken_knob_changes =
        taken_knob_changes(*p->parent, [&](const std::string& key) { return pop.knob_key_seen(key); });
    for_each_one_knob_change(*p->parent, [&](std::string change, const std::string& key) {
      p->one_knob.push_back(std::move(change));
      p->one_knob_keys.push_back(key);
    });
  }
  narrow_focus(*p);
  ctx.rng = &p->rng;
  p->similarity_rows = pop.embedding_rows();
  return p;
}

std::string child_id(std::uint64_t run_seed, std::int64_t generation) {
  return hash_hex(fmt::format("child:{}:{}", run_seed, generation));
}

bool knob_only_edit(const Program& parent, const Program& child) {
  if (child.knobs().empty()) return false;
  auto edited = with_knobs(parent, child.knob_values());
  return edited.ok() && edited.text == child.text();
}

// The records p's prompt shows (its parent, the programs to combine, inspirations, top, failed,
// best), each given to `f`.
template <typename Proposal, typename F>
static void for_each_shown(Proposal& p, F&& f) {
  f(p.parent_rec);
  for (auto* group : {&p.cross_parents, &p.archive, &p.top_k, &p.failed})
    for (auto& r : *group) f(r);
  if (p.best) f(*p.best);
}

// The records the prompt shows get their diagnoses, which are asked beside the search: waited for
// here, so a prompt reads the same whatever the timing.
void complete_feedback(PreparedProposal& p, const ProposalSteps& s) {
  if (s.complete_feedback) for_each_shown(p, [&](ProgramRecord& r) { s.complete_feedback(r); });
}

bool feedback_ready(const PreparedProposal& p, const ProposalSteps& s) {
  bool ready = true;
  if (s.feedback_settled) for_each_shown(p, [&](const ProgramRecord& r) { ready = ready && s.feedback_settled(r); });
  return ready;
}

void ask(PreparedProposal& p, const ProposalSteps& s) {
  p.candidate.reset();
  p.knob_only = p.exhausted = p.cancelled = false;
  complete_feedback(p, s);
  while (true) {
    if (s.stopping()) {
      p.cancelled = true;
      return;
    }
    Proposal prop = answer(p, s);
    if (s.stopping()) {  // cut short by Ctrl-C or a rejected key: proposed again on resume
      p.cancelled = true;
      return;
    }
    p.last = prop;
    std::string error, reason = "patch";
    PatchOutcome out;
    if (!prop.ok()) {
      error = prop.error;
      reason = "mutator";
    } else {
      out = apply_patch(*p.parent, prop.patch_type, prop.patch);
      if (!out.ok()) error = out.error;
      // A one-knob change that broke the program (a braid:require) is named with the taken ones:
      // asked the same again, a model would likely repeat it.
      if (!out.ok() && !out.rejected_text.empty())
        if (auto change = one_knob_change(*p.parent, out.rejected_text)) {
          name_change(p.ctx.taken_knob_changes, *change);
          narrow_focus(p);
        }
    }
    if (error.empty()) {
      Program child = Program::parse(out.text, "candidate");
      ProgramRecord rec = s.make_record(out.text, p.generation, p.island);
      // A knob-only edit is novel iff its knob vector is unseen: settled on the search thread,
      // in generation order, against every vector evaluated or in flight.
      p.knob_only = knob_only_edit(*p.parent, child);
      if (!p.knob_only) error = novelty_error(p, s, rec);
      if (error.empty()) {
        p.candidate = std::move(rec);
        return;
      }
      reason = "novelty";
      p.last_text = out.text;
    }
    if (count_failed_attempt(p, s, reason, error)) {
      p.exhausted = true;
      return;
    }
  }
}

bool count_failed_attempt(PreparedProposal& p, const ProposalSteps& s, const std::string& reason,
                          const std::string& error) {
  p.last_patch = p.last.patch;
  AttemptRecord a;
  a.generation = p.generation;
  a.parent_id = p.parent_rec.id;
  a.patch_type = std::string(to_string(p.last.patch_type));
  a.patch_text = p.last.patch;
  a.reason = reason;
  a.error = error;
  a.created_at = now_s();
  s.record_attempt(a);
  p.reasons += fmt::format("[{}] {}\n", reason, error);
  const bool exhausted = reason == "novelty" ? ++p.novelty_failures >= s.cfg->max_novelty_attempts
                                             : ++p.patch_failures >= s.cfg->max_patch_attempts;
  if (!exhausted) p.ctx.previous_error = error;
  return exhausted;
}

ProgramRecord accepted_record(PreparedProposal& p, std::uint64_t run_seed) {
  ProgramRecord rec = candidate_record(p, run_seed);
  p.candidate.reset();
  return rec;
}

ProgramRecord candidate_record(const PreparedProposal& p, std::uint64_t run_seed) {
  ProgramRecord rec = *p.candidate;
  rec.patch_type = std::string(to_string(origin_of(p.last.patch_type)));
  rec.code_diff = p.last.patch;
  rec.parent_id = p.parent_rec.id;
  rec.parent_ids.push_back(p.parent_rec.id);
  if (p.last.patch_type == PatchType::Cross)
    for (auto& r : p.cross_parents) rec.parent_ids.push_back(r.id);
  rec.model = p.last.model;
  rec.cost_usd = p.last.cost_usd;
  rec.id = child_id(run_seed, p.generation);
  return rec;
}

ProgramRecord rejected_record(PreparedProposal& p, const ProposalSteps& s) {
  ProgramRecord rec = s.make_record(p.last_text, p.generation, p.island);
  rec.id = child_id(s.run_seed, p.generation);
  rec.patch_type = std::string(to_string(origin_of(p.last.patch_type)));
  rec.code_diff = p.last_patch;
  rec.parent_id = p.parent_rec.id;
  rec.parent_ids = {p.parent_rec.id};
  rec.model = p.last.model;
  rec.failure = FailureKind::Rejected;
  rec.error_text = p.reasons;
  rec.knob_key.clear();  // a rejected duplicate must not stand for its knob vector
  return rec;
}

}  // namespace braid
