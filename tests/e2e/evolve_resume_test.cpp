// End to end: evolve the CPU example with the knob mutator, kill braid with SIGKILL at random
// moments, resume, and check that no evaluated candidate is lost or duplicated, the database is
// intact, and no candidate process is left running.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <random>
#include <set>

#include "e2e_support.hpp"

namespace braid::test {
namespace {

struct Db {
  sqlite3* h = nullptr;
  explicit Db(const std::filesystem::path& p) { sqlite3_open_v2(p.c_str(), &h, SQLITE_OPEN_READONLY, nullptr); }
  ~Db() { sqlite3_close(h); }
  long scalar(const std::string& sql) {
    sqlite3_stmt* st = nullptr;
    long v = -1;
    if (sqlite3_prepare_v2(h, sql.c_str(), -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
      v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
  }
  std::string text(const std::string& sql) {
    sqlite3_stmt* st = nullptr;
    std::string v;
    if (sqlite3_prepare_v2(h, sql.c_str(), -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
      v = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return v;
  }
};

const std::string kChildren = "FROM programs WHERE patch_type NOT IN ('seed','migrant')";

TEST(EvolveEndToEnd, SurvivesSigkillAtRandomMomentsAndResumes) {
  auto results = fresh_dir("e2e_kill");
  auto log = results.string() + ".log";
  std::filesystem::remove(log);
  const int generations = 14;
  std::mt19937 rng(20261121);
  // First start, then three resumes, each killed after a random delay.
  std::vector<long> counts;
  for (int round = 0; round < 4; ++round) {
    std::vector<std::string> args =
        round == 0 ? std::vector<std::string>{"evolve", "examples/matmul_cpu", "--results", results.string(), "--generations",
                                              std::to_string(generations), "--seed", "11", "-j", "2", "-c",
                                              "tests/e2e/fast_config.yaml"}
                   : std::vector<std::string>{"resume", results.string()};
    Proc p = start_braid(args, log);
    std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(700, 2500)(rng)));
    ::kill(p.pid, SIGKILL);
    wait_exit(p);
    if (std::filesystem::exists(results / "evolution.db")) {
      Db db(results / "evolution.db");
      counts.push_back(db.scalar("SELECT COUNT(*) " + kChildren));
    }
  }
  ASSERT_TRUE(std::filesystem::exists(results / "evolution.db")) << "braid never created its database; log: " << log;
  // Whatever was stored before a kill is still there after it.
  for (std::size_t i = 1; i < counts.size(); ++i) EXPECT_GE(counts[i], counts[i - 1]);

  auto done = run_braid({"resume", results.string()});
  ASSERT_EQ(done.code, 0) << done.output;

  Db db(results / "evolution.db");
  EXPECT_EQ(db.text("PRAGMA integrity_check"), "ok");
  EXPECT_EQ(db.scalar("SELECT COUNT(*) " + kChildren), generations);
  EXPECT_EQ(db.scalar("SELECT COUNT(DISTINCT generation) " + kChildren), generations);
  EXPECT_EQ(db.scalar("SELECT MIN(generation) " + kChildren), 1);
  EXPECT_EQ(db.scalar("SELECT MAX(generation) " + kChildren), generations);
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM programs WHERE patch_type='seed'"), 2);  // one per island
  EXPECT_GE(db.scalar("SELECT COUNT(*) FROM programs WHERE correct=1"), 3);
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM jobs"), 0);
  // Knob-only edits are novel by construction: no knob vector was evaluated twice.
  EXPECT_EQ(db.scalar("SELECT COUNT(*) - COUNT(DISTINCT knob_key) FROM programs WHERE knob_key != '' AND patch_type != 'seed'"), 0);
  // Meta summaries every 5 generations (fast_config.yaml).
  EXPECT_TRUE(std::filesystem::exists(results / "meta_memory.json"));
  EXPECT_TRUE(std::filesystem::exists(results / "meta_5.txt"));
  EXPECT_TRUE(std::filesystem::exists(results / "best" / "program.cpp"));
  // No candidate or compiler process survives braid.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(processes_mentioning(results.string()).empty());

  auto top = run_braid({"top", results.string(), "-n", "3"});
  EXPECT_EQ(top.code, 0);
  EXPECT_NE(top.output.find("rank"), std::string::npos);
  std::string best_id = db.text("SELECT id FROM programs WHERE correct=1 ORDER BY combined_score DESC LIMIT 1");
  auto show = run_braid({"show", results.string(), best_id});
  EXPECT_EQ(show.code, 0);
  EXPECT_NE(show.output.find("EVOLVE-BLOCK-START"), std::string::npos);
  auto out = results / "exported.cpp";
  auto exp = run_braid({"export", results.string(), "--best", "-o", out.string()});
  EXPECT_EQ(exp.code, 0) << exp.output;
  EXPECT_TRUE(std::filesystem::exists(out));
  std::filesystem::remove_all(results);
  std::filesystem::remove(log);
}

TEST(EvolveEndToEnd, ResumeOfAFinishedRunIsANoOp) {
  auto results = fresh_dir("e2e_done");
  auto first = run_braid({"evolve", "examples/matmul_cpu", "--results", results.string(), "--generations", "3", "--seed", "5",
                          "-c", "tests/e2e/fast_config.yaml"});
  ASSERT_EQ(first.code, 0) << first.output;
  long before;
  {
    Db db(results / "evolution.db");
    before = db.scalar("SELECT COUNT(*) FROM programs");
  }
  auto again = run_braid({"resume", results.string()});
  EXPECT_EQ(again.code, 0) << again.output;
  Db db(results / "evolution.db");
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM programs"), before);
  // A second evolve into the same folder is refused, naming the folder.
  auto clash = run_braid({"evolve", "examples/matmul_cpu", "--results", results.string()});
  EXPECT_EQ(clash.code, 2);
  EXPECT_NE(clash.output.find(results.string()), std::string::npos);
  std::filesystem::remove_all(results);
}

// stop_when: a goal the seed already meets ends the run before any child is proposed, says so,
// records which candidate met it, and a resume proposes nothing either.
TEST(EvolveEndToEnd, StopsWhenTheGoalIsMet) {
  auto results = fresh_dir("e2e_goal");
  auto cfg = std::filesystem::temp_directory_path() / ("braid_goal_" + std::to_string(::getpid()) + ".yaml");
  {
    std::ofstream out(cfg);
    out << "num_islands: 2\nmax_parallel_jobs: 2\nstop_when: {metric: combined_score, at_least: 0.01}\n";
  }
  auto o = run_braid({"evolve", "examples/matmul_cpu", "--results", results.string(), "--generations", "20", "--seed", "3", "-c",
                      cfg.string()});
  ASSERT_EQ(o.code, 0) << o.output;
  EXPECT_NE(o.output.find("target reached: combined_score"), std::string::npos) << o.output;
  {
    Db db(results / "evolution.db");
    EXPECT_EQ(db.scalar("SELECT COUNT(*) " + kChildren), 0);
    const std::string met = db.text("SELECT value FROM meta WHERE key='target_reached'");
    EXPECT_NE(met.find("\"generation\":0"), std::string::npos) << met;
  }
  auto again = run_braid({"resume", results.string()});
  EXPECT_EQ(again.code, 0) << again.output;
  auto top = run_braid({"top", results.string()});
  EXPECT_NE(top.output.find("goal combined_score >= 0.01 met by"), std::string::npos) << top.output;
  Db db(results / "evolution.db");
  EXPECT_EQ(db.scalar("SELECT COUNT(*) " + kChildren), 0);
  std::filesystem::remove(cfg);
  std::filesystem::remove_all(results);
}

// A private copy of tests/e2e/noisy_goal (its evaluator keeps per-program counts beside itself)
// and a search config with `stop_when: {metric: ratio, at_most: 1.05, confirm: 2}`; both
// removed at the end.
struct NoisyGoal {
  std::filesystem::path wl, cfg;
  explicit NoisyGoal(const std::string& name) {
    const auto tmp = std::filesystem::temp_directory_path();
    wl = tmp / ("braid_noisy_" + name + "_" + std::to_string(::getpid()));
    cfg = tmp / ("braid_noisy_" + name + "_" + std::to_string(::getpid()) + ".yaml");
    std::filesystem::remove_all(wl);
    std::filesystem::copy(std::filesystem::path(BRAID_SOURCE_DIR) / "tests/e2e/noisy_goal", wl, std::filesystem::copy_options::recursive);
    // The best-confirmation re-runs (confirm_runs) are off: this is the goal's own confirm.
    std::ofstream(cfg) << "num_islands: 2\nmax_parallel_jobs: 1\nconfirm_runs: 0\nnoise_runs: 0\nstop_when: {metric: ratio, at_most: 1.05, confirm: 2}\n";
  }
  ~NoisyGoal() {
    std::filesystem::remove(cfg);
    std::filesystem::remove_all(wl);
  }
  std::vector<std::string> evolve(const std::filesystem::path& results) const {
    return {"evolve", wl.string(), "--results", results.string(), "--generations", "30", "--seed", "5", "-c", cfg.string()};
  }
};

// stop_when with confirm: the seed (kSpeed 3) meets the goal in its evaluation but not on its two
// re-runs, so the search goes on; the first program whose re-runs agree (kSpeed 4) ends it. Re-runs
// are measurements, not candidates: the programs table holds only proposals.
TEST(EvolveEndToEnd, GoalIsReachedOnlyWhenReRunsAgree) {
  auto results = fresh_dir("e2e_confirm");
  NoisyGoal noisy("confirm");
  const auto& wl = noisy.wl;
  auto o = run_braid(noisy.evolve(results));
  ASSERT_EQ(o.code, 0) << o.output;
  EXPECT_NE(o.output.find("but not on re-runs (median 1.3)"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("target reached: ratio = 1 (ratio <= 1.05 (median of 3 runs))"), std::string::npos) << o.output;
  {
    Db db(results / "evolution.db");
    const std::string refuted = db.text("SELECT value FROM meta WHERE key='target_refuted'");
    EXPECT_NE(refuted.find("\"runs\":[1.0,1.3,1.3]"), std::string::npos) << refuted;
    const std::string met = db.text("SELECT value FROM meta WHERE key='target_reached'");
    EXPECT_NE(met.find("\"runs\":[1.0,1.0,1.0]"), std::string::npos) << met;
    const auto at = met.find("\"id\":\"");
    ASSERT_NE(at, std::string::npos) << met;
    const std::string id = met.substr(at + 6, met.find('"', at + 6) - at - 6);
    EXPECT_NE(db.text("SELECT code FROM programs WHERE id='" + id + "'").find("kSpeed = 4;"), std::string::npos);
    EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM programs WHERE id LIKE '%confirm%'"), 0);
  }
  // Each program that met the goal once was evaluated 1 + 2 times, once per program text
  // (the seed's copy on the second island is not re-run).
  int three = 0;
  for (const auto& f : std::filesystem::directory_iterator(wl / "state")) {
    std::ifstream in(f.path());
    int n = 0;
    in >> n;
    if (n == 3) ++three;
    EXPECT_LE(n, 3) << f.path();
  }
  EXPECT_EQ(three, 2);
  auto top = run_braid({"top", results.string()});
  EXPECT_NE(top.output.find("; runs 1, 1, 1)"), std::string::npos) << top.output;
  EXPECT_NE(top.output.find("not confirmed: "), std::string::npos) << top.output;
  EXPECT_NE(top.output.find("kSpeed=3  [not confirmed: median 1.3]"), std::string::npos) << top.output;  // its rows are marked
  // best/ and `export` give the best program whose score held up, not the lucky one.
  {
    std::ifstream in(results / "best" / "program.cpp");
    const std::string best((std::istreambuf_iterator<char>(in)), {});
    EXPECT_NE(best.find("kSpeed = 4;"), std::string::npos) << best;
  }
  auto exported = run_braid({"export", results.string()});
  EXPECT_NE(exported.output.find("kSpeed = 4;"), std::string::npos) << exported.output;
  const long before = Db(results / "evolution.db").scalar("SELECT COUNT(*) FROM programs");
  auto again = run_braid({"resume", results.string()});
  EXPECT_EQ(again.code, 0) << again.output;
  EXPECT_EQ(Db(results / "evolution.db").scalar("SELECT COUNT(*) FROM programs"), before);
  std::filesystem::remove_all(results);
}

// `braid rebench`: the best programs evaluated again with fresh inputs, ranked by the median; the
// lucky measurement (kSpeed 3) falls behind, the programs table is untouched, rounds count up.
TEST(EvolveEndToEnd, RebenchRanksTheBestByTheMedianOfFreshRuns) {
  auto results = fresh_dir("e2e_rebench");
  NoisyGoal noisy("rebench");
  ASSERT_EQ(run_braid(noisy.evolve(results)).code, 0);
  const long programs = Db(results / "evolution.db").scalar("SELECT COUNT(*) FROM programs");
  auto o = run_braid({"rebench", results.string(), "-n", "2", "--runs", "2"});
  ASSERT_EQ(o.code, 0) << o.output;
  EXPECT_NE(o.output.find("re-measured 2 program(s), 2 run(s) each with fresh inputs (round 1)"), std::string::npos) << o.output;
  const auto first = o.output.find("1 (was 1)"), second = o.output.find("1.3 (was 1)");
  ASSERT_NE(first, std::string::npos) << o.output;
  ASSERT_NE(second, std::string::npos) << o.output;
  EXPECT_LT(first, second) << o.output;  // kSpeed 4 first, the lucky kSpeed 3 second
  EXPECT_LT(o.output.find("kSpeed=4"), o.output.find("kSpeed=3")) << o.output;
  EXPECT_TRUE(std::filesystem::exists(results / "rebench.json"));
  {
    Db db(results / "evolution.db");
    EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM programs"), programs);
    EXPECT_NE(db.text("SELECT value FROM meta WHERE key='rebench'").find("\"round\":1"), std::string::npos);
  }
  auto again = run_braid({"rebench", results.string(), "-n", "1", "--runs", "1"});
  EXPECT_NE(again.output.find("(round 2)"), std::string::npos) << again.output;
  // Bad input: one line, exit 2, nothing measured.
  EXPECT_EQ(run_braid({"rebench", results.string(), "--runs", "0"}).code, 2);
  EXPECT_EQ(run_braid({"rebench", (std::filesystem::temp_directory_path() / "braid_no_such_run").string()}).code, 2);
  std::filesystem::remove_all(results);
}

// kill -9 while a goal's re-runs are under way: nothing is recorded for the unfinished
// confirmation, and `resume` confirms (or refutes) again before it proposes anything new, taking
// the re-run measured before the kill from the database instead of measuring it again.
TEST(EvolveEndToEnd, KillDuringGoalReRunsThenResume) {
  auto results = fresh_dir("e2e_confirm_kill");
  NoisyGoal noisy("kill");
  const auto& wl = noisy.wl;
  std::ofstream(wl / "slow") << "1";
  auto log = results.string() + ".log";
  std::filesystem::remove(log);
  Proc p = start_braid(noisy.evolve(results), log);
  // Kill once the seed's first re-run has been reported (the second one is then running).
  bool confirming = false;
  for (int i = 0; i < 200 && !confirming; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::ifstream in(log);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    confirming = text.find("re-run 1/2") != std::string::npos;
  }
  ::kill(p.pid, SIGKILL);
  wait_exit(p);
  ASSERT_TRUE(confirming) << "no re-run seen before the kill; log: " << log;
  {
    Db db(results / "evolution.db");
    EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM meta WHERE key IN ('target_reached', 'target_refuted')"), 0);
  }
  auto done = run_braid({"resume", results.string()});
  ASSERT_EQ(done.code, 0) << done.output;
  EXPECT_NE(done.output.find("target reached: ratio = 1"), std::string::npos) << done.output;
  EXPECT_NE(done.output.find("-confirm1: taken from the database"), std::string::npos) << done.output;
  Db db(results / "evolution.db");
  EXPECT_EQ(db.text("PRAGMA integrity_check"), "ok");
  EXPECT_GE(db.scalar("SELECT COUNT(*) FROM remeasurements WHERE label LIKE '%-confirm%'"), 2);
  EXPECT_NE(db.text("SELECT value FROM meta WHERE key='target_refuted'").find("\"runs\":[1.0,1.3,1.3]"), std::string::npos);
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM jobs"), 0);
  EXPECT_EQ(db.scalar("SELECT COUNT(*) - COUNT(DISTINCT knob_key) FROM programs WHERE patch_type != 'seed'"), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(processes_mentioning(wl.string()).empty());
  std::filesystem::remove(log);
  std::filesystem::remove_all(results);
}

}  // namespace
}  // namespace braid::test

namespace braid::test {
namespace {

// The same workload evaluated by a user's Python evaluate.py (CUCo/ShinkaEvolve contract).
TEST(EvolveEndToEnd, ExternalPythonEvaluator) {
  auto results = fresh_dir("e2e_external");
  auto o = run_braid({"evolve", "examples/matmul_cpu_external", "--results", results.string(), "--generations", "3",
                      "--seed", "4", "-c", "tests/e2e/fast_config.yaml"});
  ASSERT_EQ(o.code, 0) << o.output;
  Db db(results / "evolution.db");
  EXPECT_EQ(db.scalar("SELECT COUNT(*) " + kChildren), 3);
  EXPECT_GE(db.scalar("SELECT COUNT(*) FROM programs WHERE correct=1 AND combined_score > 0"), 1);
  std::filesystem::remove_all(results);
}

}  // namespace
}  // namespace braid::test
