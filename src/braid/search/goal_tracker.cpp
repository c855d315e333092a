#include "braid/search/goal_tracker.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "braid/program/origin.hpp"
#include "braid/search/remeasure.hpp"
#include "braid/util/clock.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/hash.hpp"
#include "braid/util/log.hpp"

namespace braid {
namespace {

std::string describe_target(const std::string& metric, double value, const std::string& goal, const std::string& id,
                            std::int64_t generation) {
  return fmt::format("target reached: {} = {:.4g} ({}) by {} (generation {})", metric, value, goal, id, generation);
}

}  // namespace

GoalTracker::GoalTracker(GoalTrackerParts parts, Population& pop)
    : parts_(std::move(parts)), cfg_(parts_.cfg), pop_(pop) {}

void GoalTracker::load(std::unordered_map<std::string, std::string> code_hashes) {
  code_hash_of_ = std::move(code_hashes);
  estimates_ = estimates_by_code(parts_.confirmations.load());
  if (auto n = parts_.db.meta("noise")) noise_ = noise_from_json(*n);
  if (auto b = parts_.db.meta("best")) {
    json j = json::parse(*b, nullptr, false);
    if (j.is_object()) {
      best_id_ = j.value("id", std::string());
      best_score_ = j.value("score", 0.0);
    }
  }
  if (cfg_.stop_when.enabled())  // recorded for this same goal: no need to read every stored candidate again
    if (auto met = parts_.db.meta("target_reached")) {
      json t = json::parse(*met, nullptr, false);
      if (!t.is_discarded() && t.value("goal", std::string()) == cfg_.stop_when.describe()) {
        target_reached_ = true;
        target_note_ =
            describe_target(t.value("metric", std::string()), t.value("value", 0.0), t.value("goal", std::string()),
                            t.value("id", std::string()), t.value("generation", std::int64_t{0}));
      }
    }
  if (cfg_.stop_when.confirm > 0) {  // programs already refuted by re-runs are not re-run again
    auto r = parts_.db.meta("target_refuted");
    json t = r ? json::parse(*r, nullptr, false) : json();
    if (t.is_object()) refuted_ = std::move(t);
  }
}

void GoalTracker::check_stored() {
  if (!cfg_.stop_when.enabled() || target_reached_) return;
  std::vector<std::string> ids;
  for (std::size_t i = 0; i < pop_.size(); ++i)
    if (pop_.at(i).failure == FailureKind::Ok && origin_from(pop_.at(i).patch_type) != Origin::Migrant)
      ids.push_back(pop_.at(i).id);
  for (const auto& id : ids)
    if (auto r = parts_.db.get(id); r && !target_reached_) check_target(*r);
}

void GoalTracker::apply_estimate(ProgramSummary& s) const {
  if (!s.correct) return;
  auto h = code_hash_of_.find(s.id);
  if (h == code_hash_of_.end()) return;
  if (auto e = estimates_.find(h->second); e != estimates_.end()) s.combined_score = e->second.score;
}

void GoalTracker::note_program(const ProgramRecord& rec) {
  if (rec.correct) code_hash_of_[rec.id] = hash_hex(rec.code);
}

void GoalTracker::indexed(const ProgramRecord& rec) {
  if (origin_from(rec.patch_type) != Origin::Seed) settle_best();  // seeds: once all are stored
  check_target(rec);
}

std::optional<TrackedBest> GoalTracker::best() const {
  if (best_id_.empty()) return std::nullopt;
  TrackedBest b{best_id_, best_score_, false, 1};
  if (auto h = code_hash_of_.find(best_id_); h != code_hash_of_.end() && trusted(h->second)) {
    b.confirmed = true;
    b.runs = int(estimates_.at(h->second).samples.size());
  }
  return b;
}

std::string GoalTracker::noise_note() const { return noise_ ? noise_->describe() : std::string(); }

bool GoalTracker::trusted(const std::string& code_hash) const {
  auto e = estimates_.find(code_hash);
  return e != estimates_.end() && !e->second.refuted && !e->second.samples.empty();
}

// The highest-ranked program not refuted is confirmed first where confirm_runs asks for it.
void GoalTracker::settle_best() {
  for (int round = 0; round < 4; ++round) {
    std::optional<ProgramRecord> pick;
    for (std::size_t idx : pop_.ranked_all()) {
      auto rec = parts_.db.get(pop_.at(idx).id);
      if (!rec || refuted_.contains(hash_hex(rec->code))) continue;
      auto e = estimates_.find(hash_hex(rec->code));
      if (e != estimates_.end() && e->second.refuted) continue;  // lost its confirmation
      pick = std::move(rec);
      break;
    }
    if (!pick) return;
    const std::string key = hash_hex(pick->code);
    if (cfg_.confirm_runs == 0 || trusted(key)) {
      const double figure = trusted(key) ? estimates_.at(key).score : pick->combined_score;
      if (best_id_.empty() || code_hash_of_[best_id_] != key || figure != best_score_) write_best(*pick);
      return;
    }
    if (!confirm(*pick)) return;  // stopping: decided on resume
  }
}

// Re-runs per confirmation: confirm_runs, doubled or tripled when the run's measured noise is
// high (the seed's re-timings spread over more than 8% of their median), so a noisy machine's
// best is a median of more runs rather than a lucky few.
int GoalTracker::confirmation_runs() const {
  if (!noise_ || noise_->spread <= 0.08) return cfg_.confirm_runs;
  const double ratio = noise_->spread / 0.08;
  return cfg_.confirm_runs * std::min(3, int(std::ceil(ratio * ratio)));
}

// Re-measures `rec` confirmation_runs() times, each run followed by one of the incumbent best, and
// promotes it iff every re-run is correct and its median beats the incumbent's. Stored as a
// Confirmation; the estimates of both programs follow. False when a stop cut it short.
bool GoalTracker::confirm(const ProgramRecord& rec) {
  std::optional<ProgramRecord> incumbent;
  if (!best_id_.empty() && best_id_ != rec.id) incumbent = parts_.db.get(best_id_);
  if (incumbent && hash_hex(incumbent->code) == hash_hex(rec.code)) incumbent.reset();
  Confirmation c;
  c.id = rec.id;
  c.code_hash = hash_hex(rec.code);
  c.first = rec.combined_score;
  if (incumbent) {
    c.against = incumbent->id;
    c.against_hash = hash_hex(incumbent->code);
  }
  std::string failed;
  auto once = [&](const ProgramRecord& who, const std::string& label) -> std::optional<double> {
    const auto folder = parts_.results / "remeasure" / label;
    EvalResult r = parts_.remeasure(who.code, label, folder);
    if (!(r.correct && r.failure == FailureKind::Ok)) {
      if (&who == &rec)
        failed = fmt::format("re-run {} {}: {}", label, to_string(r.failure), r.error_text.substr(0, 300));
      return std::nullopt;
    }
    std::error_code ec;
    std::filesystem::remove_all(folder, ec);  // kept only when a re-run failed
    return r.combined_score;
  };
  const int runs = confirmation_runs();
  for (int k = 1; k <= runs && failed.empty(); ++k) {
    if (parts_.stopping()) return false;
    if (auto v = once(rec, fmt::format("{}-trust{}", rec.id, k))) c.samples.push_back(*v);
    else break;
    if (incumbent)
      if (auto v = once(*incumbent, fmt::format("{}-vs-{}-{}", incumbent->id, rec.id, k)))
        c.against_samples.push_back(*v);
  }
  if (parts_.stopping()) return false;
  if (!failed.empty()) c.why = failed;
  const double mine = c.estimate(), theirs = c.against_samples.empty() ? 0.0 : median(c.against_samples);
  c.promoted = c.why.empty() && (c.against_samples.empty() || mine > theirs);
  if (c.why.empty())
    c.why = c.against_samples.empty() ? fmt::format("median {:.4g}", mine)
                                      : fmt::format("median {:.4g} vs incumbent {} {:.4g}", mine, c.against, theirs);
  c.created_at = now_s();
  parts_.confirmations.store(c);
  log::info("{} {} after {} re-runs (first measured {:.4g}): {}", rec.id,
            c.promoted ? "confirmed as the new best" : "not promoted", c.samples.size(), c.first, c.why);
  follow_estimates({c.code_hash, c.against_hash});
  return true;  // settle_best writes best/ with the refreshed figures
}

// The estimates are read again; every copy in the population of a program text named (all
// when none is) takes its text's estimate.
void GoalTracker::follow_estimates(const std::vector<std::string>& code_hashes) {
  estimates_ = estimates_by_code(parts_.confirmations.load());
  for (std::size_t i = 0; i < pop_.size(); ++i) {
    const std::string id = pop_.at(i).id;
    auto h = code_hash_of_.find(id);
    if (h == code_hash_of_.end()) continue;
    if (!code_hashes.empty() && std::find(code_hashes.begin(), code_hashes.end(), h->second) == code_hashes.end())
      continue;
    if (auto e = estimates_.find(h->second); e != estimates_.end()) pop_.set_score(id, e->second.score);
  }
}

void GoalTracker::measure_noise(const std::vector<std::string>& seed_ids) {
  if (cfg_.noise_runs == 0 || noise_ || seed_ids.empty()) return;
  std::optional<ProgramRecord> seed;
  for (const auto& id : seed_ids)
    if (!id.empty() && (seed = parts_.db.get(id)) && seed->correct) break;
  if (!seed || !seed->correct) return;
  Confirmation c;
  c.id = seed->id;
  c.code_hash = hash_hex(seed->code);
  c.first = seed->combined_score;
  for (int k = 1; k <= cfg_.noise_runs; ++k) {
    if (parts_.stopping()) return;
    const std::string label = fmt::format("{}-noise{}", seed->id, k);
    EvalResult r = parts_.remeasure(seed->code, label, parts_.results / "remeasure" / label);
    // A stop (Ctrl-C, or its jobs cancelled) mid re-run is not the seed's fault.
    if (parts_.stopping()) return;
    if (!(r.correct && r.failure == FailureKind::Ok))
      throw UserError(parts_.program.string(),
                      fmt::format("the seed program passed its evaluation but failed re-run {} ({}): {}", k,
                                  to_string(r.failure), r.error_text.substr(0, 800)));
    std::error_code ec;
    std::filesystem::remove_all(parts_.results / "remeasure" / label, ec);
    c.samples.push_back(r.combined_score);
  }
  NoiseLevel n;
  n.id = seed->id;
  n.samples = c.samples;
  n.samples.insert(n.samples.begin(), seed->combined_score);
  n.median = median(n.samples);
  n.spread = relative_spread(n.samples);
  c.promoted = true;
  c.why = "seed re-timed";
  c.created_at = now_s();
  parts_.confirmations.store(c);
  parts_.db.set_meta("noise", n.to_json().dump());
  noise_ = n;
  log::info("{}", n.describe());
  follow_estimates({});
}

// stop_when: the first correct candidate (in generation order) that meets the goal ends the run;
// with `confirm` re-runs, only once they agree (confirm_target).
void GoalTracker::check_target(const ProgramRecord& rec) {
  const StopWhen& w = cfg_.stop_when;
  if (target_reached_ || !w.enabled() || rec.failure != FailureKind::Ok ||
      origin_from(rec.patch_type) == Origin::Migrant)
    return;
  if (!w.met(rec.combined_score, rec.public_metrics)) return;
  double v = *w.value(rec.combined_score, rec.public_metrics);
  json info = {
      {"metric", w.metric}, {"value", v}, {"goal", w.describe()}, {"id", rec.id}, {"generation", rec.generation}};
  if (w.confirm > 0) {
    auto runs = confirm_target(rec, v);
    if (!runs) return;
    v = median(*runs);
    info["value"] = v;
    info["runs"] = *runs;
  }
  target_reached_ = true;
  target_note_ = describe_target(w.metric, v, w.describe(), rec.id, rec.generation);
  log::info("{}; no new candidates are proposed", target_note_);
  parts_.db.set_meta("target_reached", info.dump());
}

// Evaluates a candidate that met the goal `confirm` more times, with fresh inputs (new seeds),
// outside the population: re-runs are measurements, not candidates. Returns every run's value
// when each re-run is correct and the median meets the goal; otherwise the program (by code) is
// recorded as refuted in meta target_refuted, so copies and a resume do not try it again.
std::optional<std::vector<double>> GoalTracker::confirm_target(const ProgramRecord& rec, double first) {
  const StopWhen& w = cfg_.stop_when;
  const std::string key = hash_hex(rec.code);
  if (refuted_.contains(key)) return std::nullopt;
  std::vector<double> runs{first};
  std::string why;
  for (int k = 1; k <= w.confirm && why.empty(); ++k) {
    EvalResult res = parts_.remeasure(rec.code, fmt::format("{}-confirm{}", rec.id, k),
                                      parts_.results / fmt::format("confirm_{}_{}", rec.id, k));
    std::optional<double> v;
    if (res.correct && res.failure == FailureKind::Ok) v = w.value(res.combined_score, res.public_metrics);
    if (v) runs.push_back(*v);
    else
      why = fmt::format("re-run {}: {}", k,
                        res.failure == FailureKind::Ok ? "no " + w.metric : std::string(to_string(res.failure)));
    log::info("confirming {} ({}): re-run {}/{} -> {}", rec.id, w.describe(), k, w.confirm,
              v ? fmt::format("{:.4g}", *v) : why);
  }
  if (why.empty() && w.met_value(median(runs))) return runs;
  if (parts_.stopping()) return std::nullopt;  // a stop: decided on resume
  if (why.empty()) why = fmt::format("median {:.4g}", median(runs));
  refuted_[key] = {{"id", rec.id}, {"generation", rec.generation}, {"runs", runs}, {"why", why}};
  log::info("{} met {} in its evaluation but not on re-runs ({}); the search goes on", rec.id, w.describe(), why);
  parts_.db.set_meta("target_refuted", refuted_.dump());
  settle_best();
  return std::nullopt;
}

// best/ and meta "best": the program with its trusted figure (the median of its re-runs) and
// the single measurement of its evaluation beside it.
void GoalTracker::write_best(const ProgramRecord& rec) {
  const std::string key = hash_hex(rec.code);
  const bool confirmed = trusted(key);
  best_id_ = rec.id;
  best_score_ = confirmed ? estimates_.at(key).score : rec.combined_score;
  const std::vector<double> samples = confirmed ? estimates_.at(key).samples : std::vector<double>{rec.combined_score};
  json best = {
      {"id", rec.id},           {"score", best_score_}, {"first", rec.combined_score},       {"confirmed", confirmed},
      {"runs", samples.size()}, {"samples", samples},   {"spread", relative_spread(samples)}};
  if (noise_) best["noise"] = noise_->to_json();
  auto dir = parts_.results / "best";
  std::filesystem::create_directories(dir);
  write_file_atomic(dir / ("program" + parts_.program.extension().string()), rec.code);
  json info = {{"id", rec.id},
               {"generation", rec.generation},
               {"island", rec.island_idx},
               {"combined_score", best_score_},
               {"first_measurement", rec.combined_score},
               {"confirmed", confirmed},
               {"runs", samples},
               {"public", rec.public_metrics},
               {"text_feedback", rec.text_feedback}};
  write_file_atomic(dir / "metrics.json", info.dump(2));
  parts_.db.set_meta("best", best.dump());
}

void GoalTracker::write_best_feedback() {
  if (best_id_.empty()) return;
  const std::optional<ProgramRecord> rec = parts_.db.get(best_id_);
  const auto path = parts_.results / "best" / "metrics.json";
  const std::optional<std::string> text = try_read_file(path);
  if (!rec || rec->text_feedback.empty() || !text) return;
  json info = json::parse(*text, nullptr, false);
  if (info.is_discarded() || info.value("id", std::string()) != best_id_ ||
      info.value("text_feedback", std::string()) == rec->text_feedback)
    return;
  info["text_feedback"] = rec->text_feedback;
  write_file_atomic(path, info.dump(2));
}

}  // namespace braid
