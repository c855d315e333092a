#include "braid/search/population.hpp"

#include <algorithm>

#include "braid/program/origin.hpp"

namespace braid {

ProgramSummary summary_of(const ProgramRecord& r) {
  ProgramSummary s;
  s.id = r.id;
  s.parent_id = r.parent_id;
  s.patch_type = r.patch_type;
  s.migrated_from = r.migrated_from;
  s.generation = r.generation;
  s.island_idx = r.island_idx;
  s.combined_score = r.combined_score;
  s.correct = r.correct;
  s.failure = r.failure;
  s.knob_key = r.knob_key;
  s.archive_cell = r.archive_cell;
  s.in_archive = r.in_archive;
  s.embedding = r.embedding;
  return s;
}

void Population::insert_ranked(std::vector<std::size_t>& v, std::size_t idx) {
  // Best first; equal scores keep insertion order, so older programs rank first.
  auto pos = std::upper_bound(v.begin(), v.end(), idx, [this](std::size_t a, std::size_t b) {
    return all_[a].combined_score > all_[b].combined_score;
  });
  v.insert(pos, idx);
}

void Population::add(ProgramSummary s) {
  std::size_t idx = all_.size();
  by_id_[s.id] = idx;
  if (!s.knob_key.empty()) knob_keys_.insert(s.knob_key);
  if (!s.parent_id.empty()) children_[s.parent_id]++;
  if (s.generation >= 1 && is_proposed(s.patch_type)) done_generations_.insert(s.generation);
  max_generation_ = std::max(max_generation_, s.generation);
  if (!s.embedding.empty()) {
    if (dims_ == 0) dims_ = s.embedding.size();
    if (s.embedding.size() == dims_) {
      embeddings_.insert(embeddings_.end(), s.embedding.begin(), s.embedding.end());
      embedding_owner_.push_back(idx);
    }
  }
  all_.push_back(std::move(s));
  const auto& p = all_.back();
  if (p.correct && p.failure == FailureKind::Ok) {
    if (p.island_idx >= int(ranked_by_island_.size())) ranked_by_island_.resize(p.island_idx + 1);
    insert_ranked(ranked_by_island_[p.island_idx], idx);
    insert_ranked(ranked_all_, idx);
  } else {
    failures_.push_back(idx);
  }
}

void Population::set_in_archive(const std::string& id, bool in) {
  if (auto it = by_id_.find(id); it != by_id_.end()) all_[it->second].in_archive = in;
}

void Population::set_score(const std::string& id, double score) {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return;
  const std::size_t idx = it->second;
  ProgramSummary& p = all_[idx];
  if (!p.correct || p.failure != FailureKind::Ok || p.combined_score == score) {
    p.combined_score = score;
    return;
  }
  auto& island = ranked_by_island_[std::size_t(p.island_idx)];
  island.erase(std::find(island.begin(), island.end(), idx));
  ranked_all_.erase(std::find(ranked_all_.begin(), ranked_all_.end(), idx));
  p.combined_score = score;
  insert_ranked(island, idx);
  insert_ranked(ranked_all_, idx);
}

const ProgramSummary* Population::find(const std::string& id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &all_[it->second];
}

const std::vector<std::size_t>& Population::ranked(int island) const {
  static const std::vector<std::size_t> empty;
  if (island < 0 || island >= int(ranked_by_island_.size())) return empty;
  return ranked_by_island_[island];
}

std::size_t Population::children_count(const std::string& id) const {
  auto it = children_.find(id);
  return it == children_.end() ? 0 : it->second;
}

float Population::max_similarity(const std::vector<float>& e, std::string* nearest_id, std::size_t row_limit) const {
  if (dims_ == 0 || e.size() != dims_) return -1.0f;
  float best = -1.0f;
  std::size_t best_row = 0;
  const std::size_t rows = std::min(row_limit, embedding_owner_.size());
  const float* data = embeddings_.data();
  for (std::size_t r = 0; r < rows; ++r) {
    const float* row = data + r * dims_;
    float dot = 0.0f;
    for (std::size_t d = 0; d < dims_; ++d) dot += row[d] * e[d];
    if (dot > best) {
      best = dot;
      best_row = r;
    }
  }
  if (nearest_id && rows > 0) *nearest_id = all_[embedding_owner_[best_row]].id;
  return best;
}

}  // namespace braid
