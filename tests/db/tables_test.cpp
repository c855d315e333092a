// The tables and views db/ keeps for other modules: confirmations, remeasurements, llm_calls, slurm_jobs, and the
// program views of the read commands and the live web UI.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "braid/db/database.hpp"
#include "braid/util/error.hpp"

namespace braid {
namespace {

namespace fs = std::filesystem;

class TablesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("braid_tables_test_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path db_path() const { return dir_ / "evolution.db"; }
  fs::path dir_;
};

ProgramRecord program(const std::string& id, std::int64_t generation, bool correct,
                      const std::string& patch_type = "diff") {
  ProgramRecord r;
  r.id = id;
  r.generation = generation;
  r.patch_type = patch_type;
  r.code = "// " + id + "\n";
  r.correct = correct;
  r.failure = correct ? FailureKind::Ok : FailureKind::BuildFailed;
  r.combined_score = correct ? 1.0 + double(generation) : 0.0;
  r.public_metrics = {{"ratio_to_bound", 0.5}, {"gbps", 12}, {"note", "text"}};
  r.embedding = {1.0f, 2.0f, 3.0f};
  r.run_seed = 18446744073709551615ull;
  return r;
}

TEST_F(TablesTest, ProgramViews) {
  ProgramDatabase db(db_path());
  db.insert(program("aa11", 0, true, "seed"));
  db.insert(program("aa22", 1, false));
  db.insert(program("bb33", 2, true));
  db.set_in_archive({"bb33"}, {});

  EXPECT_EQ(db.failure_counts(), (std::map<std::string, std::int64_t>{{"build_failed", 1}, {"ok", 2}}));
  EXPECT_EQ(db.ids_with_prefix("aa", 3), (std::vector<std::string>{"aa11", "aa22"}));
  EXPECT_EQ(db.ids_with_prefix("aa", 1), (std::vector<std::string>{"aa11"}));
  EXPECT_TRUE(db.ids_with_prefix("cc", 3).empty());
  const auto codes = db.correct_program_codes();
  ASSERT_EQ(codes.size(), 2u);
  EXPECT_EQ(codes[1], std::make_pair(std::string("bb33"), std::string("// bb33\n")));
  EXPECT_EQ(db.first_seed_code(), "// aa11\n");
  auto code = db.program_code("bb33");
  ASSERT_TRUE(code);
  EXPECT_EQ(code->generation, 2);
  EXPECT_DOUBLE_EQ(code->combined_score, 3.0);
  EXPECT_FALSE(db.program_code("zz"));
  EXPECT_EQ(db.archive_ids(), std::vector<std::string>{"bb33"});

  auto rows = db.candidates_after(0);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[2].id, "bb33");
  EXPECT_TRUE(rows[2].in_archive);
  EXPECT_EQ(rows[1].failure, "build_failed");
  ASSERT_TRUE(rows[0].ratio_to_bound);
  EXPECT_DOUBLE_EQ(*rows[0].ratio_to_bound, 0.5);
  EXPECT_EQ(rows[0].metrics.size(), 2u);  // the numeric metrics only
  EXPECT_EQ(db.candidates_after(rows[1].rowid).size(), 1u);

  auto columns = db.program_columns("aa11");
  ASSERT_TRUE(columns);
  EXPECT_EQ((*columns)["embedding_dims"], 3);
  EXPECT_EQ((*columns)["public_metrics"]["gbps"], 12);
  EXPECT_EQ((*columns)["run_seed"], "18446744073709551615");
  EXPECT_EQ((*columns)["generation"], 0);
  EXPECT_EQ((*columns)["code"], "// aa11\n");
  EXPECT_FALSE(db.program_columns("zz"));

  EXPECT_EQ(db.delete_generations_from(2), 1);
  EXPECT_EQ(db.count(), 2);
}

TEST_F(TablesTest, LiveReaderSeesLaterCommits) {
  ProgramDatabase writer(db_path());
  writer.insert(program("aa11", 0, true, "seed"));
  ProgramDatabase reader(db_path(), DbAccess::LiveReadOnly);
  const auto version = reader.data_version();
  writer.insert(program("aa22", 1, true));
  EXPECT_NE(reader.data_version(), version);
  EXPECT_EQ(reader.candidates_after(0).size(), 2u);
  EXPECT_THROW(ProgramDatabase(dir_ / "absent.db", DbAccess::LiveReadOnly), SystemError);
}

TEST_F(TablesTest, Confirmations) {
  ProgramDatabase db(db_path());
  EXPECT_TRUE(db.confirmations().empty());  // a run from before the table
  db.ensure_confirmations_table();
  db.ensure_confirmations_table();  // idempotent (resume)
  ConfirmationRecord c{"aa11", "h1", 5.0, {1.2, 1.3}, "aa22", "h2", {2.0}, false, "median 1.25 vs incumbent 2", 1.7e9};
  db.insert_confirmation(c);
  auto back = db.confirmations();
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].id, "aa11");
  EXPECT_EQ(back[0].samples, c.samples);
  EXPECT_EQ(back[0].against_samples, c.against_samples);
  EXPECT_FALSE(back[0].promoted);
  EXPECT_EQ(back[0].why, c.why);
}

// Each re-measurement as it came out, by label and program text: a resume takes it.
TEST_F(TablesTest, Remeasurements) {
  ProgramDatabase db(db_path());
  EXPECT_FALSE(db.remeasurement("aa11-trust1", "h1"));  // a run from before the table
  db.ensure_confirmations_table();
  EXPECT_FALSE(db.remeasurement("aa11-trust1", "h1"));
  RemeasurementRecord r;
  r.label = "aa11-trust1";
  r.code_hash = "h1";
  r.correct = true;
  r.combined_score = 1.25;
  r.public_metrics = {{"ratio_to_bound", 1.4}, {"level_reached", 3}};
  r.created_at = 1.7e9;
  db.insert_remeasurement(r);
  auto back = db.remeasurement("aa11-trust1", "h1");
  ASSERT_TRUE(back);
  EXPECT_EQ(back->failure, FailureKind::Ok);
  EXPECT_TRUE(back->correct);
  EXPECT_DOUBLE_EQ(back->combined_score, 1.25);
  EXPECT_EQ(back->public_metrics, r.public_metrics);
  EXPECT_FALSE(db.remeasurement("aa11-trust1", "h2"));  // another text under that label
  EXPECT_FALSE(db.remeasurement("aa11-trust2", "h1"));
  r.failure = FailureKind::Timeout;  // measured again: the newer one stands
  r.correct = false;
  r.error_text = "rank 3 hung";
  db.insert_remeasurement(r);
  back = db.remeasurement("aa11-trust1", "h1");
  ASSERT_TRUE(back);
  EXPECT_EQ(back->failure, FailureKind::Timeout);
  EXPECT_EQ(back->error_text, "rank 3 hung");
}

TEST_F(TablesTest, LlmCalls) {
  ProgramDatabase db(db_path());
  EXPECT_EQ(db.llm_call_totals().calls, 0);  // no table: no call
  EXPECT_FALSE(db.llm_call_cost());
  db.mark_llm_call_error("k1", "no_patch", "nothing");  // no table: nothing to mark
  db.ensure_llm_calls_table();
  LlmCallRecord a{1, "k1", "mutate", "m", 3, 100, 20, 0.5, 1.0, 1, "", "", {"timeout"}, 1.7e9};
  LlmCallRecord b{2, "k2", "feedback", "m", 3, 10, 2, 0.25, 1.0, 2, "http_500", "down", {}, 1.7e9};
  EXPECT_FALSE(db.insert_llm_call(a));
  EXPECT_FALSE(db.insert_llm_call(b));
  db.mark_llm_call_error("k1", "no_patch", "no block");
  const LlmCallTotals t = db.llm_call_totals();
  EXPECT_EQ(t.calls, 2);
  EXPECT_EQ(t.tokens_in, 110);
  EXPECT_EQ(t.tokens_out, 22);
  EXPECT_DOUBLE_EQ(t.cost_usd, 0.75);
  EXPECT_EQ(t.errors, (std::map<std::string, std::int64_t>{{"http_500", 1}, {"no_patch", 1}, {"timeout", 1}}));
  EXPECT_EQ(t.errors_total, 3);
  auto cost = db.llm_call_cost();
  ASSERT_TRUE(cost);
  EXPECT_EQ(cost->calls, 2);
  ASSERT_TRUE(cost->cost_usd);
  EXPECT_DOUBLE_EQ(*cost->cost_usd, 0.75);
}

TEST_F(TablesTest, SlurmJobs) {
  ProgramDatabase db(db_path());
  db.ensure_slurm_jobs_table();
  db.put_slurm_job({"c1", "101", "h1", "/jobs/c1", "submitted", 1, 20.0, 20.0});
  db.put_slurm_job({"c2", "102", "h2", "/jobs/c2", "submitted", 1, 10.0, 10.0});
  db.put_slurm_job({"c1", "103", "h1", "/jobs/c1", "collected", 2, 30.0, 31.0});  // replaces c1's row
  auto c1 = db.slurm_job("c1");
  ASSERT_TRUE(c1);
  EXPECT_EQ(c1->job_id, "103");
  EXPECT_EQ(c1->attempts, 2);
  EXPECT_FALSE(db.slurm_job("c3"));
  auto waiting = db.slurm_jobs_with_state("submitted");
  ASSERT_EQ(waiting.size(), 1u);
  EXPECT_EQ(waiting[0].candidate_id, "c2");
}

TEST_F(TablesTest, SchemaObjectCount) {
  EXPECT_FALSE(schema_object_count(dir_ / "absent.db"));
  { ProgramDatabase db(db_path()); }
  EXPECT_GT(schema_object_count(db_path()).value_or(0), 0);
}

}  // namespace
}  // namespace braid
