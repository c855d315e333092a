#include "braid/db/database.hpp"

#include <sqlite3.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>

#include <fmt/format.h>

#include <unistd.h>

#include "braid/db/sqlite_statement.hpp"
#include "braid/util/error.hpp"

namespace braid {

namespace {

using sql::Statement;

// REAL columns are nullable because SQLite stores NaN as NULL; NULL reads back as NaN.
// Column order matters for summaries(): SQLite reads a row's payload front to back, so the
// compact summary columns and the embedding come first and the large texts (code, diff)
// last, where a summary scan never has to walk their overflow pages.
constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS programs (
  id              TEXT PRIMARY KEY,
  generation      INTEGER NOT NULL,
  island_idx      INTEGER NOT NULL,
  combined_score  REAL,
  correct         INTEGER NOT NULL,
  failure_kind    TEXT NOT NULL,
  in_archive      INTEGER NOT NULL DEFAULT 0,
  knob_key        TEXT NOT NULL,
  archive_cell    TEXT NOT NULL,
  embedding       BLOB,
  parent_id       TEXT NOT NULL,
  parent_ids      TEXT NOT NULL,
  patch_type      TEXT NOT NULL,
  model           TEXT NOT NULL,
  cost_usd        REAL,
  created_at      REAL,
  run_seed        INTEGER NOT NULL,
  migrated_from   TEXT NOT NULL,
  system_msg_hash TEXT NOT NULL,
  timings         TEXT NOT NULL,
  public_metrics  TEXT NOT NULL,
  private_metrics TEXT NOT NULL,
  error_text      TEXT NOT NULL,
  text_feedback   TEXT NOT NULL,
  code_diff       TEXT NOT NULL,
  code            TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS programs_island_score ON programs (island_idx, combined_score);
CREATE INDEX IF NOT EXISTS programs_generation ON programs (generation);
CREATE INDEX IF NOT EXISTS programs_knob_key ON programs (knob_key);
CREATE TABLE IF NOT EXISTS attempts (
  seq        INTEGER PRIMARY KEY AUTOINCREMENT,
  generation INTEGER NOT NULL,
  parent_id  TEXT NOT NULL,
  patch_type TEXT NOT NULL,
  patch_text TEXT NOT NULL,
  reason     TEXT NOT NULL,
  error      TEXT NOT NULL,
  created_at REAL
);
CREATE INDEX IF NOT EXISTS attempts_generation ON attempts (generation);
CREATE TABLE IF NOT EXISTS jobs (
  pgid         INTEGER PRIMARY KEY,
  start_marker TEXT NOT NULL,
  what         TEXT NOT NULL,
  added_at     REAL NOT NULL
);
)sql";

constexpr const char* kProgramColumns =
    "id, generation, island_idx, combined_score, correct, failure_kind, in_archive, knob_key, "
    "archive_cell, embedding, parent_id, parent_ids, patch_type, model, cost_usd, created_at, "
    "run_seed, migrated_from, system_msg_hash, timings, public_metrics, private_metrics, "
    "error_text, text_feedback, code_diff, code";

constexpr const char* kInsertProgram =
    "INSERT INTO programs (id, generation, island_idx, combined_score, correct, failure_kind, "
    "in_archive, knob_key, archive_cell, embedding, parent_id, parent_ids, patch_type, model, "
    "cost_usd, created_at, run_seed, migrated_from, system_msg_hash, timings, public_metrics, "
    "private_metrics, error_text, text_feedback, code_diff, code) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, "
    "?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26)";

constexpr std::array<std::string_view, 7> kFailureNames = {
    "ok", "build_failed", "run_failed", "timeout", "verify_failed", "bench_failed", "rejected"};

double now_unix_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

// Stored JSON is always valid (written by dump()); a column edited by hand that no longer
// parses is reported rather than silently dropped.
json parse_json_column(std::string_view text, const std::string& id, const char* column) {
  if (text.empty()) return json::object();
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    throw SystemError("program " + id + ": column " + column + " is not valid JSON: " + e.what());
  }
}

FailureKind failure_column(std::string_view text) {
  // Unknown names can only come from a newer braid; treat them as the generic rejection.
  return failure_kind_from(text).value_or(FailureKind::Rejected);
}

void bind_program(Statement& st, const ProgramRecord& r) {
  st.bind(1, r.id)
      .bind(2, r.generation)
      .bind(3, r.island_idx)
      .bind(4, r.combined_score)
      .bind(5, r.correct)
      .bind(6, to_string(r.failure))
      .bind(7, r.in_archive)
      .bind(8, r.knob_key)
      .bind(9, r.archive_cell)
      .bind_blob(10, r.embedding.data(), r.embedding.size() * sizeof(float))
      .bind(11, r.parent_id)
      .bind(12, json(r.parent_ids).dump())
      .bind(13, r.patch_type)
      .bind(14, r.model)
      .bind(15, r.cost_usd)
      .bind(16, r.created_at)
      // SQLite integers are signed 64-bit: the seed is stored bit for bit.
      .bind(17, static_cast<std::int64_t>(r.run_seed))
      .bind(18, r.migrated_from)
      .bind(19, r.system_msg_hash)
      .bind(20, r.timings.dump())
      .bind(21, r.public_metrics.dump())
      .bind(22, r.private_metrics.dump())
      .bind(23, r.error_text)
      .bind(24, r.text_feedback)
      .bind(25, r.code_diff)
      .bind(26, r.code);
}

// Columns 0-10 (id .. parent_id) come first in both the full and the summary SELECT.
template <typename Row>
void read_common_columns(const Statement& st, Row& r) {
  r.id = st.column_text(0);
  r.generation = st.column_int(1);
  r.island_idx = static_cast<int>(st.column_int(2));
  r.combined_score = st.column_real(3);
  r.correct = st.column_int(4) != 0;
  r.failure = failure_column(st.column_text_view(5));
  r.in_archive = st.column_int(6) != 0;
  r.knob_key = st.column_text(7);
  r.archive_cell = st.column_text(8);
  r.embedding = st.column_floats(9);
  r.parent_id = st.column_text(10);
}

ProgramRecord read_program(const Statement& st) {
  ProgramRecord r;
  read_common_columns(st, r);
  json parents = parse_json_column(st.column_text_view(11), r.id, "parent_ids");
  if (parents.is_array()) r.parent_ids = parents.get<std::vector<std::string>>();
  r.patch_type = st.column_text(12);
  r.model = st.column_text(13);
  r.cost_usd = st.column_real(14);
  r.created_at = st.column_real(15);
  r.run_seed = static_cast<std::uint64_t>(st.column_int(16));
  r.migrated_from = st.column_text(17);
  r.system_msg_hash = st.column_text(18);
  r.timings = parse_json_column(st.column_text_view(19), r.id, "timings");
  r.public_metrics = parse_json_column(st.column_text_view(20), r.id, "public_metrics");
  r.private_metrics = parse_json_column(st.column_text_view(21), r.id, "private_metrics");
  r.error_text = st.column_text(22);
  r.text_feedback = st.column_text(23);
  r.code_diff = st.column_text(24);
  r.code = st.column_text(25);
  return r;
}

// Inside the caller's transaction. The explicit check gives a clear message instead of
// SQLite's "UNIQUE constraint failed".
void insert_program(sqlite3* db, const ProgramRecord& r) {
  Statement exists(db, "SELECT 1 FROM programs WHERE id = ?1");
  exists.bind(1, r.id);
  if (exists.step()) throw SystemError("duplicate program id " + r.id);
  Statement st(db, kInsertProgram);
  bind_program(st, r);
  st.run();
}

void require_changed(int changed, const std::string& what) {
  if (changed == 0) throw SystemError(what);
}

}  // namespace

std::string_view to_string(FailureKind k) { return kFailureNames[static_cast<std::size_t>(k)]; }

std::optional<FailureKind> failure_kind_from(std::string_view s) {
  for (std::size_t i = 0; i < kFailureNames.size(); ++i) {
    if (kFailureNames[i] == s) return static_cast<FailureKind>(i);
  }
  return std::nullopt;
}

namespace {

// SQLite's codes for a file that is not (or no longer) a database.
bool is_damaged(sqlite3* db) {
  int code = db ? sqlite3_errcode(db) & 0xff : SQLITE_OK;
  return code == SQLITE_NOTADB || code == SQLITE_CORRUPT;
}

std::string not_a_run(std::uintmax_t size) {
  if (size == 0) return "is empty (0 bytes): not a braid run (a run killed before it started; start it again with `braid evolve`)";
  return "is not a braid database (damaged, truncated or another kind of file)";
}

}  // namespace

std::string read_only_sqlite_name(const std::filesystem::path& path, bool live_reader) {
  std::error_code ec;
  auto beside = [&](const char* suffix) {
    auto p = path;
    p += suffix;
    return p;
  };
  const bool wal_empty = !std::filesystem::exists(beside("-wal"), ec) || std::filesystem::file_size(beside("-wal"), ec) == 0;
  const bool no_shm = !std::filesystem::exists(beside("-shm"), ec);
  const auto folder = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  const bool folder_read_only = ::access(folder.c_str(), W_OK) != 0;
  // No -wal content and no -shm: no writer has the file open, and every commit is in the file.
  const bool snapshot = wal_empty && (live_reader ? folder_read_only : no_shm || folder_read_only);
  // sqlite3 URIs escape '%', '?' and '#' in the path.
  std::string uri = "file:";
  for (char c : std::filesystem::absolute(path).string()) {
    if (c == '%' || c == '?' || c == '#') uri += fmt::format("%{:02X}", static_cast<unsigned char>(c));
    else uri += c;
  }
  return snapshot ? uri + "?immutable=1" : uri + "?mode=ro";
}

std::optional<std::int64_t> schema_object_count(const std::filesystem::path& path) {
  sqlite3* raw = nullptr;
  std::optional<std::int64_t> count;
  if (sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(raw, "SELECT COUNT(*) FROM sqlite_master", -1, &st, nullptr) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
      count = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
  }
  sqlite3_close_v2(raw);
  return count;
}

ProgramDatabase::ProgramDatabase(const std::filesystem::path& path, DbAccess access) : path_(path) {
  const bool live = access == DbAccess::LiveReadOnly;
  const bool read_only = access == DbAccess::ReadOnly || live;
  std::error_code size_ec;
  const bool exists = std::filesystem::exists(path);
  if (read_only && !exists) {
    throw SystemError("no program database at " + path.string());
  }
  if (access == DbAccess::Existing && !exists) throw UserError(path.string(), "no such database");
  const std::uintmax_t size = exists ? std::filesystem::file_size(path, size_ec) : 0;
  // A 0-byte file is a valid empty SQLite database: never let it pass for a run.
  if (access != DbAccess::ReadWrite && exists && !size_ec && size == 0) throw UserError(path.string(), not_a_run(0));
  int flags = SQLITE_OPEN_FULLMUTEX |
              (read_only ? SQLITE_OPEN_READONLY
                         : access == DbAccess::Existing ? SQLITE_OPEN_READWRITE : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  std::string target = path.string();
  if (read_only) {
    flags |= SQLITE_OPEN_URI;
    target = read_only_sqlite_name(path, /*live_reader=*/live);
  }
  if (sqlite3_open_v2(target.c_str(), &db_, flags, nullptr) != SQLITE_OK) {
    std::string message = "cannot open database " + path.string() + ": " +
                          (db_ ? sqlite3_errmsg(db_) : "out of memory");
    sqlite3_close_v2(db_);
    db_ = nullptr;
    throw SystemError(message);
  }
  try {
    // Waits for another connection's write (a second braid process, the web UI) instead of
    // failing at once with SQLITE_BUSY.
    sqlite3_busy_timeout(db_, live ? 5000 : 10000);
    sql::exec(db_, "PRAGMA foreign_keys = ON");
    // Reads through a memory map instead of a read() per page: summaries() of 100k programs
    // scans ~0.5 GB, and this halves its time. SQLite clamps the size to its compiled limit.
    sql::exec(db_, "PRAGMA mmap_size = 2147418112");
    if (access != DbAccess::ReadWrite) {
      Statement has_meta(db_, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'");
      if (!has_meta.step() || !meta("schema_version")) throw UserError(path.string(), not_a_run(size));
    }
    if (!read_only) {
      // WAL: readers in other processes never block the writer and see only committed rows.
      // synchronous=NORMAL keeps every committed transaction across a process kill (the WAL
      // is written before COMMIT returns); only a power loss can drop the last commits.
      sql::exec(db_, "PRAGMA journal_mode = WAL");
      sql::exec(db_, "PRAGMA synchronous = NORMAL");
      sql::Transaction tx(db_);
      sql::exec(db_, kSchema);
      Statement version(db_, "SELECT value FROM meta WHERE key = 'schema_version'");
      if (version.step()) {
        int stored = std::atoi(std::string(version.column_text_view(0)).c_str());
        if (stored > kSchemaVersion) {
          throw UserError(path.string(), "database schema version " + std::to_string(stored) +
                                             " is newer than this braid's (" +
                                             std::to_string(kSchemaVersion) + ")");
        }
      } else {
        Statement set(db_, "INSERT INTO meta (key, value) VALUES ('schema_version', ?1)");
        set.bind(1, std::to_string(kSchemaVersion)).run();
      }
      tx.commit();
    }
  } catch (const SystemError&) {
    const bool damaged = is_damaged(db_);
    const std::string reason = db_ ? sqlite3_errmsg(db_) : "";
    sqlite3_close_v2(db_);
    db_ = nullptr;
    if (damaged) throw UserError(path.string(), not_a_run(size) + " (SQLite: " + reason + ")");
    throw;
  } catch (...) {
    sqlite3_close_v2(db_);
    db_ = nullptr;
    throw;
  }
}

ProgramDatabase::~ProgramDatabase() { sqlite3_close_v2(db_); }

void ProgramDatabase::insert(const ProgramRecord& record) {
  sql::ConnectionLock lock(db_);
  sql::Transaction tx(db_);
  insert_program(db_, record);
  tx.commit();
}

void ProgramDatabase::insert_batch(const std::vector<ProgramRecord>& records) {
  sql::ConnectionLock lock(db_);
  sql::Transaction tx(db_);
  Statement exists(db_, "SELECT 1 FROM programs WHERE id = ?1");
  Statement st(db_, kInsertProgram);
  for (const auto& r : records) {
    exists.reset();
    exists.bind(1, r.id);
    if (exists.step()) throw SystemError("duplicate program id " + r.id);
    st.reset();
    bind_program(st, r);
    st.run();
  }
  tx.commit();
}

std::optional<ProgramRecord> ProgramDatabase::get(const std::string& id) const {
  sql::ConnectionLock lock(db_);
  Statement st(db_, std::string("SELECT ") + kProgramColumns + " FROM programs WHERE id = ?1");
  st.bind(1, id);
  if (!st.step()) return std::nullopt;
  return read_program(st);
}

std::vector<ProgramRecord> ProgramDatabase::query(const ProgramQuery& q) const {
  std::string text = std::string("SELECT ") + kProgramColumns + " FROM programs";
  std::string where;
  if (q.island) where += " island_idx = ?1";
  if (q.correct) where += std::string(where.empty() ? "" : " AND") + " correct = ?2";
  if (!where.empty()) text += " WHERE" + where;
  if (q.order_by == "generation") {
    text += " ORDER BY generation ASC, rowid ASC";
  } else if (q.order_by == "score") {
    text += " ORDER BY combined_score DESC, generation ASC, rowid ASC";
  } else {
    throw UserError("", "unknown program order '" + q.order_by + "' (generation|score)");
  }
  text += " LIMIT ?3 OFFSET ?4";

  sql::ConnectionLock lock(db_);
  Statement st(db_, text);
  if (q.island) st.bind(1, *q.island);
  if (q.correct) st.bind(2, *q.correct);
  st.bind(3, static_cast<std::int64_t>(q.limit < 0 ? -1 : q.limit));
  st.bind(4, static_cast<std::int64_t>(q.offset < 0 ? 0 : q.offset));
  std::vector<ProgramRecord> out;
  while (st.step()) out.push_back(read_program(st));
  return out;
}

std::vector<ProgramSummary> ProgramDatabase::summaries() const {
  sql::ConnectionLock lock(db_);
  std::vector<ProgramSummary> out;
  out.reserve(static_cast<std::size_t>(count()));
  Statement st(db_,
               "SELECT id, generation, island_idx, combined_score, correct, failure_kind, "
               "in_archive, knob_key, archive_cell, embedding, parent_id, patch_type, migrated_from "
               "FROM programs ORDER BY rowid");
  while (st.step()) {
    ProgramSummary& s = out.emplace_back();
    read_common_columns(st, s);
    s.patch_type = st.column_text(11);
    s.migrated_from = st.column_text(12);
  }
  // A table scan in insertion order and a sort here is several times faster than walking
  // the generation index (a b-tree lookup per row); rows arrive nearly sorted already.
  std::stable_sort(out.begin(), out.end(), [](const ProgramSummary& a, const ProgramSummary& b) {
    return a.generation < b.generation;
  });
  return out;
}

std::int64_t ProgramDatabase::count() const {
  sql::ConnectionLock lock(db_);
  Statement st(db_, "SELECT COUNT(*) FROM programs");
  st.step();
  return st.column_int(0);
}

std::int64_t ProgramDatabase::max_generation() const {
  sql::ConnectionLock lock(db_);
  Statement st(db_, "SELECT MAX(generation) FROM programs");
  st.step();
  return st.column_is_null(0) ? -1 : st.column_int(0);
}

bool ProgramDatabase::has_generation(std::int64_t generation) const {
  sql::ConnectionLock lock(db_);
  Statement st(db_, "SELECT 1 FROM programs WHERE generation = ?1 LIMIT 1");
  st.bind(1, generation);
  return st.step();
}

void ProgramDatabase::set_in_archive(const std::vector<std::string>& added,
                                     const std::vector<std::string>& removed) {
  sql::ConnectionLock lock(db_);
  sql::Transaction tx(db_);
  Statement st(db_, "UPDATE programs SET in_archive = ?1 WHERE id = ?2");
  // Removals first, so an id in both lists (evicted and re-admitted) ends in the archive.
  for (const auto& id : removed) {
    st.reset();
    st.bind(1, false).bind(2, id);
    require_changed(st.run(), "set_in_archive: no program " + id);
  }
  for (const auto& id : added) {
    st.reset();
    st.bind(1, true).bind(2, id);
    require_changed(st.run(), "set_in_archive: no program " + id);
  }
  tx.commit();
}

void ProgramDatabase::set_text_feedback(const std::string& id, const std::string& feedback) {
  sql::ConnectionLock lock(db_);
  Statement st(db_, "UPDATE programs SET text_feedback = ?1 WHERE id = ?2");
  st.bind(1, feedback).bind(2, id);
  require_changed(st.run(), "set_text_feedback: no program " + id);
}

void ProgramDatabase::insert_attempt(const AttemptRecord& a) {
  sql::ConnectionLock lock(db_);
  Statement st(db_,
               "INSERT INTO attempts (generation, parent_id, patch_type, patch_text, reason, error, "
               "created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
  st.bind(1, a.generation)
      .bind(2, a.parent_id)
      .bind(3, a.patch_type)
      .bind(4, a.patch_text)
      .bind(5, a.reason)
      .bind(6, a.error)
      .bind(7, a.created_at);
  st.run();
}

std::vector<AttemptRecord> ProgramDatabase::attempts(std::int64_t since_generation, int limit) const {
  sql::ConnectionLock lock(db_);
  // The newest `limit` rows, turned back into chronological order.
  Statement st(db_,
               "SELECT generation, parent_id, patch_type, patch_text, reason, error, created_at "
               "FROM (SELECT * FROM attempts WHERE generation >= ?1 ORDER BY seq DESC LIMIT ?2) "
               "ORDER BY seq ASC");
  st.bind(1, since_generation).bind(2, static_cast<std::int64_t>(limit < 0 ? -1 : limit));
  std::vector<AttemptRecord> out;
  while (st.step()) {
    AttemptRecord& a = out.emplace_back();
    a.generation = st.column_int(0);
    a.parent_id = st.column_text(1);
    a.patch_type = st.column_text(2);
    a.patch_text = st.column_text(3);
    a.reason = st.column_text(4);
    a.error = st.column_text(5);
    a.created_at = st.column_real(6);
  }
  return out;
}

void ProgramDatabase::set_meta(const std::string& key, const std::string& value) {
  sql::ConnectionLock lock(db_);
  Statement st(db_,
               "INSERT INTO meta (key, value) VALUES (?1, ?2) "
               "ON CONFLICT (key) DO UPDATE SET value = excluded.value");
  st.bind(1, key).bind(2, value).run();
}

void ProgramDatabase::set_metas(const std::vector<std::pair<std::string, std::string>>& entries) {
  sql::ConnectionLock lock(db_);
  sql::Transaction tx(db_);
  Statement st(db_,
               "INSERT INTO meta (key, value) VALUES (?1, ?2) "
               "ON CONFLICT (key) DO UPDATE SET value = excluded.value");
  for (const auto& [key, value] : entries) {
    st.bind(1, key).bind(2, value).run();
    st.reset();
  }
  tx.commit();
}

std::optional<std::string> ProgramDatabase::meta(const std::string& key) const {
  sql::ConnectionLock lock(db_);
  Statement st(db_, "SELECT value FROM meta WHERE key = ?1");
  st.bind(1, key);
  if (!st.step()) return std::nullopt;
  return st.column_text(0);
}

void ProgramDatabase::add_job(long pgid, const std::string& start_marker, const std::string& what) {
  sql::ConnectionLock lock(db_);
  Statement st(db_,
               "INSERT OR REPLACE INTO jobs (pgid, start_marker, what, added_at) "
               "VALUES (?1, ?2, ?3, ?4)");
  st.bind(1, static_cast<std::int64_t>(pgid)).bind(2, start_marker).bind(3, what).bind(4, now_unix_seconds()).run();
}

void ProgramDatabase::remove_job(long pgid) {
  sql::ConnectionLock lock(db_);
  Statement st(db_, "DELETE FROM jobs WHERE pgid = ?1");
  st.bind(1, static_cast<std::int64_t>(pgid)).run();
}

std::vector<std::tuple<long, std::string, std::string>> ProgramDatabase::jobs() const {
  sql::ConnectionLock lock(db_);
  Statement st(db_, "SELECT pgid, start_marker, what FROM jobs ORDER BY added_at ASC, pgid ASC");
  std::vector<std::tuple<long, std::string, std::string>> out;
  while (st.step()) {
    out.emplace_back(static_cast<long>(st.column_int(0)), st.column_text(1), st.column_text(2));
  }
  return out;
}

std::string ProgramDatabase::integrity_check() const {
  sql::ConnectionLock lock(db_);
  // Corruption is the finding this reports, so SQLite refusing to read a damaged page
  // (SQLITE_CORRUPT instead of a report row) is returned as the report, not thrown.
  sqlite3_stmt* st = nullptr;
  std::string out;
  int rc = sqlite3_prepare_v2(db_, "PRAGMA integrity_check", -1, &st, nullptr);
  while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (!out.empty()) out += '\n';
    out += reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    rc = SQLITE_OK;
  }
  if (rc != SQLITE_DONE) {
    if (!out.empty()) out += '\n';
    out += sqlite3_errmsg(db_);
  }
  sqlite3_finalize(st);
  return out;
}

}  // namespace braid
