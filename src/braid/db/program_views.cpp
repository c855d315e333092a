// The program queries of the read commands and the live web UI: counts, id prefixes, the
// compact rows the UI keeps in memory, and one program's columns as stored.
#include <sqlite3.h>

#include <cmath>
#include <cstdlib>

#include "braid/db/database.hpp"
#include "braid/db/sqlite_statement.hpp"

namespace braid {
namespace {

using sql::Statement;

// Only the numeric top-level metrics (the candidate list's columns), never the large texts.
constexpr const char* kCandidateRows =
    "SELECT rowid, id, parent_id, patch_type, model, archive_cell, generation, island_idx, "
    "combined_score, correct, failure_kind, created_at, cost_usd, in_archive, "
    "CASE WHEN json_valid(public_metrics) THEN json_extract(public_metrics, '$.ratio_to_bound') END, knob_key, "
    "CASE WHEN json_valid(public_metrics) AND json_type(public_metrics) = 'object' THEN (SELECT json_group_object(key, "
    "value) "
    "FROM json_each(public_metrics) WHERE type IN ('integer', 'real')) END "
    "FROM programs WHERE rowid > ? ORDER BY rowid";

CandidateRow read_candidate_row(const Statement& rows) {
  CandidateRow n;
  n.rowid = rows.column_int(0);
  n.id = rows.column_text(1);
  n.parent_id = rows.column_text(2);
  n.patch_type = rows.column_text(3);
  n.model = rows.column_text(4);
  n.archive_cell = rows.column_text(5);
  n.generation = rows.column_int(6);
  n.island = static_cast<int>(rows.column_int(7));
  n.score = rows.column_double(8);
  n.correct = rows.column_int(9) != 0;
  n.failure = rows.column_text(10);
  n.created_at = rows.column_double(11);
  n.cost_usd = rows.column_double(12);
  n.in_archive = rows.column_int(13) != 0;
  if (!rows.column_is_null(14)) {
    double r = rows.column_double(14);
    if (std::isfinite(r)) n.ratio_to_bound = r;
  }
  n.knob_key = rows.column_text(15);
  if (!rows.column_is_null(16)) {
    json m = json::parse(rows.column_text(16), nullptr, false);
    if (m.is_object())
      for (auto& [k, v] : m.items())
        if (v.is_number()) n.metrics.emplace_back(k, v.get<double>());
  }
  return n;
}

// Columns stored as JSON text; shown parsed so the UI can lay them out.
bool is_json_column(std::string_view name) {
  return name == "parent_ids" || name == "timings" || name == "public_metrics" || name == "private_metrics";
}

bool is_text_column(std::string_view name) {
  return name == "code" || name == "id" || name == "parent_id" || name == "text_feedback" || name == "error_text" ||
         name == "code_diff" || name == "failure_kind" || name == "patch_type" || name == "model" ||
         name == "knob_key" || name == "archive_cell" || name == "migrated_from" || name == "system_msg_hash";
}

// One column of a `SELECT *` row as JSON, by its name.
json column_json(const Statement& row, int col, std::string_view name) {
  if (row.column_is_null(col)) return nullptr;
  if (is_json_column(name)) {
    std::string text = row.column_text(col);
    json parsed = json::parse(text, nullptr, false);
    return parsed.is_discarded() ? json(text) : parsed;
  }
  if (is_text_column(name)) return row.column_text(col);
  if (name == "combined_score" || name == "cost_usd" || name == "created_at") return row.column_double(col);
  if (name == "run_seed") return std::to_string(static_cast<std::uint64_t>(row.column_int(col)));
  std::string text = row.column_text(col);
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  return (end && *end == '\0' && !text.empty()) ? json(v) : json(text);
}

}  // namespace

std::map<std::string, std::int64_t> ProgramDatabase::failure_counts() const {
  sql::ConnectionLock lock(db_);
  Statement st(db_, "SELECT failure_kind, COUNT(*) FROM programs GROUP BY failure_kind");
  std::map<std::string, std::int64_t> out;
  while (st.step()) out[st.column_text(0)] = st.column_int(1);
  return out;
}

std::int64_t ProgramDatabase::delete_generations_from(std::int64_t generation) {
  sql::ConnectionLock lock(db_);
  Statement st(db_, "DELETE FROM programs WHERE generation >= ?1");
  st.bind(1, generation);
  return st.run();
}

std::vector<std::string> ProgramDatabase::ids_with_prefix(const std::string& prefix, int limit) const {
  sql::ConnectionLock lock(db_);
  Statement st(db_, "SELECT id FROM programs WHERE substr(id, 1, length(?1)) = ?1 ORDER BY id LIMIT ?2");
  st.bind(1, prefix).bind(2, limit);
  std::vector<std::string> out;
  while (st.step()) out.push_back(st.column_text(0));
  return out;
}

std::vector<std::pair<std::string, std::string>> ProgramDatabase::correct_program_codes() const {
  sql::ConnectionLock lock(db_);
  Statement st(db_, "SELECT id, code FROM programs WHERE correct = 1");
  std::vector<std::pair<std::string, std::string>> out;
  while (st.step()) out.emplace_back(st.column_text(0), st.column_text(1));
  return out;
}

std::optional<ProgramCode> ProgramDatabase::program_code(const std::string& id) const {
  sql::ConnectionLock lock(db_);
  Statement st(db_, "SELECT code, combined_score, generation FROM programs WHERE id = ?");
  st.bind(1, id);
  if (!st.step()) return std::nullopt;
  return ProgramCode{st.column_text(0), st.column_double(1), st.column_int(2)};
}

std::optional<std::string> ProgramDatabase::first_seed_code() const {
  sql::ConnectionLock lock(db_);
  Statement st(db_, "SELECT code FROM programs WHERE patch_type = 'seed' ORDER BY rowid LIMIT 1");
  if (!st.step()) return std::nullopt;
  return st.column_text(0);
}

std::int64_t ProgramDatabase::data_version() const {
  sql::ConnectionLock lock(db_);
  Statement version(db_, "PRAGMA data_version");
  return version.step() ? version.column_int(0) : 0;
}

std::vector<CandidateRow> ProgramDatabase::candidates_after(std::int64_t rowid) const {
  sql::ConnectionLock lock(db_);
  Statement rows(db_, kCandidateRows);
  rows.bind(1, rowid);
  std::vector<CandidateRow> out;
  while (rows.step()) out.push_back(read_candidate_row(rows));
  return out;
}

std::vector<std::string> ProgramDatabase::archive_ids() const {
  sql::ConnectionLock lock(db_);
  Statement rows(db_, "SELECT id FROM programs WHERE in_archive = 1");
  std::vector<std::string> out;
  while (rows.step()) out.push_back(rows.column_text(0));
  return out;
}

std::optional<json> ProgramDatabase::program_columns(const std::string& id) const {
  sql::ConnectionLock lock(db_);
  Statement row(db_, "SELECT * FROM programs WHERE id = ?");
  row.bind(1, id);
  if (!row.step()) return std::nullopt;
  json rec = json::object();
  // Column names come from the database itself so columns added later are shown too.
  Statement names(db_, "SELECT name FROM pragma_table_info('programs') ORDER BY cid");
  for (int col = 0; names.step(); ++col) {
    std::string name = names.column_text(0);
    if (name == "embedding") rec["embedding_dims"] = row.column_floats(col).size();
    else rec[name] = column_json(row, col, name);
  }
  return rec;
}

}  // namespace braid
