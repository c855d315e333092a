// The llm_calls table: one row per LLM call (tokens, cost, latency, attempts, error kind), written
// through the cost ledger's sink while the search runs.
#include <sqlite3.h>

#include "braid/db/database.hpp"
#include "braid/db/sqlite_statement.hpp"
#include "braid/util/error.hpp"

namespace braid {

void ProgramDatabase::ensure_llm_calls_table() {
  const char* sql =
      "CREATE TABLE IF NOT EXISTS llm_calls ("
      " seq INTEGER, replay_key TEXT, purpose TEXT, model TEXT, generation INTEGER,"
      " tokens_in INTEGER, tokens_out INTEGER, cost_usd REAL, latency_s REAL, attempts INTEGER,"
      " error_kind TEXT, error TEXT, retried_errors TEXT, created_at REAL)";
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    throw SystemError("cannot create table llm_calls: " + msg);
  }
}

std::optional<std::string> ProgramDatabase::insert_llm_call(const LlmCallRecord& rec) {
  sql::ConnectionLock lock(db_);
  try {
    sql::Statement st(
        db_,
        "INSERT INTO llm_calls (seq, replay_key, purpose, model, generation, tokens_in, tokens_out, cost_usd,"
        " latency_s, attempts, error_kind, error, retried_errors, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
    st.bind(1, rec.seq).bind(2, rec.replay_key).bind(3, rec.purpose).bind(4, rec.model).bind(5, rec.generation);
    st.bind(6, rec.tokens_in)
        .bind(7, rec.tokens_out)
        .bind(8, rec.cost_usd)
        .bind(9, rec.latency_s)
        .bind(10, rec.attempts);
    st.bind(11, rec.error_kind).bind(12, rec.error).bind(13, json(rec.retried_errors).dump()).bind(14, rec.created_at);
    st.run();
  } catch (const SystemError&) {
    return std::string(sqlite3_errmsg(db_));
  }
  return std::nullopt;
}

void ProgramDatabase::mark_llm_call_error(const std::string& replay_key, const std::string& kind,
                                          const std::string& error) {
  if (replay_key.empty()) return;
  sql::ConnectionLock lock(db_);
  try {
    sql::Statement st(db_,
                      "UPDATE llm_calls SET error_kind = ?, error = ? WHERE rowid = (SELECT MAX(rowid) FROM llm_calls "
                      "WHERE replay_key = ?)");
    st.bind(1, kind).bind(2, error).bind(3, replay_key);
    st.run();
  } catch (const SystemError&) {
    // No table (the run made no call before): nothing to mark.
  }
}

LlmCallTotals ProgramDatabase::llm_call_totals() const {
  LlmCallTotals out;
  sql::ConnectionLock lock(db_);
  try {
    sql::Statement sums(db_,
                        "SELECT COUNT(*), COALESCE(SUM(tokens_in),0), COALESCE(SUM(tokens_out),0),"
                        " COALESCE(SUM(cost_usd),0) FROM llm_calls");
    if (sums.step()) {
      out.calls = sums.column_int(0);
      out.tokens_in = sums.column_int(1);
      out.tokens_out = sums.column_int(2);
      out.cost_usd = sums.column_double(3);
    }
  } catch (const SystemError&) {
    return out;  // no table: the run made no LLM call
  }
  sql::Statement errors(db_, "SELECT error_kind, retried_errors FROM llm_calls");
  while (errors.step()) {
    const std::string kind = errors.column_text(0);
    if (!kind.empty()) {
      ++out.errors[kind];
      ++out.errors_total;
    }
    json retried = json::parse(errors.column_text(1), nullptr, false);
    if (retried.is_array())
      for (auto& k : retried) {
        ++out.errors[k.get<std::string>()];
        ++out.errors_total;
      }
  }
  return out;
}

std::optional<LlmCallCost> ProgramDatabase::llm_call_cost() const {
  sql::ConnectionLock lock(db_);
  sql::Statement has(db_, "SELECT COUNT(*) FROM sqlite_master WHERE type='table' AND name='llm_calls'");
  if (!has.step() || has.column_int(0) != 1) return std::nullopt;
  // Older tables name the cost column `cost`.
  std::string cost_col;
  sql::Statement cols(db_, "SELECT name FROM pragma_table_info('llm_calls')");
  while (cols.step()) {
    std::string c = cols.column_text(0);
    if (c == "cost_usd" || (c == "cost" && cost_col.empty())) cost_col = c;
  }
  const std::string q =
      "SELECT COUNT(*)" + (cost_col.empty() ? std::string() : ", TOTAL(" + cost_col + ")") + " FROM llm_calls";
  sql::Statement sum(db_, q);
  LlmCallCost out;
  if (sum.step()) {
    out.calls = sum.column_int(0);
    if (!cost_col.empty()) out.cost_usd = sum.column_double(1);
  }
  return out;
}

}  // namespace braid
