#include "braid/db/sqlite_statement.hpp"

#include <cstring>

#include "braid/util/error.hpp"

namespace braid::sql {

void throw_error(sqlite3* db, std::string_view what) {
  std::string message(what);
  message += ": ";
  message += db ? sqlite3_errmsg(db) : "out of memory";
  if (db) {
    const char* file = sqlite3_db_filename(db, "main");
    if (file && *file) {
      message += " (";
      message += file;
      message += ")";
    }
  }
  throw SystemError(message);
}

void exec(sqlite3* db, const char* sql) {
  char* error = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &error) != SQLITE_OK) {
    std::string message = std::string("sqlite: ") + (error ? error : "unknown error") + " in: " + sql;
    sqlite3_free(error);
    throw SystemError(message);
  }
}

Statement::Statement(sqlite3* db, std::string_view sql) : db_(db) {
  if (sqlite3_prepare_v2(db, sql.data(), static_cast<int>(sql.size()), &stmt_, nullptr) != SQLITE_OK) {
    throw_error(db, "sqlite prepare '" + std::string(sql.substr(0, 60)) + "'");
  }
}

Statement::~Statement() { sqlite3_finalize(stmt_); }

Statement& Statement::bind(int index, std::string_view text) {
  // A non-null pointer even for "", so the column stores '' rather than NULL.
  const char* data = text.data() ? text.data() : "";
  if (sqlite3_bind_text64(stmt_, index, data, text.size(), SQLITE_TRANSIENT, SQLITE_UTF8) != SQLITE_OK) {
    throw_error(db_, "sqlite bind");
  }
  return *this;
}

Statement& Statement::bind(int index, std::int64_t value) {
  if (sqlite3_bind_int64(stmt_, index, value) != SQLITE_OK) throw_error(db_, "sqlite bind");
  return *this;
}

Statement& Statement::bind(int index, double value) {
  if (sqlite3_bind_double(stmt_, index, value) != SQLITE_OK) throw_error(db_, "sqlite bind");
  return *this;
}

Statement& Statement::bind_blob(int index, const void* data, std::size_t bytes) {
  // A zero-length blob (not NULL) for an empty vector keeps the column's type uniform.
  if (sqlite3_bind_blob64(stmt_, index, bytes ? data : "", bytes, SQLITE_TRANSIENT) != SQLITE_OK) {
    throw_error(db_, "sqlite bind");
  }
  return *this;
}

Statement& Statement::bind_null(int index) {
  if (sqlite3_bind_null(stmt_, index) != SQLITE_OK) throw_error(db_, "sqlite bind");
  return *this;
}

bool Statement::step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  throw_error(db_, "sqlite step");
}

int Statement::run() {
  while (step()) {
  }
  return sqlite3_changes(db_);
}

void Statement::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

std::string Statement::column_text(int col) const { return std::string(column_text_view(col)); }

std::string_view Statement::column_text_view(int col) const {
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
  if (!text) return {};
  return {text, static_cast<std::size_t>(sqlite3_column_bytes(stmt_, col))};
}

std::vector<float> Statement::column_floats(int col) const {
  // Native float32 (little-endian on every host braid targets), as written by bind_blob.
  const void* data = sqlite3_column_blob(stmt_, col);
  auto count = static_cast<std::size_t>(sqlite3_column_bytes(stmt_, col)) / sizeof(float);
  if (!data || count == 0) return {};
  // SQLite gives no alignment guarantee for blobs, and the vector must not be zero-filled
  // first (summaries() copies ~200 MB for 100k programs): construct it from the bytes.
  if (reinterpret_cast<std::uintptr_t>(data) % alignof(float) == 0) {
    const auto* first = static_cast<const float*>(data);
    return std::vector<float>(first, first + count);
  }
  std::vector<float> out;
  out.reserve(count);
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < count; ++i) {
    float value;
    std::memcpy(&value, bytes + i * sizeof(float), sizeof(float));
    out.push_back(value);
  }
  return out;
}

Transaction::Transaction(sqlite3* db) : db_(db), nested_(sqlite3_get_autocommit(db) == 0) {
  exec(db_, nested_ ? "SAVEPOINT braid_tx" : "BEGIN IMMEDIATE");
}

Transaction::~Transaction() {
  if (done_) return;
  // Errors here cannot be reported (destructor during unwinding); SQLite leaves the
  // database unchanged by an unfinished transaction in any case.
  if (nested_) {
    sqlite3_exec(db_, "ROLLBACK TO braid_tx; RELEASE braid_tx", nullptr, nullptr, nullptr);
  } else {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
}

void Transaction::commit() {
  exec(db_, nested_ ? "RELEASE braid_tx" : "COMMIT");
  done_ = true;
}

}  // namespace braid::sql
