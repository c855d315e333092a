// The confirmations table: one row per re-measurement of a would-be best (search/confirmation.hpp).
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

void ProgramDatabase::ensure_confirmations_table() { create_table(db_); }
void ProgramDatabase::insert_confirmation(const ConfirmationRecord& c) { insert_row(db_, c); }
std::vector<ConfirmationRecord> ProgramDatabase::confirmations() const { return load_rows(db_); }

}  // namespace braid
