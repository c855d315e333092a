// Small RAII layer over the SQLite C API, private to db/ (every table and statement lives in
// db/). Errors become SystemError with SQLite's message.
#pragma once
#include <sqlite3.h>

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace braid::sql {

[[noreturn]] void throw_error(sqlite3* db, std::string_view what);

// Runs statements without results (DDL, PRAGMA with no row, BEGIN/COMMIT).
void exec(sqlite3* db, const char* sql);

class Statement {
 public:
  Statement(sqlite3* db, std::string_view sql);
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Binds are 1-based as in SQLite; values are copied (SQLITE_TRANSIENT) only when needed.
  Statement& bind(int index, std::string_view text);
  Statement& bind(int index, const char* text) { return bind(index, std::string_view(text)); }
  Statement& bind(int index, const std::string& text) { return bind(index, std::string_view(text)); }
  Statement& bind(int index, std::int64_t value);
  Statement& bind(int index, int value) { return bind(index, static_cast<std::int64_t>(value)); }
  Statement& bind(int index, bool value) { return bind(index, static_cast<std::int64_t>(value)); }
  Statement& bind(int index, double value);
  Statement& bind_blob(int index, const void* data, std::size_t bytes);
  Statement& bind_null(int index);

  // True while a row is available; false when done. Throws on error, with `sqlite3_errmsg`.
  bool step();
  // Runs a statement that returns no row; returns the number of rows changed.
  int run();
  void reset();

  std::int64_t column_int(int col) const { return sqlite3_column_int64(stmt_, col); }
  double column_double(int col) const { return sqlite3_column_double(stmt_, col); }  // NULL -> 0
  // SQLite turns a bound NaN into NULL; reading NULL as NaN makes doubles round-trip.
  double column_real(int col) const {
    return column_is_null(col) ? std::numeric_limits<double>::quiet_NaN() : sqlite3_column_double(stmt_, col);
  }
  bool column_is_null(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
  std::string column_text(int col) const;
  std::string_view column_text_view(int col) const;  // valid until the next step()
  std::vector<float> column_floats(int col) const;

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
};

// A write transaction that nests: BEGIN IMMEDIATE at top level (the write lock is taken
// up front, so concurrent writers wait in busy_timeout instead of failing on upgrade),
// a SAVEPOINT inside a caller's transaction. Rolls back unless commit() ran.
class Transaction {
 public:
  explicit Transaction(sqlite3* db);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  void commit();

 private:
  sqlite3* db_;
  bool nested_;
  bool done_ = false;
};

// Holds the connection's own (recursive) mutex, so a multi-statement transaction from one
// thread never interleaves with statements from another thread on the same connection.
class ConnectionLock {
 public:
  explicit ConnectionLock(sqlite3* db) : mutex_(sqlite3_db_mutex(db)) { sqlite3_mutex_enter(mutex_); }
  ~ConnectionLock() { sqlite3_mutex_leave(mutex_); }
  ConnectionLock(const ConnectionLock&) = delete;
  ConnectionLock& operator=(const ConnectionLock&) = delete;

 private:
  sqlite3_mutex* mutex_;
};

}  // namespace braid::sql
