#include "braid/search/confirmation.hpp"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "braid/search/remeasure.hpp"
#include "braid/util/error.hpp"
#include "braid/util/hash.hpp"

namespace braid {
namespace {

Confirmation from_record(ConfirmationRecord r) {
  return {std::move(r.id),      std::move(r.code_hash),       r.first,    std::move(r.samples), std::move(r.against),
          std::move(r.against_hash), std::move(r.against_samples), r.promoted, std::move(r.why),     r.created_at};
}

ConfirmationRecord to_record(const Confirmation& c) {
  return {c.id, c.code_hash, c.first, c.samples, c.against, c.against_hash, c.against_samples, c.promoted, c.why, c.created_at};
}

std::vector<Confirmation> from_records(std::vector<ConfirmationRecord> rows) {
  std::vector<Confirmation> out;
  out.reserve(rows.size());
  for (auto& r : rows) out.push_back(from_record(std::move(r)));
  return out;
}

}  // namespace

double relative_spread(const std::vector<double>& values) {
  if (values.size() < 2) return 0.0;
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  const double m = median(values);
  return m > 0 ? (*hi - *lo) / m : 0.0;
}

double Confirmation::estimate() const { return samples.empty() ? 0.0 : median(samples); }
double Confirmation::spread() const { return relative_spread(samples); }

void ensure_confirmation_table(ProgramDatabase& db) { db.ensure_confirmations_table(); }
void store_confirmation(ProgramDatabase& db, const Confirmation& c) { db.insert_confirmation(to_record(c)); }
std::vector<Confirmation> load_confirmations(const ProgramDatabase& db) { return from_records(db.confirmations()); }


std::unordered_map<std::string, Estimate> estimates_by_code(const std::vector<Confirmation>& all) {
  std::unordered_map<std::string, Estimate> out;
  for (const auto& c : all) {
    Estimate& e = out[c.code_hash];
    e.samples.insert(e.samples.end(), c.samples.begin(), c.samples.end());
    e.refuted = !c.promoted;
    e.score = e.samples.empty() ? 0.0 : median(e.samples);
    if (!c.against_hash.empty() && !c.against_samples.empty()) {
      Estimate& inc = out[c.against_hash];
      inc.samples.insert(inc.samples.end(), c.against_samples.begin(), c.against_samples.end());
      inc.score = median(inc.samples);
    }
  }
  return out;
}

std::string ReportedBest::describe() const {
  if (!confirmed) return fmt::format("{:.4g} (single measurement)", score);
  return fmt::format("{:.4g} (median of {} re-runs, spread {:.0f}%)", score, runs, spread * 100.0);
}

std::optional<ReportedBest> reported_best(const ProgramDatabase& db) {
  if (auto m = db.meta("best")) {
    json b = json::parse(*m, nullptr, false);
    if (b.is_object())
      if (auto rec = db.get(b.value("id", std::string()))) {
        ReportedBest r;
        r.record = std::move(*rec);
        r.score = b.value("score", r.record.combined_score);
        r.runs = b.value("runs", 1);
        r.spread = b.value("spread", 0.0);
        r.confirmed = b.value("confirmed", false);
        return r;
      }
  }
  // A run from before confirmations: the highest single measurement not refuted by stop_when.
  json refuted = json::parse(db.meta("target_refuted").value_or("{}"), nullptr, false);
  if (!refuted.is_object()) refuted = json::object();
  ProgramQuery q;
  q.correct = true;
  q.order_by = "score";
  q.limit = refuted.empty() ? 1 : -1;
  for (auto& row : db.query(q))
    if (!refuted.contains(hash_hex(row.code))) {
      ReportedBest r;
      r.score = row.combined_score;
      r.record = std::move(row);
      return r;
    }
  return std::nullopt;
}

std::vector<RankedCandidate> rank_by_trusted_score(const ProgramDatabase& db, int limit) {
  const auto estimates = estimates_by_code(load_confirmations(db));
  ProgramQuery q;
  q.correct = true;
  q.order_by = "score";
  std::vector<RankedCandidate> rows;
  std::set<std::string> seen;
  for (auto& r : db.query(q)) {
    const std::string key = hash_hex(r.code);
    if (!seen.insert(key).second) continue;  // copies: migrants, the seed on other islands
    RankedCandidate row;
    row.score = r.combined_score;
    if (auto it = estimates.find(key); it != estimates.end() && !it->second.samples.empty()) {
      row.score = it->second.score;
      row.runs = int(it->second.samples.size());
      row.spread = relative_spread(it->second.samples);
      row.confirmed = !it->second.refuted;
      row.refuted = it->second.refuted;
    } else if (it != estimates.end()) {
      row.score = 0.0;  // every re-run failed
      row.runs = 0;
      row.refuted = true;
    }
    row.record = std::move(r);
    rows.push_back(std::move(row));
  }
  std::stable_sort(rows.begin(), rows.end(), [](const RankedCandidate& a, const RankedCandidate& b) { return a.score > b.score; });
  if (limit >= 0 && int(rows.size()) > limit) rows.resize(std::size_t(limit));
  return rows;
}

json NoiseLevel::to_json() const {
  return {{"id", id}, {"samples", samples}, {"median", median}, {"spread", spread}};
}

std::string NoiseLevel::describe() const {
  return fmt::format("noise: seed re-timed {}x, spread {:.0f}% (median {:.4g})", samples.size(), spread * 100.0, median);
}

std::optional<NoiseLevel> noise_from_json(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  NoiseLevel n;
  n.id = j.value("id", std::string());
  for (const auto& v : j.value("samples", json::array()))
    if (v.is_number()) n.samples.push_back(v.get<double>());
  if (n.samples.empty()) return std::nullopt;
  n.median = j.value("median", median(n.samples));
  n.spread = j.value("spread", relative_spread(n.samples));
  return n;
}

std::optional<NoiseLevel> noise_level(const ProgramDatabase& db) {
  auto m = db.meta("noise");
  return m ? noise_from_json(*m) : std::nullopt;
}

std::string resolve_candidate_id(const ProgramDatabase& db, const std::string& prefix, const std::string& origin) {
  if (prefix.empty()) throw UserError(origin, "empty candidate id");
  const std::vector<std::string> ids = db.ids_with_prefix(prefix, 3);
  if (std::find(ids.begin(), ids.end(), prefix) != ids.end()) return prefix;
  if (ids.empty()) throw UserError(origin, "no candidate with id " + prefix);
  if (ids.size() > 1)
    throw UserError(origin, fmt::format("candidate id prefix {} is ambiguous ({}, {}{}): give more characters", prefix, ids[0],
                                        ids[1], ids.size() > 2 ? ", ..." : ""));
  return ids.front();
}

}  // namespace braid
