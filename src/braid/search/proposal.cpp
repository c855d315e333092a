#include "braid/search/proposal.hpp"

#include <chrono>

#include <fmt/format.h>

#include "braid/program/patch.hpp"
#include "braid/search/proposal_pool.hpp"
#include "braid/util/hash.hpp"

namespace braid {

namespace {

// A model that answers 429 this many times in a row for one generation is taken at its word (a
// spent quota also answers 429): the attempt then counts as failed, as other errors do.
constexpr int kMaxRateLimitWaits = 20;

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

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

}  // namespace

std::string child_id(std::uint64_t run_seed, std::int64_t generation) {
  return hash_hex(fmt::format("child:{}:{}", run_seed, generation));
}

bool knob_only_edit(const Program& parent, const Program& child) {
  if (child.knobs().empty()) return false;
  auto edited = with_knobs(parent, child.knob_values());
  return edited.ok() && edited.text == child.text();
}

void ask(PreparedProposal& p, const ProposalSteps& s) {
  p.candidate.reset();
  p.knob_only = p.exhausted = p.cancelled = false;
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

bool count_failed_attempt(PreparedProposal& p, const ProposalSteps& s, const std::string& reason, const std::string& error) {
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
  ProgramRecord rec = std::move(*p.candidate);
  p.candidate.reset();
  rec.patch_type = std::string(to_string(p.last.patch_type));
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
  rec.patch_type = std::string(to_string(p.last.patch_type));
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
