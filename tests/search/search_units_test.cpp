// Unit tests of the search's strategies: selection, archive, migration, schedule, config.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>

#include "braid/search/archive.hpp"
#include "braid/search/config.hpp"
#include "braid/search/migration.hpp"
#include "braid/search/population.hpp"
#include "braid/search/schedule.hpp"
#include "braid/search/selection.hpp"
#include "braid/util/error.hpp"

namespace braid {
namespace {
std::string fmt_id(int isl, int i) { return "i" + std::to_string(isl) + "p" + std::to_string(i); }

ProgramSummary prog(const std::string& id, int island, double score, bool correct = true) {
  ProgramSummary s;
  s.id = id;
  s.island_idx = island;
  s.combined_score = score;
  s.correct = correct;
  s.failure = correct ? FailureKind::Ok : FailureKind::VerifyFailed;
  s.patch_type = "diff";
  s.archive_cell = "cell:" + id;
  s.embedding = std::vector<float>(8, 0.0f);
  s.embedding[std::hash<std::string>{}(id) % 8] = 1.0f;
  return s;
}

std::map<std::string, int> histogram(const ParentSelector& sel, const Population& pop, int island, int draws) {
  std::mt19937_64 rng(42);
  std::map<std::string, int> h;
  for (int i = 0; i < draws; ++i) h[pop.at(*sel.select(pop, pop.ranked(island), rng)).id]++;
  return h;
}

TEST(Population, RanksCorrectProgramsBestFirstPerIsland) {
  Population pop;
  pop.add(prog("a", 0, 1.0));
  pop.add(prog("b", 0, 3.0));
  pop.add(prog("c", 1, 2.0));
  pop.add(prog("d", 0, 5.0, false));
  ASSERT_EQ(pop.ranked(0).size(), 2u);
  EXPECT_EQ(pop.at(pop.ranked(0)[0]).id, "b");
  EXPECT_EQ(pop.at(pop.ranked_all()[1]).id, "c");
  EXPECT_EQ(pop.failures().size(), 1u);
  EXPECT_TRUE(pop.ranked(7).empty());
}

TEST(Population, MaxSimilarityFindsNearest) {
  Population pop;
  pop.add(prog("a", 0, 1.0));
  std::string nearest;
  EXPECT_FLOAT_EQ(pop.max_similarity(pop.at(0).embedding, &nearest), 1.0f);
  EXPECT_EQ(nearest, "a");
}

TEST(Selection, PowerLawAlphaZeroIsUniform) {
  Population pop;
  for (int i = 0; i < 5; ++i) pop.add(prog("p" + std::to_string(i), 0, double(i)));
  SearchConfig c;
  c.exploitation_alpha = 0.0;
  auto sel = make_parent_selector(c);
  for (double p : sel->probabilities(pop, pop.ranked(0))) EXPECT_NEAR(p, 0.2, 1e-12);
  auto h = histogram(*sel, pop, 0, 20000);
  for (auto& [id, n] : h) EXPECT_NEAR(n / 20000.0, 0.2, 0.02) << id;
}

TEST(Selection, PowerLawLargerAlphaFavoursTheBest) {
  Population pop;
  for (int i = 0; i < 5; ++i) pop.add(prog("p" + std::to_string(i), 0, double(i)));
  SearchConfig c;
  c.exploitation_alpha = 1.0;
  auto p1 = make_parent_selector(c)->probabilities(pop, pop.ranked(0));
  c.exploitation_alpha = 3.0;
  auto p3 = make_parent_selector(c)->probabilities(pop, pop.ranked(0));
  EXPECT_GT(p1[0], p1[1]);
  EXPECT_GT(p3[0], p1[0]);
  EXPECT_NEAR(p1[0] / p1[1], 2.0, 1e-9);  // (1)^-1 / (2)^-1
}

TEST(Selection, WeightedSharpensWithLambdaAndPenalisesExpandedParents) {
  Population pop;
  for (int i = 0; i < 5; ++i) pop.add(prog("p" + std::to_string(i), 0, double(i)));
  SearchConfig c;
  c.parent_selection_strategy = "weighted";
  c.parent_selection_lambda = 1.0;
  auto soft = make_parent_selector(c)->probabilities(pop, pop.ranked(0));
  c.parent_selection_lambda = 20.0;
  auto sharp = make_parent_selector(c)->probabilities(pop, pop.ranked(0));
  EXPECT_GT(sharp[0], soft[0]);
  EXPECT_LT(sharp.back(), soft.back());
  // Give the best five children: its weight drops.
  for (int k = 0; k < 5; ++k) {
    auto child = prog("child" + std::to_string(k), 1, 0.0, false);
    child.parent_id = "p4";
    pop.add(child);
  }
  auto after = make_parent_selector(c)->probabilities(pop, pop.ranked(0));
  EXPECT_LT(after[0], sharp[0]);
}

TEST(Selection, BeamNeverLeavesItsBeam) {
  Population pop;
  for (int i = 0; i < 20; ++i) pop.add(prog("p" + std::to_string(i), 0, double(i)));
  SearchConfig c;
  c.parent_selection_strategy = "beam";
  c.num_beams = 3;
  auto h = histogram(*make_parent_selector(c), pop, 0, 3000);
  EXPECT_EQ(h.size(), 3u);
  for (auto& [id, n] : h) EXPECT_TRUE(id == "p19" || id == "p18" || id == "p17") << id;
}

TEST(Selection, EmptyIslandSelectsNothing) {
  Population pop;
  SearchConfig c;
  std::mt19937_64 rng(1);
  EXPECT_FALSE(make_parent_selector(c)->select(pop, pop.ranked(0), rng).has_value());
}

TEST(Archive, KeepsBestPerCellAndRespectsCapacity) {
  Population pop;
  Archive ar(3, 0.34);  // one elite slot
  auto a = prog("a", 0, 1.0);
  auto a2 = prog("a2", 0, 2.0);
  a2.archive_cell = a.archive_cell;  // same cell, better
  pop.add(a);
  EXPECT_EQ(ar.offer(pop, 0).added.size(), 1u);
  pop.add(a2);
  auto ch = ar.offer(pop, 1);
  EXPECT_EQ(ch.added, std::vector<std::string>{"a2"});
  EXPECT_EQ(ch.removed, std::vector<std::string>{"a"});
  EXPECT_FALSE(pop.at(0).in_archive);
  EXPECT_TRUE(pop.at(1).in_archive);
  pop.add(prog("b", 0, 5.0));
  ar.offer(pop, 2);
  pop.add(prog("c", 0, 3.0));
  ar.offer(pop, 3);
  EXPECT_EQ(ar.members().size(), 3u);
  // Full: a worse newcomer is refused, a better one displaces a non-elite member.
  pop.add(prog("d", 0, 0.5));
  EXPECT_TRUE(ar.offer(pop, 4).empty());
  pop.add(prog("e", 0, 4.0));
  auto ch2 = ar.offer(pop, 5);
  ASSERT_EQ(ch2.added.size(), 1u);
  ASSERT_EQ(ch2.removed.size(), 1u);
  EXPECT_NE(ch2.removed[0], "b");  // the elite stays
  EXPECT_EQ(ar.members().size(), 3u);
}

TEST(Archive, IncorrectProgramsNeverEnter) {
  Population pop;
  Archive ar(10, 0.3);
  pop.add(prog("bad", 0, 9.0, false));
  EXPECT_TRUE(ar.offer(pop, 0).empty());
}

TEST(Archive, InspirationsExcludeParentAndDoNotRepeat) {
  Population pop;
  Archive ar(10, 0.5);
  for (int i = 0; i < 6; ++i) {
    pop.add(prog("p" + std::to_string(i), 0, double(i)));
    ar.offer(pop, std::size_t(i));
  }
  std::mt19937_64 rng(3);
  for (int t = 0; t < 50; ++t) {
    auto ins = ar.sample_inspirations(pop, 4, "p5", rng);
    EXPECT_EQ(ins.size(), 4u);
    std::set<std::size_t> uniq(ins.begin(), ins.end());
    EXPECT_EQ(uniq.size(), ins.size());
    for (auto i : ins) EXPECT_NE(pop.at(i).id, "p5");
  }
}

TEST(Archive, CellsUseKnobVectorWhenPresent) {
  EXPECT_EQ(archive_cell_for("kA=1;kB=2", "whatever"), "knobs:kA=1;kB=2");
  EXPECT_EQ(archive_cell_for("", "int main(){}").rfind("code:", 0), 0u);
}

TEST(Migration, ElitistMovesTheBestShareToAnotherIsland) {
  Population pop;
  for (int isl = 0; isl < 3; ++isl)
    for (int i = 0; i < 10; ++i) pop.add(prog(fmt_id(isl, i), isl, double(i)));
  SearchConfig c;
  c.num_islands = 3;
  c.migration_rate = 0.2;
  std::mt19937_64 rng(5);
  auto moves = plan_migrations(c, pop, rng);
  ASSERT_EQ(moves.size(), 6u);  // 2 per island
  for (auto& m : moves) {
    const auto* p = pop.find(m.program_id);
    ASSERT_NE(p, nullptr);
    EXPECT_NE(p->island_idx, m.to_island);
    EXPECT_GE(p->combined_score, 8.0);  // the top two of their island
  }
}

TEST(Migration, DirectionalFollowsTheGraphAndSkipsCopiesAlreadyThere) {
  Population pop;
  for (int isl = 0; isl < 3; ++isl)
    for (int i = 0; i < 4; ++i) pop.add(prog(fmt_id(isl, i), isl, double(i)));
  SearchConfig c;
  c.num_islands = 3;
  c.migration_rate = 0.25;
  c.migration_strategy = "directional";
  c.migration_graph = {{0, 2}, {1, 2}};
  std::mt19937_64 rng(5);
  auto moves = plan_migrations(c, pop, rng);
  ASSERT_EQ(moves.size(), 2u);
  for (auto& m : moves) EXPECT_EQ(m.to_island, 2);
  // Once the copy is in island 2, it is not copied again.
  auto copy = prog("copy", 2, 3.0);
  copy.migrated_from = moves[0].program_id;
  copy.patch_type = "migrant";
  pop.add(copy);
  auto again = plan_migrations(c, pop, rng);
  for (auto& m : again) EXPECT_NE(m.program_id, moves[0].program_id);
}

TEST(Migration, RateZeroMovesNothing) {
  Population pop;
  pop.add(prog("a", 0, 1.0));
  SearchConfig c;
  c.num_islands = 2;
  c.migration_rate = 0.0;
  std::mt19937_64 rng(1);
  EXPECT_TRUE(plan_migrations(c, pop, rng).empty());
}

TEST(Schedule, PhasesAndPatchTypeFrequencies) {
  SearchConfig c;
  c.num_generations = 100;
  EXPECT_EQ(phase_of(c, 40), Phase::Explore);
  EXPECT_EQ(phase_of(c, 41), Phase::Exploit);
  std::map<PatchType, int> explore, exploit;
  std::mt19937_64 rng(9);
  for (int i = 0; i < 20000; ++i) {
    explore[plan_generation(c, 1, true, rng).patch_type]++;
    exploit[plan_generation(c, 99, true, rng).patch_type]++;
  }
  EXPECT_NEAR(explore[PatchType::Full] / 20000.0, 0.70, 0.02);
  EXPECT_NEAR(explore[PatchType::Cross] / 20000.0, 0.15, 0.02);
  EXPECT_NEAR(exploit[PatchType::Diff] / 20000.0, 0.25, 0.02);
  auto plan = plan_generation(c, 99, true, rng);
  if (plan.patch_type == PatchType::Full) EXPECT_DOUBLE_EQ(plan.temperature, 0.0);
  if (plan.patch_type == PatchType::Cross) EXPECT_DOUBLE_EQ(plan.temperature, 0.5);
  for (int i = 0; i < 500; ++i) EXPECT_NE(plan_generation(c, 1, false, rng).patch_type, PatchType::Cross);
}

TEST(Schedule, IslandsTakeTurnsAndRngIsDeterministic) {
  SearchConfig c;
  c.num_islands = 3;
  std::mt19937_64 rng(1);
  EXPECT_EQ(plan_generation(c, 1, true, rng).island, 0);
  EXPECT_EQ(plan_generation(c, 5, true, rng).island, 1);
  auto a = generation_rng(7, 12), b = generation_rng(7, 12), d = generation_rng(7, 13);
  EXPECT_EQ(a(), b());
  EXPECT_NE(generation_rng(7, 12)(), d());
}

class ConfigFile : public ::testing::Test {
 protected:
  std::filesystem::path write(const std::string& text) {
    auto p = std::filesystem::temp_directory_path() / ("braid_cfg_" + std::to_string(::getpid()) + "_" + std::to_string(n_++) + ".yaml");
    std::ofstream(p) << text;
    paths_.push_back(p);
    return p;
  }
  void TearDown() override {
    for (auto& p : paths_) std::filesystem::remove(p);
  }
  int n_ = 0;
  std::vector<std::filesystem::path> paths_;
};

TEST_F(ConfigFile, DefaultsMatchTheArchitectureTable) {
  SearchConfig c;
  EXPECT_EQ(c.num_generations, 50);
  EXPECT_EQ(c.num_islands, 4);
  EXPECT_DOUBLE_EQ(c.code_embed_sim_threshold, 0.995);
  EXPECT_EQ(c.meta_rec_interval, 10);
  EXPECT_DOUBLE_EQ(c.exploit.patch_type_probs[0], 0.60);
}

TEST_F(ConfigFile, OverridesKeysAndKeepsTheRest) {
  auto p = write("num_islands: 2\nparent_selection_strategy: beam\nexplore_temperatures: [0.1, 0.2, 0.3]\nmigration_graph: {0: [1]}\n");
  SearchConfig c = load_search_config(p);
  EXPECT_EQ(c.num_islands, 2);
  EXPECT_EQ(c.parent_selection_strategy, "beam");
  EXPECT_DOUBLE_EQ(c.explore.temperatures[2], 0.3);
  ASSERT_EQ(c.migration_graph.size(), 1u);
  EXPECT_EQ(c.archive_size, 100);
  // Round trip through the stored JSON form.
  SearchConfig back = search_config_from_json(c.to_json(), "stored");
  EXPECT_EQ(back.to_json(), c.to_json());
}

TEST_F(ConfigFile, UnknownKeyNamesFileAndKey) {
  auto p = write("num_islandz: 2\n");
  try {
    load_search_config(p);
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    EXPECT_EQ(e.file(), p.string());
    EXPECT_NE(std::string(e.what()).find("num_islandz"), std::string::npos);
  }
}

TEST_F(ConfigFile, WrongTypesAndRangesAreErrors) {
  EXPECT_THROW(load_search_config(write("num_islands: two\n")), UserError);
  EXPECT_THROW(load_search_config(write("exploitation_alpha: -1\n")), UserError);
  EXPECT_THROW(load_search_config(write("parent_selection_strategy: greedy\n")), UserError);
  EXPECT_THROW(load_search_config(write("explore_patch_type_probs: [1, 0]\n")), UserError);
  EXPECT_THROW(load_search_config(write("num_islands: [1\n")), UserError);  // malformed YAML
  EXPECT_THROW(load_search_config(write("migration_strategy: directional\n")), UserError);  // no graph
  EXPECT_THROW(load_search_config("/nonexistent/braid.yaml"), UserError);
}

// Issue #18: a drawn seed is >= 2^63 half of the time; it must survive YAML, the stored JSON of
// a run (resume) and never read back as negative.
TEST_F(ConfigFile, SeedsCoverTheWholeUint64Range) {
  SearchConfig c = load_search_config(write("seed: 18446744073709551615\n"));
  EXPECT_EQ(c.seed, 18446744073709551615ull);
  SearchConfig back = search_config_from_json(json::parse(c.to_json().dump()), "stored");
  EXPECT_EQ(back.seed, 18446744073709551615ull);
  c.seed = (1ull << 63) + 12345;
  EXPECT_EQ(search_config_from_json(json::parse(c.to_json().dump()), "stored").seed, (1ull << 63) + 12345);
  for (const char* bad : {"seed: -1\n", "seed: 18446744073709551616\n", "seed: 1.5\n"}) {
    try {
      load_search_config(write(bad));
      ADD_FAILURE() << bad << " accepted";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("'seed'"), std::string::npos) << e.what();
    }
  }
}

// Every integer key has a range, checked where it is read (no wrap on narrowing to int) and in
// validate() (values set from the command line); doubles must be finite.
TEST_F(ConfigFile, EveryNumberHasARange) {
  for (const char* bad : {"num_islands: 100000\n", "num_islands: 4294967297\n", "num_generations: 1000000000000\n",
                          "max_parallel_jobs: 0\n", "max_parallel_jobs: 100000\n", "archive_size: 0\n",
                          "num_beams: -3\n", "embedding_dims: 9000\n", "max_patch_attempts: 100000000\n",
                          "migration_graph: [[0, 4294967297]]\n", "exploitation_alpha: .inf\n",
                          "stop_when: {metric: combined_score, at_least: 1, confirm: 4294967297}\n"}) {
    try {
      load_search_config(write(bad));
      ADD_FAILURE() << bad << " accepted";
    } catch (const UserError& e) {
      std::string key = std::string(bad).substr(0, std::string(bad).find(':'));
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  }
  SearchConfig c;
  c.num_islands = 100000;
  EXPECT_THROW(validate(c, "command line"), UserError);
  EXPECT_THROW(check_int_config_value("num_generations", -1, "--generations"), UserError);
  EXPECT_THROW(check_int_config_value("max_parallel_jobs", 0, "--parallel"), UserError);
  try {
    check_int_config_value("num_generations", 2000000000, "--generations");
    ADD_FAILURE() << "2e9 generations accepted";
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("--generations: must be an integer between 0 and", 0), 0u) << e.what();
  }
  EXPECT_NO_THROW(check_int_config_value("num_generations", 0, "--generations"));
  EXPECT_NO_THROW(load_search_config(write("num_islands: 256\nnum_generations: 10000000\n")));
}

TEST_F(ConfigFile, StopWhenReadsAGoalOnAMetric) {
  SearchConfig c = load_search_config(write("stop_when: {metric: max_ratio_to_bound, at_most: 1.05}\n"));
  ASSERT_TRUE(c.stop_when.enabled());
  EXPECT_EQ(c.stop_when.describe(), "max_ratio_to_bound <= 1.05");
  EXPECT_TRUE(c.stop_when.met(0.9, json{{"max_ratio_to_bound", 1.02}}));
  EXPECT_TRUE(c.stop_when.met(0.9, json{{"max_ratio_to_bound", 1.05}}));
  EXPECT_FALSE(c.stop_when.met(2.0, json{{"max_ratio_to_bound", 1.08}}));
  EXPECT_FALSE(c.stop_when.met(2.0, json{{"other", 1.0}}));  // no such metric: not met
  EXPECT_FALSE(c.stop_when.met(2.0, json{{"max_ratio_to_bound", "1.0"}}));
  SearchConfig back = search_config_from_json(c.to_json(), "stored");
  EXPECT_EQ(back.stop_when.describe(), c.stop_when.describe());
  SearchConfig score = load_search_config(write("stop_when: {metric: combined_score, at_least: 3}\n"));
  EXPECT_TRUE(score.stop_when.met(3.0, json::object()));
  EXPECT_FALSE(score.stop_when.met(2.9, json::object()));
  EXPECT_FALSE(SearchConfig{}.stop_when.met(1e9, json::object()));
  SearchConfig confirmed = load_search_config(write("stop_when: {metric: max_ratio_to_bound, at_most: 1.05, confirm: 2}\n"));
  EXPECT_EQ(confirmed.stop_when.confirm, 2);
  EXPECT_EQ(confirmed.stop_when.describe(), "max_ratio_to_bound <= 1.05 (median of 3 runs)");
  EXPECT_TRUE(confirmed.stop_when.met_value(1.05));
  EXPECT_FALSE(confirmed.stop_when.met_value(1.051));
  EXPECT_EQ(search_config_from_json(confirmed.to_json(), "stored").stop_when.confirm, 2);
}

TEST_F(ConfigFile, StopWhenErrorsNameTheKey) {
  for (const char* bad : {"stop_when: 1.05\n", "stop_when: {at_most: 1}\n", "stop_when: {metric: x}\n",
                          "stop_when: {metric: x, at_most: 1, at_least: 0}\n", "stop_when: {metric: x, at_most: one}\n",
                          "stop_when: {metric: x, below: 1}\n", "stop_when: {metric: x, at_most: 1, confirm: -1}\n",
                          "stop_when: {metric: x, at_most: 1, confirm: 21}\n", "stop_when: {metric: x, at_most: 1, confirm: two}\n"}) {
    try {
      load_search_config(write(bad));
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("stop_when"), std::string::npos) << e.what();
    }
  }
}

TEST_F(ConfigFile, ExtraKeysRegisteredByOtherModulesAreAccepted) {
  register_extra_config_keys({"test_only_llm_key"});
  SearchConfig c = load_search_config(write("test_only_llm_key: 3\n"));
  EXPECT_EQ(c.llm["test_only_llm_key"], 3);
}

}  // namespace
}  // namespace braid
