// In-memory index of every program of a run (the compact ProgramSummary), kept in step with the
// database: loaded once at start, extended on every insert. Selection, the archive and the
// novelty filter read it, so one generation's bookkeeping never scans the database.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "braid/db/record.hpp"

namespace braid {

// The compact view of a stored record.
ProgramSummary summary_of(const ProgramRecord& r);

class Population {
 public:
  void add(ProgramSummary s);
  void set_in_archive(const std::string& id, bool in);
  // Replaces a correct program's score by a trusted estimate (confirmed median) and re-ranks it,
  // so selection and the archive do not chase one lucky timing.
  void set_score(const std::string& id, double score);

  std::size_t size() const { return all_.size(); }
  const ProgramSummary& at(std::size_t i) const { return all_[i]; }
  const ProgramSummary* find(const std::string& id) const;

  // Correct programs of an island, best first (ties: older first).
  const std::vector<std::size_t>& ranked(int island) const;
  // Correct programs of every island, best first.
  const std::vector<std::size_t>& ranked_all() const { return ranked_all_; }
  // Failed candidates, newest last.
  const std::vector<std::size_t>& failures() const { return failures_; }
  // Children of a program (any outcome), for lineage-aware feedback.
  std::size_t children_count(const std::string& id) const;

  bool knob_key_seen(const std::string& key) const { return knob_keys_.count(key) > 0; }
  // Generations (>= 1) for which a proposed child is recorded (seeds and migrants excluded).
  bool generation_done(std::int64_t g) const { return done_generations_.count(g) > 0; }
  std::int64_t done_count() const { return std::int64_t(done_generations_.size()); }
  std::int64_t max_generation() const { return max_generation_; }

  // Highest cosine similarity of `embedding` to any stored program; -1 when none. `row_limit`
  // looks only at the first programs with an embedding (those added before a moment, see
  // embedding_rows()), so a proposal judged later still sees the population it was prepared on.
  float max_similarity(const std::vector<float>& embedding, std::string* nearest_id = nullptr,
                       std::size_t row_limit = SIZE_MAX) const;
  std::size_t embedding_rows() const { return embedding_owner_.size(); }

 private:
  void insert_ranked(std::vector<std::size_t>& v, std::size_t idx);

  std::vector<ProgramSummary> all_;
  std::unordered_map<std::string, std::size_t> by_id_;
  std::vector<std::vector<std::size_t>> ranked_by_island_;
  std::vector<std::size_t> ranked_all_;
  std::vector<std::size_t> failures_;
  std::unordered_map<std::string, std::size_t> children_;
  std::unordered_set<std::string> knob_keys_;
  std::unordered_set<std::int64_t> done_generations_;
  std::int64_t max_generation_ = -1;
  // Embeddings packed row after row for a cache-friendly scan.
  std::vector<float> embeddings_;
  std::size_t dims_ = 0;
  std::vector<std::size_t> embedding_owner_;
};

}  // namespace braid
