#include "braid/db/database.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <thread>

#include "braid/util/error.hpp"
#include "braid/util/hash.hpp"

namespace braid {
namespace {

namespace fs = std::filesystem;

// A fresh folder per test, removed afterwards.
class DatabaseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("braid_db_test_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path db_path() const { return dir_ / "evolution.db"; }
  fs::path dir_;
};

// A record whose every field is derived from `i`, so a reader can check a row completely.
ProgramRecord make_record(int i, std::size_t code_bytes = 200) {
  ProgramRecord r;
  r.id = hash_hex("program" + std::to_string(i));
  r.generation = i;
  r.island_idx = i % 4;
  r.parent_id = i == 0 ? "" : hash_hex("program" + std::to_string(i - 1));
  r.parent_ids = {r.parent_id, "extra" + std::to_string(i)};
  r.patch_type = i == 0 ? "seed" : "diff";
  std::string code = "// program " + std::to_string(i) + "\n";
  while (code.size() < code_bytes) code += "constexpr int kChunks = " + std::to_string(i) + ";  // braid:knob 1|2|4\n";
  r.code = code;
  r.code_diff = "<<<<<<< SEARCH\nold " + std::to_string(i) + "\n=======\nnew\n>>>>>>> REPLACE\n";
  r.combined_score = 1.0 + i * 0.25;
  r.correct = i % 3 != 0;
  r.failure = r.correct ? FailureKind::Ok : FailureKind::VerifyFailed;
  r.error_text = r.correct ? "" : "rank 1: mismatch at element " + std::to_string(i);
  r.public_metrics = {{"speedup", 1.0 + i}, {"sizes", {1, 2, 3}}};
  r.private_metrics = {{"hidden", i}};
  r.text_feedback = "feedback " + std::to_string(i);
  r.embedding.resize(16);
  for (std::size_t k = 0; k < r.embedding.size(); ++k) r.embedding[k] = static_cast<float>(i) + 0.125f * k;
  r.knob_key = "kChunks=" + std::to_string(i % 5);
  r.archive_cell = "cell" + std::to_string(i % 7);
  r.in_archive = i % 2 == 0;
  r.model = i % 2 ? "knob" : "claude-sonnet";
  r.cost_usd = 0.001 * i;
  r.timings = {{"build", 1.5}, {"run", 0.25 * i}};
  r.system_msg_hash = hash_hex("system");
  r.created_at = 1.7e9 + i;
  r.run_seed = 0xfedcba9876543210ULL + static_cast<std::uint64_t>(i);
  r.migrated_from = i % 5 == 0 ? "migrant" + std::to_string(i) : "";
  return r;
}

void expect_same(const ProgramRecord& a, const ProgramRecord& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.code, b.code);
  EXPECT_EQ(a.generation, b.generation);
  EXPECT_EQ(a.island_idx, b.island_idx);
  EXPECT_EQ(a.parent_id, b.parent_id);
  EXPECT_EQ(a.parent_ids, b.parent_ids);
  EXPECT_EQ(a.patch_type, b.patch_type);
  EXPECT_EQ(a.code_diff, b.code_diff);
  EXPECT_EQ(a.combined_score, b.combined_score);
  EXPECT_EQ(a.correct, b.correct);
  EXPECT_EQ(a.failure, b.failure);
  EXPECT_EQ(a.error_text, b.error_text);
  EXPECT_EQ(a.public_metrics, b.public_metrics);
  EXPECT_EQ(a.private_metrics, b.private_metrics);
  EXPECT_EQ(a.text_feedback, b.text_feedback);
  EXPECT_EQ(a.embedding, b.embedding);
  EXPECT_EQ(a.knob_key, b.knob_key);
  EXPECT_EQ(a.archive_cell, b.archive_cell);
  EXPECT_EQ(a.in_archive, b.in_archive);
  EXPECT_EQ(a.model, b.model);
  EXPECT_EQ(a.cost_usd, b.cost_usd);
  EXPECT_EQ(a.timings, b.timings);
  EXPECT_EQ(a.system_msg_hash, b.system_msg_hash);
  EXPECT_EQ(a.created_at, b.created_at);
  EXPECT_EQ(a.run_seed, b.run_seed);
  EXPECT_EQ(a.migrated_from, b.migrated_from);
}

TEST(FailureKindTest, NamesRoundTrip) {
  const FailureKind all[] = {FailureKind::Ok,           FailureKind::BuildFailed, FailureKind::RunFailed,
                             FailureKind::Timeout,      FailureKind::VerifyFailed, FailureKind::BenchFailed,
                             FailureKind::Rejected};
  const char* names[] = {"ok", "build_failed", "run_failed", "timeout", "verify_failed", "bench_failed", "rejected"};
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(to_string(all[i]), names[i]);
    EXPECT_EQ(failure_kind_from(names[i]), all[i]);
  }
  EXPECT_FALSE(failure_kind_from("Ok").has_value());
  EXPECT_FALSE(failure_kind_from("").has_value());
}

TEST_F(DatabaseTest, FreshDatabaseIsEmptyWithSchemaVersion) {
  ProgramDatabase db(db_path());
  EXPECT_EQ(db.count(), 0);
  EXPECT_EQ(db.max_generation(), -1);
  EXPECT_FALSE(db.has_generation(0));
  EXPECT_TRUE(db.summaries().empty());
  EXPECT_EQ(db.meta("schema_version"), std::to_string(ProgramDatabase::kSchemaVersion));
  EXPECT_EQ(db.integrity_check(), "ok");

  {
    // WAL is a property of the file: another connection sees it.
    sqlite3* other = nullptr;
    ASSERT_EQ(sqlite3_open_v2(db_path().c_str(), &other, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(other, "PRAGMA journal_mode", -1, &st, nullptr), SQLITE_OK);
    ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
    EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)), "wal");
    sqlite3_finalize(st);
    sqlite3_close(other);
  }
}

TEST_F(DatabaseTest, RoundTripsEveryField) {
  ProgramRecord r = make_record(7, 3000);
  r.code = "__global__ void k() { printf(\"it's \\\"quoted\\\" — ünïcødé ✓\\n\"); }\n'single' \"double\" `back`\n";
  r.code += std::string("embedded NUL-free bytes: \x01\x7f", 17);
  r.text_feedback = "Ünïcode feedback with 'quotes' and \"double quotes\"; DROP TABLE programs; --";
  r.public_metrics = {{"note", "naïve “curly” quotes"}, {"nested", {{"a", {1.5, -2}}, {"b", nullptr}}}};
  r.embedding = {1.0f, -0.0f, 3.4028235e38f, 1.17549435e-38f, -1e-7f, 0.5f};
  r.run_seed = ~0ULL;  // the top bit must survive SQLite's signed integers
  ProgramDatabase db(db_path());
  db.insert(r);
  auto back = db.get(r.id);
  ASSERT_TRUE(back.has_value());
  expect_same(*back, r);
  EXPECT_FALSE(db.get("0000000000000000").has_value());

  // And again after reopening the file.
  ProgramDatabase reopened(db_path());
  auto again = reopened.get(r.id);
  ASSERT_TRUE(again.has_value());
  expect_same(*again, r);
}

TEST_F(DatabaseTest, NonFiniteNumbersRoundTrip) {
  // A broken evaluator can report NaN or infinity; storing it must not fail the run.
  ProgramDatabase db(db_path());
  ProgramRecord nan_score = make_record(1);
  nan_score.combined_score = std::numeric_limits<double>::quiet_NaN();
  nan_score.cost_usd = std::numeric_limits<double>::infinity();
  db.insert(nan_score);
  ProgramRecord finite = make_record(2);
  db.insert(finite);
  auto back = db.get(nan_score.id);
  ASSERT_TRUE(back.has_value());
  EXPECT_TRUE(std::isnan(back->combined_score));
  EXPECT_EQ(back->cost_usd, std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(db.summaries()[0].combined_score));
  ProgramQuery best;
  best.order_by = "score";
  auto ranked = db.query(best);
  ASSERT_EQ(ranked.size(), 2u);
  EXPECT_EQ(ranked[0].id, finite.id);  // NaN ranks last
}

TEST_F(DatabaseTest, DefaultRecordRoundTrips) {
  ProgramRecord r;
  r.id = "00000000000000aa";
  ProgramDatabase db(db_path());
  db.insert(r);
  auto back = db.get(r.id);
  ASSERT_TRUE(back.has_value());
  expect_same(*back, r);
  EXPECT_TRUE(back->embedding.empty());
  EXPECT_TRUE(back->public_metrics.is_object());
}

TEST_F(DatabaseTest, DuplicateIdThrowsAndKeepsTheFirst) {
  ProgramDatabase db(db_path());
  ProgramRecord r = make_record(1);
  db.insert(r);
  ProgramRecord other = make_record(2);
  other.id = r.id;
  EXPECT_THROW(db.insert(other), SystemError);
  EXPECT_EQ(db.count(), 1);
  expect_same(*db.get(r.id), r);
  // The connection is usable after the failed transaction.
  db.insert(make_record(3));
  EXPECT_EQ(db.count(), 2);
}

TEST_F(DatabaseTest, BatchInsertIsAllOrNothing) {
  ProgramDatabase db(db_path());
  std::vector<ProgramRecord> batch;
  for (int i = 0; i < 50; ++i) batch.push_back(make_record(i));
  db.insert_batch(batch);
  EXPECT_EQ(db.count(), 50);

  std::vector<ProgramRecord> bad = {make_record(100), make_record(101), make_record(5)};
  EXPECT_THROW(db.insert_batch(bad), SystemError);
  EXPECT_EQ(db.count(), 50);
  EXPECT_FALSE(db.get(make_record(100).id).has_value());
}

TEST_F(DatabaseTest, QueryOrdersFiltersAndPages) {
  ProgramDatabase db(db_path());
  // Inserted out of generation order; scores are not monotone in generation.
  std::vector<int> order = {5, 2, 9, 0, 7, 1, 8, 3, 6, 4, 11, 10};
  for (int i : order) {
    ProgramRecord r = make_record(i);
    r.combined_score = std::fmod(i * 7.0, 12.0);
    db.insert(r);
  }
  auto by_generation = db.query({});
  ASSERT_EQ(by_generation.size(), 12u);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(by_generation[i].generation, i);

  ProgramQuery best;
  best.order_by = "score";
  auto by_score = db.query(best);
  ASSERT_EQ(by_score.size(), 12u);
  for (std::size_t i = 1; i < by_score.size(); ++i) {
    EXPECT_GE(by_score[i - 1].combined_score, by_score[i].combined_score);
  }
  EXPECT_EQ(by_score.front().combined_score, 11.0);

  ProgramQuery island;
  island.island = 1;
  auto on_island = db.query(island);
  ASSERT_EQ(on_island.size(), 3u);  // generations 1, 5, 9
  EXPECT_EQ(on_island[0].generation, 1);
  EXPECT_EQ(on_island[2].generation, 9);

  ProgramQuery correct_on_island = island;
  correct_on_island.correct = true;
  correct_on_island.order_by = "score";
  auto filtered = db.query(correct_on_island);  // 1 (score 7), 5 (score 11); 9 is incorrect
  ASSERT_EQ(filtered.size(), 2u);
  EXPECT_EQ(filtered[0].generation, 5);
  EXPECT_EQ(filtered[1].generation, 1);

  ProgramQuery incorrect;
  incorrect.correct = false;
  auto failing = db.query(incorrect);  // generations 0, 3, 6, 9
  ASSERT_EQ(failing.size(), 4u);
  for (const auto& r : failing) EXPECT_EQ(r.generation % 3, 0);

  ProgramQuery page;
  page.limit = 5;
  page.offset = 4;
  auto paged = db.query(page);
  ASSERT_EQ(paged.size(), 5u);
  EXPECT_EQ(paged.front().generation, 4);
  EXPECT_EQ(paged.back().generation, 8);
  page.offset = 10;
  EXPECT_EQ(db.query(page).size(), 2u);
  page.offset = 20;
  EXPECT_TRUE(db.query(page).empty());

  ProgramQuery unknown;
  unknown.order_by = "name";
  EXPECT_THROW(db.query(unknown), UserError);
}

TEST_F(DatabaseTest, SummariesCountAndGenerations) {
  ProgramDatabase db(db_path());
  for (int i : {3, 0, 2, 1}) db.insert(make_record(i));
  ProgramRecord sibling = make_record(40);
  sibling.generation = 2;  // two programs in one generation keep insertion order
  db.insert(sibling);
  EXPECT_EQ(db.count(), 5);
  EXPECT_EQ(db.max_generation(), 3);
  EXPECT_TRUE(db.has_generation(2));
  EXPECT_FALSE(db.has_generation(4));

  auto all = db.summaries();
  ASSERT_EQ(all.size(), 5u);
  std::vector<std::int64_t> generations;
  for (const auto& s : all) generations.push_back(s.generation);
  EXPECT_EQ(generations, (std::vector<std::int64_t>{0, 1, 2, 2, 3}));
  EXPECT_EQ(all[3].id, sibling.id);
  const ProgramRecord r = make_record(3);
  const ProgramSummary& s = all[4];
  EXPECT_EQ(s.id, r.id);
  EXPECT_EQ(s.parent_id, r.parent_id);
  EXPECT_EQ(s.patch_type, r.patch_type);
  EXPECT_EQ(s.migrated_from, r.migrated_from);
  EXPECT_EQ(s.island_idx, r.island_idx);
  EXPECT_EQ(s.combined_score, r.combined_score);
  EXPECT_EQ(s.correct, r.correct);
  EXPECT_EQ(s.failure, r.failure);
  EXPECT_EQ(s.knob_key, r.knob_key);
  EXPECT_EQ(s.archive_cell, r.archive_cell);
  EXPECT_EQ(s.in_archive, r.in_archive);
  EXPECT_EQ(s.embedding, r.embedding);
  EXPECT_EQ(all[0].migrated_from, make_record(0).migrated_from);
  EXPECT_FALSE(all[0].migrated_from.empty());
}

TEST_F(DatabaseTest, ArchiveFlagsUpdateInOneBatch) {
  ProgramDatabase db(db_path());
  for (int i = 0; i < 6; ++i) {
    ProgramRecord r = make_record(i);
    r.in_archive = false;
    db.insert(r);
  }
  auto id = [](int i) { return make_record(i).id; };
  db.set_in_archive({id(0), id(1), id(2)}, {});
  db.set_in_archive({id(3), id(1)}, {id(0), id(1)});  // 1 evicted and re-admitted: stays in
  std::vector<bool> flags;
  for (const auto& s : db.summaries()) flags.push_back(s.in_archive);
  EXPECT_EQ(flags, (std::vector<bool>{false, true, true, true, false, false}));

  // An unknown id rolls the whole batch back.
  EXPECT_THROW(db.set_in_archive({id(4)}, {"ffffffffffffffff"}), SystemError);
  EXPECT_FALSE(db.get(id(4))->in_archive);
}

TEST_F(DatabaseTest, TextFeedbackUpdates) {
  ProgramDatabase db(db_path());
  db.insert(make_record(1));
  db.set_text_feedback(make_record(1).id, "use more CTAs — “really”");
  EXPECT_EQ(db.get(make_record(1).id)->text_feedback, "use more CTAs — “really”");
  EXPECT_THROW(db.set_text_feedback("ffffffffffffffff", "x"), SystemError);
}

TEST_F(DatabaseTest, AttemptsFilterAndKeepTheNewest) {
  ProgramDatabase db(db_path());
  for (int g = 0; g < 10; ++g) {
    AttemptRecord a;
    a.generation = g;
    a.parent_id = make_record(g).id;
    a.patch_type = "diff";
    a.patch_text = "SEARCH block " + std::to_string(g) + " with 'quotes'";
    a.reason = g % 2 ? "novelty" : "patch";
    a.error = "no match for search block " + std::to_string(g);
    a.created_at = 1.7e9 + g;
    db.insert_attempt(a);
  }
  auto all = db.attempts();
  ASSERT_EQ(all.size(), 10u);
  EXPECT_EQ(all[3].generation, 3);
  EXPECT_EQ(all[3].parent_id, make_record(3).id);
  EXPECT_EQ(all[3].patch_type, "diff");
  EXPECT_EQ(all[3].patch_text, "SEARCH block 3 with 'quotes'");
  EXPECT_EQ(all[3].reason, "novelty");
  EXPECT_EQ(all[3].error, "no match for search block 3");
  EXPECT_EQ(all[3].created_at, 1.7e9 + 3);

  auto since = db.attempts(6);
  ASSERT_EQ(since.size(), 4u);
  EXPECT_EQ(since.front().generation, 6);

  auto newest = db.attempts(0, 3);
  ASSERT_EQ(newest.size(), 3u);
  EXPECT_EQ(newest[0].generation, 7);
  EXPECT_EQ(newest[2].generation, 9);
}

TEST_F(DatabaseTest, MetaSetsAndOverwrites) {
  {
    ProgramDatabase db(db_path());
    EXPECT_FALSE(db.meta("config").has_value());
    db.set_meta("config", R"({"num_islands": 4})");
    db.set_meta("run_seed", "42");
    db.set_meta("run_seed", "43");
    db.set_meta("empty", "");
  }
  ProgramDatabase db(db_path());
  EXPECT_EQ(db.meta("config"), R"({"num_islands": 4})");
  EXPECT_EQ(db.meta("run_seed"), "43");
  EXPECT_EQ(db.meta("empty"), "");
}

TEST_F(DatabaseTest, JobsAddRemoveReplace) {
  ProgramDatabase db(db_path());
  db.add_job(1234, "start 99", "gen 5 build");
  db.add_job(5678, "start 100", "gen 6 run");
  db.add_job(1234, "start 101", "gen 7 bench");  // a recycled pgid replaces the old row
  auto jobs = db.jobs();
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0], std::make_tuple(5678L, std::string("start 100"), std::string("gen 6 run")));
  EXPECT_EQ(jobs[1], std::make_tuple(1234L, std::string("start 101"), std::string("gen 7 bench")));
  db.remove_job(5678);
  db.remove_job(4242);  // absent: nothing to do
  ASSERT_EQ(db.jobs().size(), 1u);
  EXPECT_EQ(std::get<0>(db.jobs()[0]), 1234);
}

TEST_F(DatabaseTest, ReadOnlyOpenSeesCommittedRowsAndCannotWrite) {
  EXPECT_THROW(ProgramDatabase(db_path(), DbAccess::ReadOnly), SystemError);
  ProgramDatabase writer(db_path());
  writer.insert(make_record(1));
  ProgramDatabase reader(db_path(), DbAccess::ReadOnly);
  EXPECT_EQ(reader.count(), 1);
  writer.insert(make_record(2));
  EXPECT_EQ(reader.count(), 2);
  expect_same(*reader.get(make_record(2).id), make_record(2));
  EXPECT_THROW(reader.insert(make_record(3)), SystemError);
  EXPECT_THROW(reader.set_meta("k", "v"), SystemError);
  EXPECT_EQ(writer.count(), 2);
}

TEST_F(DatabaseTest, ReadOnlyOpenRejectsOtherFiles) {
  {
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open((dir_ / "other.db").c_str(), &raw), SQLITE_OK);
    sqlite3_exec(raw, "CREATE TABLE t (x)", nullptr, nullptr, nullptr);
    sqlite3_close(raw);
  }
  EXPECT_THROW(ProgramDatabase(dir_ / "other.db", DbAccess::ReadOnly), UserError);
  EXPECT_THROW(ProgramDatabase(dir_ / "other.db", DbAccess::Existing), UserError);
}

// Issue #18: a damaged, truncated or empty file is named in one UserError and never turned
// into a new, empty run.
TEST_F(DatabaseTest, DamagedOrEmptyFilesAreRefusedByName) {
  const auto garbage = dir_ / "garbage.db";
  std::ofstream(garbage, std::ios::binary) << std::string(64 << 10, 'x');
  for (auto access : {DbAccess::ReadOnly, DbAccess::Existing, DbAccess::ReadWrite}) {
    try {
      ProgramDatabase db(garbage, access);
      ADD_FAILURE() << "garbage opened";
    } catch (const UserError& e) {
      EXPECT_EQ(e.file(), garbage.string());
      EXPECT_NE(std::string(e.what()).find("not a braid database"), std::string::npos) << e.what();
    }
  }
  const auto empty = dir_ / "empty.db";
  std::ofstream(empty, std::ios::binary).flush();
  for (auto access : {DbAccess::ReadOnly, DbAccess::Existing}) {
    try {
      ProgramDatabase db(empty, access);
      ADD_FAILURE() << "0-byte file opened";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("0 bytes"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(std::filesystem::file_size(empty), 0u);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "empty.db-wal"));
  EXPECT_THROW(ProgramDatabase(dir_ / "absent.db", DbAccess::Existing), UserError);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "absent.db"));
}

TEST_F(DatabaseTest, SetMetasWritesAllKeysInOneTransaction) {
  ProgramDatabase db(db_path());
  db.set_metas({{"a", "1"}, {"b", "2"}, {"config", "{}"}});
  EXPECT_EQ(db.meta("a"), "1");
  EXPECT_EQ(db.meta("b"), "2");
  EXPECT_EQ(db.meta("config"), "{}");
  db.set_metas({{"a", "3"}});
  EXPECT_EQ(db.meta("a"), "3");
}

// A reader never writes: no -wal/-shm appear beside a cleanly closed database and its bytes
// stay the same.
TEST_F(DatabaseTest, ReadOnlyOpenLeavesTheFolderAsItWas) {
  {
    ProgramDatabase writer(db_path());
    writer.insert(make_record(1));
  }
  const auto before = std::filesystem::file_size(db_path());
  const auto mtime = std::filesystem::last_write_time(db_path());
  {
    ProgramDatabase reader(db_path(), DbAccess::ReadOnly);
    EXPECT_EQ(reader.count(), 1);
  }
  EXPECT_EQ(std::filesystem::file_size(db_path()), before);
  EXPECT_EQ(std::filesystem::last_write_time(db_path()), mtime);
  EXPECT_FALSE(std::filesystem::exists(db_path().string() + "-wal"));
  EXPECT_FALSE(std::filesystem::exists(db_path().string() + "-journal"));
}

TEST_F(DatabaseTest, NewerSchemaIsRefused) {
  {
    ProgramDatabase db(db_path());
    db.set_meta("schema_version", std::to_string(ProgramDatabase::kSchemaVersion + 1));
  }
  EXPECT_THROW(ProgramDatabase{db_path()}, UserError);
}

TEST_F(DatabaseTest, UnwritablePathIsASystemError) {
  EXPECT_THROW(ProgramDatabase(dir_ / "missing_folder" / "x.db"), SystemError);
}

TEST_F(DatabaseTest, ConcurrentReadersWhileWriting) {
  ProgramDatabase writer(db_path());
  constexpr int kRows = 200;
  std::atomic<bool> done{false};
  std::atomic<int> reads{0};
  std::atomic<bool> reader_ok{true};

  // A second ProgramDatabase in read-only mode and a raw read-only sqlite3 connection, as
  // the web UI and the report use them, each on its own thread.
  std::thread typed_reader([&] {
    ProgramDatabase reader(db_path(), DbAccess::ReadOnly);
    std::int64_t last = 0;
    while (!done) {
      std::int64_t n = reader.count();
      auto summaries = reader.summaries();
      // Rows only ever appear, and every visible row is complete.
      if (n < last || static_cast<std::int64_t>(summaries.size()) < n) reader_ok = false;
      for (const auto& s : summaries) {
        if (s.embedding.size() != 16) reader_ok = false;
      }
      last = n;
      ++reads;
    }
  });
  std::thread raw_reader([&] {
    sqlite3* raw = nullptr;
    if (sqlite3_open_v2(db_path().c_str(), &raw, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
      reader_ok = false;
      return;
    }
    sqlite3_busy_timeout(raw, 5000);
    while (!done) {
      sqlite3_stmt* st = nullptr;
      if (sqlite3_prepare_v2(raw, "SELECT COUNT(*), SUM(length(code) > 0) FROM programs", -1, &st, nullptr) != SQLITE_OK ||
          sqlite3_step(st) != SQLITE_ROW || sqlite3_column_int64(st, 0) != sqlite3_column_int64(st, 1)) {
        reader_ok = false;
      }
      sqlite3_finalize(st);
      ++reads;
    }
    sqlite3_close(raw);
  });
  // The writer is also shared with a thread of its own process (a reader on the same
  // connection), which the connection mutex serializes.
  std::thread same_connection([&] {
    while (!done) {
      auto s = writer.summaries();
      if (!s.empty() && s.back().embedding.size() != 16) reader_ok = false;
    }
  });
  for (int i = 0; i < kRows; ++i) writer.insert(make_record(i));
  done = true;
  typed_reader.join();
  raw_reader.join();
  same_connection.join();
  EXPECT_TRUE(reader_ok);
  EXPECT_GT(reads.load(), 2);
  EXPECT_EQ(writer.count(), kRows);
  EXPECT_EQ(writer.integrity_check(), "ok");
}

TEST_F(DatabaseTest, ThreadsShareOneConnection) {
  // Each insert is a multi-statement transaction; the connection lock keeps one thread's
  // BEGIN from landing inside another thread's transaction.
  ProgramDatabase db(db_path());
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      try {
        for (int i = 0; i < 40; ++i) {
          int n = t * 1000 + i;
          db.insert(make_record(n));
          db.set_in_archive({make_record(n).id}, {});
          db.insert_attempt(AttemptRecord{n, "", "diff", "", "patch", "", 0.0});
        }
      } catch (const std::exception&) {
        ++errors;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(db.count(), 160);
  EXPECT_EQ(db.attempts().size(), 160u);
  for (const auto& s : db.summaries()) EXPECT_TRUE(s.in_archive);
}

TEST_F(DatabaseTest, IntegrityCheckReportsCorruption) {
  {
    ProgramDatabase db(db_path());
    std::vector<ProgramRecord> batch;
    for (int i = 0; i < 300; ++i) batch.push_back(make_record(i, 3000));
    db.insert_batch(batch);
    EXPECT_EQ(db.integrity_check(), "ok");
  }  // the last connection checkpoints the WAL into the main file
  ASSERT_FALSE(fs::exists(db_path().string() + "-wal"));
  auto size = fs::file_size(db_path());
  ASSERT_GT(size, 64u * 4096u);
  {
    // Garbage over pages in the middle of the file: b-tree pages of programs.
    std::FILE* f = std::fopen(db_path().c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::string garbage(8 * 4096, '\xA5');
    std::fseek(f, static_cast<long>(size / 2 / 4096 * 4096), SEEK_SET);
    std::fwrite(garbage.data(), 1, garbage.size(), f);
    std::fclose(f);
  }
  ProgramDatabase db(db_path());
  std::string report = db.integrity_check();
  EXPECT_NE(report, "ok");
  EXPECT_FALSE(report.empty());
}

TEST_F(DatabaseTest, ConcurrentWritersInTwoProcesses) {
  { ProgramDatabase create(db_path()); }
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int code = 0;
    try {
      ProgramDatabase db(db_path());
      for (int i = 1000; i < 1100; ++i) db.insert(make_record(i));
    } catch (...) {
      code = 1;
    }
    ::_exit(code);
  }
  {
    ProgramDatabase db(db_path());
    for (int i = 0; i < 100; ++i) db.insert(make_record(i));
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  ProgramDatabase db(db_path());
  EXPECT_EQ(db.count(), 200);
  EXPECT_EQ(db.integrity_check(), "ok");
}

TEST_F(DatabaseTest, SurvivesWriterKilledMidRun) {
  { ProgramDatabase create(db_path()); }
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Inserts until killed; large rows so that the kill lands inside a write most times.
    try {
      ProgramDatabase db(db_path());
      for (int i = 0;; ++i) {
        ProgramRecord r = make_record(i, 20000);
        r.embedding.assign(512, static_cast<float>(i));
        db.insert(r);
        AttemptRecord a;
        a.generation = i;
        db.insert_attempt(a);
      }
    } catch (...) {
      ::_exit(1);
    }
  }
  {
    ProgramDatabase watcher(db_path(), DbAccess::ReadOnly);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (watcher.count() < 150 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));

  ProgramDatabase db(db_path());
  EXPECT_EQ(db.integrity_check(), "ok");
  std::int64_t n = db.count();
  EXPECT_GE(n, 150);
  // Every stored row is complete, and the rows are exactly generations 0..n-1: a record is
  // either fully stored or absent.
  auto rows = db.query({});
  ASSERT_EQ(static_cast<std::int64_t>(rows.size()), n);
  for (std::int64_t i = 0; i < n; ++i) {
    ProgramRecord expected = make_record(static_cast<int>(i), 20000);
    expected.embedding.assign(512, static_cast<float>(i));
    expect_same(rows[static_cast<std::size_t>(i)], expected);
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_EQ(db.max_generation(), n - 1);
  // The database keeps working for the restarted run.
  db.insert(make_record(100000));
  EXPECT_EQ(db.count(), n + 1);
}

}  // namespace
}  // namespace braid
