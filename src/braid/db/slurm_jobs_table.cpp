// The slurm_jobs table: braid's Slurm jobs (eval/slurm_jobs.hpp), so that a braid started again
// after kill -9 finds them. Written through the database's own connection (its mutex keeps these
// statements apart from the search's transactions).
#include <sqlite3.h>

#include "braid/db/database.hpp"
#include "braid/db/sqlite_statement.hpp"

namespace braid {
namespace {

constexpr const char* kColumns =
    "SELECT candidate_id, job_id, code_hash, job_dir, state, attempts, submitted_at, updated_at FROM slurm_jobs ";

SlurmJobEntry entry_from(const sql::Statement& st) {
  SlurmJobEntry e;
  e.candidate_id = st.column_text(0);
  e.job_id = st.column_text(1);
  e.code_hash = st.column_text(2);
  e.job_dir = st.column_text(3);
  e.state = st.column_text(4);
  e.attempts = int(st.column_int(5));
  e.submitted_at = st.column_double(6);
  e.updated_at = st.column_double(7);
  return e;
}

}  // namespace

void ProgramDatabase::ensure_slurm_jobs_table() {
  sql::ConnectionLock lock(db_);
  sql::exec(db_,
            "CREATE TABLE IF NOT EXISTS slurm_jobs ("
            " candidate_id TEXT PRIMARY KEY, job_id TEXT NOT NULL, code_hash TEXT NOT NULL, job_dir TEXT NOT NULL,"
            " state TEXT NOT NULL, attempts INTEGER NOT NULL, submitted_at REAL NOT NULL, updated_at REAL NOT NULL)");
}

void ProgramDatabase::put_slurm_job(const SlurmJobEntry& e) {
  sql::ConnectionLock lock(db_);
  sql::Statement st(db_,
                    "INSERT OR REPLACE INTO slurm_jobs (candidate_id, job_id, code_hash, job_dir, state, attempts,"
                    " submitted_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
  st.bind(1, e.candidate_id).bind(2, e.job_id).bind(3, e.code_hash).bind(4, e.job_dir).bind(5, e.state);
  st.bind(6, e.attempts).bind(7, e.submitted_at).bind(8, e.updated_at);
  st.run();
}

std::optional<SlurmJobEntry> ProgramDatabase::slurm_job(const std::string& candidate_id) const {
  sql::ConnectionLock lock(db_);
  sql::Statement st(db_, std::string(kColumns) + "WHERE candidate_id = ?1");
  st.bind(1, candidate_id);
  if (!st.step()) return std::nullopt;
  return entry_from(st);
}

std::vector<SlurmJobEntry> ProgramDatabase::slurm_jobs_with_state(const std::string& state) const {
  sql::ConnectionLock lock(db_);
  sql::Statement st(db_, std::string(kColumns) + "WHERE state = ?1 ORDER BY submitted_at");
  st.bind(1, state);
  std::vector<SlurmJobEntry> out;
  while (st.step()) out.push_back(entry_from(st));
  return out;
}

}  // namespace braid
