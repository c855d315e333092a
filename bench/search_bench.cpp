// One generation's bookkeeping in the search, with 1k, 10k and 100k programs stored: parent
// selection, archive inspirations and top-k (records read back from the database), the novelty
// check (knob vector + embedding scan), the insert of the child, and the population and archive
// updates. Evaluation itself is excluded. Goal: < 10 ms at 10k, growing no faster than linearly.
#include <benchmark/benchmark.h>

#include "braid/db/database.hpp"
#include "braid/search/archive.hpp"
#include "braid/search/population.hpp"
#include "braid/search/selection.hpp"
#include "braid/util/hash.hpp"
#include "fixtures.hpp"

namespace braid {
namespace {

void BM_GenerationBookkeeping(benchmark::State& state) {
  const std::int64_t programs = state.range(0);
  ProgramDatabase db(bench::populated_db(programs));
  SearchConfig cfg;
  Population pop;
  for (auto& s : db.summaries()) pop.add(std::move(s));
  Archive archive(cfg.archive_size, cfg.elite_selection_ratio);
  for (std::size_t i = 0; i < pop.size(); ++i) archive.offer(pop, i);  // in memory only
  auto selector = make_parent_selector(cfg);
  std::mt19937 record_rng(11);
  std::mt19937_64 rng(5);
  std::int64_t next = programs;
  for (auto _ : state) {
    int island = int(next % cfg.num_islands);
    // Selection and inspirations, with their records loaded as the runner does.
    auto parent = selector->select(pop, pop.ranked(island), rng);
    const std::string& parent_id = pop.at(*parent).id;
    auto parent_rec = db.get(parent_id);
    auto ins = archive.sample_inspirations(pop, cfg.num_archive_inspirations, parent_id, rng);
    for (std::size_t i : ins) benchmark::DoNotOptimize(db.get(pop.at(i).id));
    for (std::size_t r = 0; r < std::size_t(cfg.num_top_k_inspirations) && r < pop.ranked_all().size(); ++r)
      benchmark::DoNotOptimize(db.get(pop.at(pop.ranked_all()[r]).id));
    // Novelty of the child, then its record.
    ProgramRecord child = bench::bench_record(next, record_rng);
    child.id = hash_hex("bookkeeping" + std::to_string(next));
    child.parent_id = parent_id;
    benchmark::DoNotOptimize(pop.knob_key_seen(child.knob_key));
    benchmark::DoNotOptimize(pop.max_similarity(child.embedding));
    db.insert(child);
    pop.add(summary_of(child));
    auto change = archive.offer(pop, pop.size() - 1);
    if (!change.empty()) db.set_in_archive({}, {});  // the runner's archive write (one transaction)
    ++next;
  }
  state.counters["programs"] = double(programs);
  // Leave the cached database as it was.
  db.delete_generations_from(programs);
}
BENCHMARK(BM_GenerationBookkeeping)->Arg(1000)->Arg(10000)->Arg(100000)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace braid
