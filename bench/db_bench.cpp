// Benchmarks of the program database and the offline embedder, at the sizes a long run
// reaches (1k, 10k, 100k programs).
//
// The populated databases are built once (bulk insert in one transaction) and cached under
// $TMPDIR/braid_bench/, so later runs start at once; delete the folder to rebuild them.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>

#include <filesystem>
#include <random>
#include <string>

#include "braid/db/database.hpp"
#include "braid/embed/embedder.hpp"
#include "braid/util/hash.hpp"
#include "fixtures.hpp"

namespace braid {
namespace {

namespace fs = std::filesystem;
using namespace bench;

void BM_InsertOne(benchmark::State& state) {
  const std::int64_t programs = state.range(0);
  ProgramDatabase db(populated_db(programs));
  std::mt19937 rng(7);
  std::int64_t next = programs;
  for (auto _ : state) {
    state.PauseTiming();
    ProgramRecord r = bench_record(next++, rng);
    state.ResumeTiming();
    db.insert(r);
  }
  // Restore the cached database to its size for the next benchmark.
  db.delete_generations_from(programs);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_InsertOne)->Arg(1000)->Arg(10000)->Arg(100000)->Unit(benchmark::kMicrosecond);

void BM_Summaries(benchmark::State& state) {
  const std::int64_t programs = state.range(0);
  ProgramDatabase db(populated_db(programs));
  for (auto _ : state) {
    auto all = db.summaries();
    benchmark::DoNotOptimize(all.data());
    if (static_cast<std::int64_t>(all.size()) != programs) state.SkipWithError("wrong row count");
  }
  state.SetItemsProcessed(state.iterations() * programs);
}
BENCHMARK(BM_Summaries)->Arg(1000)->Arg(10000)->Arg(100000)->Unit(benchmark::kMillisecond);

void BM_Embed5KB(benchmark::State& state) {
  auto embedder = make_hashed_ngram_embedder(kDims);
  const std::string code = program_text(3, 5 * 1024);
  for (auto _ : state) {
    auto v = embedder->embed(code);
    benchmark::DoNotOptimize(v.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(code.size()));
}
BENCHMARK(BM_Embed5KB)->Unit(benchmark::kMicrosecond);

// The novelty check: one candidate against every stored embedding, keeping the maximum.
void BM_CosineScan(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  std::mt19937 rng(11);
  std::vector<std::vector<float>> stored;
  stored.reserve(n);
  for (std::size_t i = 0; i < n; ++i) stored.push_back(random_unit_vector(rng));
  const std::vector<float> query = random_unit_vector(rng);
  for (auto _ : state) {
    float best = -1.0f;
    for (const auto& v : stored) best = std::max(best, cosine(query, v));
    benchmark::DoNotOptimize(best);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(n));
}
BENCHMARK(BM_CosineScan)->Arg(1000)->Arg(10000)->Arg(100000)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace braid
