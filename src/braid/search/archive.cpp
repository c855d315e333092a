#include "braid/search/archive.hpp"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include <fmt/format.h>

namespace braid {

std::string archive_cell_for(const std::string& knob_key, const std::string& code) {
  if (!knob_key.empty()) return "knobs:" + knob_key;
  // Programs without knobs: log2-binned length, line count and loop count.
  std::size_t lines = std::count(code.begin(), code.end(), '\n');
  std::size_t loops = 0;
  for (std::size_t p = code.find("for"); p != std::string::npos; p = code.find("for", p + 3)) ++loops;
  auto bin = [](std::size_t x) { return int(std::log2(double(x) + 1.0)); };
  return fmt::format("code:len{}:lines{}:loops{}", bin(code.size()), bin(lines), bin(loops));
}

void Archive::load(const Population& pop) {
  members_.clear();
  cell_to_member_.clear();
  for (std::size_t i = 0; i < pop.size(); ++i) {
    if (!pop.at(i).in_archive) continue;
    members_.push_back(i);
    cell_to_member_[pop.at(i).archive_cell] = i;
  }
}

std::size_t Archive::elite_count() const {
  return std::size_t(std::ceil(elite_ratio_ * double(capacity_)));
}

std::vector<std::size_t> Archive::elites(const Population& pop) const {
  std::vector<std::size_t> sorted = members_;
  std::sort(sorted.begin(), sorted.end(), [&](std::size_t a, std::size_t b) {
    return pop.at(a).combined_score > pop.at(b).combined_score;
  });
  sorted.resize(std::min(sorted.size(), elite_count()));
  return sorted;
}

void Archive::remove_at(Population& pop, std::size_t pos, ArchiveChange& change) {
  std::size_t idx = members_[pos];
  cell_to_member_.erase(pop.at(idx).archive_cell);
  pop.set_in_archive(pop.at(idx).id, false);
  change.removed.push_back(pop.at(idx).id);
  members_.erase(members_.begin() + std::ptrdiff_t(pos));
}

ArchiveChange Archive::offer(Population& pop, std::size_t idx) {
  ArchiveChange change;
  const ProgramSummary& p = pop.at(idx);
  if (!p.correct || p.failure != FailureKind::Ok || p.in_archive) return change;

  if (auto it = cell_to_member_.find(p.archive_cell); it != cell_to_member_.end()) {
    if (pop.at(it->second).combined_score >= p.combined_score) return change;
    auto pos = std::find(members_.begin(), members_.end(), it->second) - members_.begin();
    remove_at(pop, std::size_t(pos), change);
  } else if (members_.size() >= capacity_) {
    // Crowding: displace the nearest non-elite member, if the newcomer is better.
    auto elite = elites(pop);
    std::unordered_set<std::size_t> protected_set(elite.begin(), elite.end());
    std::ptrdiff_t victim = -1;
    float best_sim = -2.0f;
    for (std::size_t m = 0; m < members_.size(); ++m) {
      std::size_t q = members_[m];
      if (protected_set.count(q)) continue;
      const auto& a = pop.at(q).embedding;
      float sim = 0.0f;
      if (a.size() == p.embedding.size())
        for (std::size_t d = 0; d < a.size(); ++d) sim += a[d] * p.embedding[d];
      if (sim > best_sim) {
        best_sim = sim;
        victim = std::ptrdiff_t(m);
      }
    }
    if (victim < 0 || pop.at(members_[std::size_t(victim)]).combined_score >= p.combined_score) return change;
    remove_at(pop, std::size_t(victim), change);
  }
  members_.push_back(idx);
  cell_to_member_[p.archive_cell] = idx;
  pop.set_in_archive(p.id, true);
  change.added.push_back(p.id);
  return change;
}

std::vector<std::size_t> Archive::sample_inspirations(const Population& pop, int n, const std::string& exclude_id,
                                                      std::mt19937_64& rng) const {
  std::vector<std::size_t> out;
  if (n <= 0) return out;
  std::unordered_set<std::size_t> taken;
  auto take = [&](std::vector<std::size_t> pool, std::size_t want) {
    std::shuffle(pool.begin(), pool.end(), rng);
    for (std::size_t i : pool) {
      if (out.size() >= want) break;
      if (pop.at(i).id == exclude_id || taken.count(i)) continue;
      taken.insert(i);
      out.push_back(i);
    }
  };
  std::size_t from_elites = std::size_t(std::lround(elite_ratio_ * n));
  take(elites(pop), from_elites);
  take(members_, std::size_t(n));
  return out;
}

}  // namespace braid
