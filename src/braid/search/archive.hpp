// MAP-Elites archive: at most one program per cell (the best correct one), at most
// archive_size cells. Cells: the knob vector where the program has knobs, else binned code
// features (see archive_cell_for). When full, a newcomer whose cell is new replaces the nearest
// (by embedding) non-elite member if it scores higher; the top elite_selection_ratio of the
// slots, by score, are never displaced, so the archive keeps both the best and the diverse.
#pragma once
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "braid/search/config.hpp"
#include "braid/search/population.hpp"

namespace braid {

std::string archive_cell_for(const std::string& knob_key, const std::string& code);

struct ArchiveChange {
  std::vector<std::string> added;
  std::vector<std::string> removed;
  bool empty() const { return added.empty() && removed.empty(); }
};

class Archive {
 public:
  Archive(int capacity, double elite_ratio) : capacity_(std::size_t(capacity)), elite_ratio_(elite_ratio) {}

  // Rebuild from the population's in_archive flags (resume).
  void load(const Population& pop);
  // Offer a newly inserted program (population index). Updates pop's flags.
  ArchiveChange offer(Population& pop, std::size_t idx);

  const std::vector<std::size_t>& members() const { return members_; }
  std::vector<std::size_t> elites(const Population& pop) const;  // best first
  // `n` inspirations, excluding `exclude_id`: a share elite_ratio of them from the elites,
  // the rest uniformly from the whole archive, without repeats.
  std::vector<std::size_t> sample_inspirations(const Population& pop, int n, const std::string& exclude_id,
                                               std::mt19937_64& rng) const;

 private:
  std::size_t elite_count() const;
  void remove_at(Population& pop, std::size_t pos, ArchiveChange& change);

  std::size_t capacity_;
  double elite_ratio_;
  std::vector<std::size_t> members_;
  std::unordered_map<std::string, std::size_t> cell_to_member_;  // cell -> population index
};

}  // namespace braid
