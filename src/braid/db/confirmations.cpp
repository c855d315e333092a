// The confirmations table: one row per confirmation of a would-be best by re-runs
// (search/confirmation.hpp); and the remeasurements table: each of those re-runs (and every other
// re-measurement) as it came out, for a resume to take instead of measuring again.
#include <sqlite3.h>

#include "braid/db/database.hpp"
#include "braid/db/sqlite_statement.hpp"

namespace braid {
namespace {

bool table_exists(sqlite3* db, const char* name) {
  sql::Statement st(db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?");
  st.bind(1, name);
  return st.step();
}

std::vector<double> doubles_of(const std::string& text) {
  std::vector<double> out;
  json j = json::parse(text, nullptr, false);
  if (j.is_array())
    for (const auto& v : j)
      if (v.is_number()) out.push_back(v.get<double>());
  return out;
}

ConfirmationRecord read_confirmation(const sql::Statement& st) {
  ConfirmationRecord c;
  c.id = st.column_text(0);
  c.code_hash = st.column_text(1);
  c.first = st.column_double(2);
  c.samples = doubles_of(st.column_text(3));
  c.against = st.column_text(4);
  c.against_hash = st.column_text(5);
  c.against_samples = doubles_of(st.column_text(6));
  c.promoted = st.column_int(7) != 0;
  c.why = st.column_text(8);
  c.created_at = st.column_double(9);
  return c;
}

void create_table(sqlite3* db) {
  sql::exec(db,
            "CREATE TABLE IF NOT EXISTS confirmations ("
            " program_id TEXT NOT NULL, code_hash TEXT NOT NULL, first REAL NOT NULL, samples TEXT NOT NULL,"
            " against TEXT NOT NULL, against_hash TEXT NOT NULL, against_samples TEXT NOT NULL,"
            " promoted INTEGER NOT NULL, why TEXT NOT NULL, created_at REAL NOT NULL)");
}

void create_remeasurements(sqlite3* db) {
  sql::exec(db,
            "CREATE TABLE IF NOT EXISTS remeasurements ("
            " label TEXT NOT NULL, code_hash TEXT NOT NULL, failure_kind TEXT NOT NULL, correct INTEGER NOT NULL,"
            " combined_score REAL NOT NULL, public_metrics TEXT NOT NULL, error_text TEXT NOT NULL,"
            " created_at REAL NOT NULL, PRIMARY KEY (label, code_hash))");
}

void insert_row(sqlite3* db, const ConfirmationRecord& c) {
  sql::ConnectionLock lock(db);
  sql::Statement st(db,
                    "INSERT INTO confirmations (program_id, code_hash, first, samples, against, against_hash, "
                    "against_samples, promoted, why, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  st.bind(1, c.id).bind(2, c.code_hash).bind(3, c.first).bind(4, json(c.samples).dump()).bind(5, c.against);
  st.bind(6, c.against_hash)
      .bind(7, json(c.against_samples).dump())
      .bind(8, c.promoted)
      .bind(9, c.why)
      .bind(10, c.created_at);
  st.run();
}

std::vector<ConfirmationRecord> load_rows(sqlite3* db) {
  std::vector<ConfirmationRecord> out;
  sql::ConnectionLock lock(db);
  if (!table_exists(db, "confirmations")) return out;
  sql::Statement st(
      db,
      "SELECT program_id, code_hash, first, samples, against, against_hash, against_samples, promoted, why, "
      "created_at FROM confirmations ORDER BY rowid");
  while (st.step()) out.push_back(read_confirmation(st));
  return out;
}

}  // namespace

void ProgramDatabase::ensure_confirmations_table() {
  create_table(db_);
  create_remeasurements(db_);
}
void ProgramDatabase::insert_confirmation(const ConfirmationRecord& c) { insert_row(db_, c); }
std::vector<ConfirmationRecord> ProgramDatabase::confirmations() const { return load_rows(db_); }

void ProgramDatabase::insert_remeasurement(const RemeasurementRecord& r) {
  sql::ConnectionLock lock(db_);
  sql::Statement st(db_,
                    "INSERT OR REPLACE INTO remeasurements (label, code_hash, failure_kind, correct, combined_score, "
                    "public_metrics, error_text, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)");
  st.bind(1, r.label).bind(2, r.code_hash).bind(3, std::string(to_string(r.failure))).bind(4, r.correct);
  st.bind(5, r.combined_score).bind(6, r.public_metrics.dump()).bind(7, r.error_text).bind(8, r.created_at);
  st.run();
}

std::optional<RemeasurementRecord> ProgramDatabase::remeasurement(const std::string& label,
                                                                  const std::string& code_hash) const {
  sql::ConnectionLock lock(db_);
  if (!table_exists(db_, "remeasurements")) return std::nullopt;
  sql::Statement st(db_,
                    "SELECT failure_kind, correct, combined_score, public_metrics, error_text, created_at "
                    "FROM remeasurements WHERE label = ? AND code_hash = ?");
  st.bind(1, label).bind(2, code_hash);
  if (!st.step()) return std::nullopt;
  const auto failure = failure_kind_from(st.column_text(0));
  if (!failure) return std::nullopt;  // written by a braid that knows another kind: measured again
  RemeasurementRecord r;
  r.label = label;
  r.code_hash = code_hash;
  r.failure = *failure;
  r.correct = st.column_int(1) != 0;
  r.combined_score = st.column_double(2);
  r.public_metrics = json::parse(st.column_text(3), nullptr, false);
  if (!r.public_metrics.is_object()) r.public_metrics = json::object();
  r.error_text = st.column_text(4);
  r.created_at = st.column_double(5);
  return r;
}

}  // namespace braid
