// The pieces behind a trusted best: confirmations stored and read back (and absent in a run from
// before), estimates per program text, re-ranking by them, id prefixes, and evaluations kept
// apart when the bench is exclusive.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "braid/db/database.hpp"
#include "braid/search/confirmation.hpp"
#include "braid/search/exclusive_bench.hpp"
#include "braid/search/population.hpp"
#include "braid/util/error.hpp"
#include "braid/util/hash.hpp"

namespace braid {
namespace {

std::filesystem::path fresh_db(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("braid_confirm_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir / "evolution.db";
}

ProgramRecord program(const std::string& id, const std::string& code, double score) {
  ProgramRecord r;
  r.id = id;
  r.code = code;
  r.combined_score = score;
  r.correct = true;
  r.patch_type = "diff";
  r.generation = 1;
  return r;
}

TEST(Confirmation, SpreadAndEstimate) {
  EXPECT_EQ(relative_spread({2.0}), 0.0);
  EXPECT_DOUBLE_EQ(relative_spread({1.0, 2.0, 1.5}), (2.0 - 1.0) / 1.5);
  Confirmation c;
  c.samples = {1.2, 1.0, 1.4};
  EXPECT_DOUBLE_EQ(c.estimate(), 1.2);
  c.samples.clear();
  EXPECT_EQ(c.estimate(), 0.0);  // every re-run failed
}

// Estimates follow every re-run of a text, as candidate or as incumbent; the latest verdict on a
// candidate decides whether it is refuted.
TEST(Confirmation, EstimatesByProgramText) {
  Confirmation a;
  a.code_hash = "A";
  a.samples = {1.0, 1.0, 1.0};
  a.promoted = true;
  Confirmation b;
  b.code_hash = "B";
  b.samples = {1.2, 1.2, 1.2};
  b.against_hash = "A";
  b.against_samples = {1.5, 1.5, 1.5};
  b.promoted = false;
  auto e = estimates_by_code({a, b});
  EXPECT_EQ(e.at("A").samples.size(), 6u);
  EXPECT_DOUBLE_EQ(e.at("A").score, 1.25);
  EXPECT_FALSE(e.at("A").refuted);
  EXPECT_DOUBLE_EQ(e.at("B").score, 1.2);
  EXPECT_TRUE(e.at("B").refuted);
}

TEST(Confirmation, StoredReadBackAndRankedByTrustedScore) {
  const auto path = fresh_db("store");
  ProgramDatabase db(path);
  // A database from before confirmations: no table, the single measurement, said so.
  db.insert(program("aaaa1111", "// lucky\n", 5.0));
  db.insert(program("aaaa2222", "// steady\n", 2.0));
  db.insert(program("bbbb3333", "// slow\n", 1.0));
  EXPECT_TRUE(load_confirmations(db).empty());
  auto old_best = reported_best(db);
  ASSERT_TRUE(old_best);
  EXPECT_EQ(old_best->record.id, "aaaa1111");
  EXPECT_FALSE(old_best->confirmed);
  EXPECT_EQ(old_best->describe(), "5 (single measurement)");

  ensure_confirmation_table(db);
  ensure_confirmation_table(db);  // idempotent (resume)
  Confirmation c;
  c.id = "aaaa1111";
  c.code_hash = hash_hex("// lucky\n");
  c.first = 5.0;
  c.samples = {1.2, 1.3, 1.1};
  c.against = "aaaa2222";
  c.against_hash = hash_hex("// steady\n");
  c.against_samples = {2.0, 2.1, 1.9};
  c.promoted = false;
  c.why = "median 1.2 vs incumbent 2";
  store_confirmation(db, c);
  auto back = load_confirmations(db);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].samples, c.samples);
  EXPECT_EQ(back[0].against_samples, c.against_samples);
  EXPECT_EQ(back[0].why, c.why);
  EXPECT_FALSE(back[0].promoted);

  auto rows = rank_by_trusted_score(db, 10);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].record.id, "aaaa2222");
  EXPECT_DOUBLE_EQ(rows[0].score, 2.0);
  EXPECT_TRUE(rows[0].confirmed);
  EXPECT_EQ(rows[0].runs, 3);
  EXPECT_EQ(rows[1].record.id, "aaaa1111");
  EXPECT_DOUBLE_EQ(rows[1].score, 1.2);
  EXPECT_TRUE(rows[1].refuted);
  EXPECT_EQ(rows[2].runs, 1);
  EXPECT_FALSE(rows[2].confirmed);

  db.set_meta("best", R"({"id": "aaaa2222", "score": 2.0, "runs": 3, "spread": 0.1, "confirmed": true})");
  auto best = reported_best(db);
  ASSERT_TRUE(best);
  EXPECT_EQ(best->record.id, "aaaa2222");
  EXPECT_EQ(best->describe(), "2 (median of 3 re-runs, spread 10%)");

  db.set_meta("noise", NoiseLevel{"s", {1.0, 1.1, 0.9}, 1.0, 0.2}.to_json().dump());
  auto noise = noise_level(db);
  ASSERT_TRUE(noise);
  EXPECT_EQ(noise->describe(), "noise: seed re-timed 3x, spread 20% (median 1)");
  std::filesystem::remove_all(path.parent_path());
}

TEST(Confirmation, UniqueIdPrefixes) {
  const auto path = fresh_db("prefix");
  ProgramDatabase db(path);
  db.insert(program("aaaa1111", "// a\n", 1.0));
  db.insert(program("aaaa2222", "// b\n", 1.0));
  db.insert(program("bbbb3333", "// c\n", 1.0));
  EXPECT_EQ(resolve_candidate_id(db, "aaaa1111", "run"), "aaaa1111");
  EXPECT_EQ(resolve_candidate_id(db, "aaaa2", "run"), "aaaa2222");
  EXPECT_EQ(resolve_candidate_id(db, "b", "run"), "bbbb3333");
  EXPECT_THROW(resolve_candidate_id(db, "aaaa", "run"), UserError);
  EXPECT_THROW(resolve_candidate_id(db, "c", "run"), UserError);
  EXPECT_THROW(resolve_candidate_id(db, "", "run"), UserError);
  EXPECT_THROW(resolve_candidate_id(db, "%", "run"), UserError);  // no pattern characters
  std::filesystem::remove_all(path.parent_path());
}

TEST(Confirmation, PopulationReRanksByTrustedScore) {
  Population pop;
  auto add = [&](const std::string& id, double score) {
    ProgramSummary s;
    s.id = id;
    s.combined_score = score;
    s.correct = true;
    pop.add(s);
  };
  add("seed", 1.0);
  add("lucky", 5.0);
  add("steady", 2.0);
  EXPECT_EQ(pop.at(pop.ranked_all().front()).id, "lucky");
  pop.set_score("lucky", 1.2);
  ASSERT_EQ(pop.ranked_all().size(), 3u);
  EXPECT_EQ(pop.at(pop.ranked_all()[0]).id, "steady");
  EXPECT_EQ(pop.at(pop.ranked_all()[1]).id, "lucky");
  EXPECT_EQ(pop.at(pop.ranked(0)[2]).id, "seed");
  EXPECT_DOUBLE_EQ(pop.find("lucky")->combined_score, 1.2);
}

// Counts evaluations in progress at once; a barrier-free check: each evaluation yields for a
// while, so overlapping calls would see each other.
class CountingEvaluator : public Evaluator {
 public:
  EvalResult evaluate(const EvalRequest&, const JobObserver&) override {
    const int now = ++running_;
    int seen = max_.load();
    while (now > seen && !max_.compare_exchange_weak(seen, now)) {
    }
    for (int i = 0; i < 200; ++i) std::this_thread::yield();
    --running_;
    return {};
  }
  std::string describe() const override { return "counting"; }
  std::atomic<int> running_{0}, max_{0};
};

TEST(ExclusiveBench, CascadeAndExternalEvaluationsNeverOverlapByDefault) {
  EXPECT_TRUE(evaluations_exclusive(json{{"kind", "cascade"}}));
  EXPECT_TRUE(evaluations_exclusive(json{{"kind", "external"}, {"bench_exclusive", true}}));
  EXPECT_FALSE(evaluations_exclusive(json{{"kind", "cascade"}, {"bench_exclusive", false}}));
  EXPECT_FALSE(evaluations_exclusive(json{{"kind", "gpu"}, {"bench_exclusive", true}}));  // the GPU pool does it

  auto counting = std::make_unique<CountingEvaluator>();
  CountingEvaluator* raw = counting.get();
  auto wrapped = with_exclusive_bench(std::move(counting), json{{"kind", "cascade"}});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) wrapped->evaluate({}, {});
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(raw->max_.load(), 1);
  EXPECT_NE(wrapped->describe().find("one at a time"), std::string::npos);
}

}  // namespace
}  // namespace braid
