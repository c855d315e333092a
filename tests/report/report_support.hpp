// Synthetic runs for report/serve tests, written through the real ProgramDatabase: a seed per
// island, then children of random earlier candidates (a deep, bushy lineage), failures of
// every kind, ratio_to_bound metrics, meta files. One candidate carries hostile text.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>

#include "braid/db/database.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/hash.hpp"

#include <gtest/gtest.h>

namespace braid::test {

// Text that breaks out of HTML, script and attribute contexts when not escaped.
inline const std::string kHostileCode =
    "// EVOLVE-BLOCK-START kernel\n"
    "const char* s = \"</script><script>window.__pwned = 1</script>\";\n"
    "// <img src=x onerror=\"window.__pwned=2\"> &amp; &lt;b&gt; \" ' &#60;\n"
    "constexpr int kChunks = 4;  // braid:knob 1|2|4|8\n"
    "// EVOLVE-BLOCK-END\n";
inline const std::string kHostileFeedback = "<b>bold?</b> </pre><script>window.__pwned=3</script> &copy;";

inline std::string program_text(int chunks, int unroll, std::size_t pad_bytes) {
  std::string code =
      "// EVOLVE-BLOCK-START kernel\n"
      "constexpr int kChunks = " + std::to_string(chunks) + ";  // braid:knob 1|2|4|8\n"
      "constexpr int kUnroll = " + std::to_string(unroll) + ";  // braid:knob 1|2|4\n"
      "// EVOLVE-BLOCK-END\n";
  // Frozen harness text, so rows have the size of real candidates.
  int line = 0;
  while (code.size() < pad_bytes) code += "static inline int harness_line_" + std::to_string(line++) + "(int x) { return x * 3 + 1; }\n";
  return code;
}

// An empty results folder of this process, removed after the test (runs whose meta the test writes).
class EmptyRunDir : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("braid_" + std::string(info->test_suite_name()) + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

struct SyntheticRun {
  std::filesystem::path dir;
  std::string best_id;
  std::string hostile_id;
  std::string seed_id;
};

// `n` candidates over `islands` islands, each about `code_bytes` long.
inline SyntheticRun make_synthetic_run(const std::filesystem::path& dir, int n, int islands = 4,
                                       std::size_t code_bytes = 3000, bool hostile = true) {
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  SyntheticRun run{dir, "", "", ""};
  ProgramDatabase db(dir / "evolution.db");
  std::mt19937_64 rng(42);
  std::vector<std::vector<std::string>> by_island(static_cast<std::size_t>(islands));
  double best = -1;
  const FailureKind kinds[] = {FailureKind::BuildFailed, FailureKind::RunFailed, FailureKind::Timeout,
                               FailureKind::VerifyFailed, FailureKind::BenchFailed, FailureKind::Rejected};
  double t0 = 1.7e9;
  std::vector<std::string> archive;
  for (int i = 0; i < n; ++i) {
    ProgramRecord r;
    r.id = hash_hex("synthetic" + std::to_string(i) + dir.string());
    bool seed = i < islands;
    r.generation = seed ? 0 : i - islands + 1;
    if (seed) {
      r.island_idx = i;
      r.patch_type = "seed";
    } else {
      // Islands take turns, as in the search; parents come from the same island, mostly
      // recent ones (deep lineages), sometimes old ones (branching).
      r.island_idx = i % islands;
      const auto& pool = by_island[static_cast<std::size_t>(r.island_idx)];
      std::size_t back = (rng() % 4 == 0) ? rng() % pool.size() : std::min<std::size_t>(pool.size() - 1, rng() % 5);
      r.parent_id = pool[pool.size() - 1 - back];
      r.parent_ids = {r.parent_id};
      r.patch_type = i % 5 == 0 ? "full" : "diff";
    }
    int chunks = 1 << (i % 4), unroll = 1 << (i % 3);
    r.code = program_text(chunks, unroll, code_bytes);
    r.knob_key = "kChunks=" + std::to_string(chunks) + ";kUnroll=" + std::to_string(unroll);
    r.archive_cell = "knobs:" + r.knob_key;
    r.code_diff = seed ? "" : "<<<<<<< SEARCH\nconstexpr int kChunks = 1;\n=======\nconstexpr int kChunks = " + std::to_string(chunks) + ";\n>>>>>>> REPLACE\n";
    bool failed = !seed && rng() % 4 == 0;
    r.correct = !failed;
    r.failure = failed ? kinds[rng() % 6] : FailureKind::Ok;
    r.combined_score = failed ? 0.0 : 1.0 + 3.0 * (1.0 - 1.0 / (1.0 + i * 0.01)) * (0.5 + (rng() % 1000) / 1000.0);
    r.error_text = failed ? "error: candidate " + std::to_string(i) + " failed" : "";
    if (!failed) r.public_metrics = {{"ratio_to_bound", 3.0 / r.combined_score}, {"speedup", r.combined_score}};
    r.text_feedback = "feedback for " + std::to_string(i);
    r.model = i % 2 ? "knob" : "test-model";
    r.cost_usd = i % 2 ? 0.0 : 0.001;
    r.timings = {{"build", 0.5}, {"run", 0.1}, {"bench", 0.2}};
    r.created_at = t0 + i * 0.5;
    r.run_seed = 7;
    if (hostile && i == n / 2) {
      r.code = kHostileCode;
      r.text_feedback = kHostileFeedback;
      r.model = "<i>model</i>";
      run.hostile_id = r.id;
    }
    if (r.correct && r.combined_score > best) {
      best = r.combined_score;
      run.best_id = r.id;
    }
    if (seed && i == 0) run.seed_id = r.id;
    db.insert(r);
    by_island[static_cast<std::size_t>(r.island_idx)].push_back(r.id);
    if (r.correct && i % 7 == 0) archive.push_back(r.id);
  }
  db.set_in_archive(archive, {});
  db.set_meta("run_seed", "7");
  write_file_atomic(dir / "meta_10.txt", "Recommendation 10: try <pipelining> & unrolling\n");
  write_file_atomic(dir / "meta_20.txt", "Recommendation 20: larger tiles\n");
  write_file_atomic(dir / "meta_memory.json", R"({"recommendations": ["tile", "unroll"]})");
  return run;
}

inline std::filesystem::path test_dir(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("braid_report_" + name + "_" + std::to_string(::getpid()));
}

}  // namespace braid::test
