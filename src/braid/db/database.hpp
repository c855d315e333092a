// ProgramDatabase: SQLite (WAL, synchronous=NORMAL, one transaction per insert) holding
// every evaluated candidate, failures included, plus the run's metadata. Safe against
// kill -9: a candidate is either fully stored or absent.
//
// Tables: programs (columns of ProgramRecord), attempts (AttemptRecord), meta (key/value:
// config JSON, run seed, workload path, schema version), jobs (process groups of running
// evaluations, so a restarted braid can end orphans), archive membership lives in
// programs.in_archive.
#pragma once
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "braid/db/record.hpp"

struct sqlite3;

namespace braid {

// ReadOnly opens an existing database (another process may be writing it: WAL lets readers
// see the last committed state) and never changes the file or its folder, which may be
// read-only; ReadWrite creates it if absent; Existing writes a database that must already be a
// braid one (resume: a missing, empty or foreign file is refused, never turned into a new run).
// A file that is not a braid database (garbage, truncated, 0 bytes) is a UserError naming it.
enum class DbAccess { ReadWrite, ReadOnly, Existing };

// The name to open `path` with (sqlite3_open_v2, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI) so
// that reading writes nothing beside the file: a read-only connection to a WAL database would
// otherwise create -wal/-shm files, and fails where they cannot be created (a read-only
// folder). When no writer can have the file open (no -wal content, no -shm; or a read-only
// folder) it is read as immutable. A `live_reader` (the web UI, which keeps reading while a
// run may start writing) takes the immutable path only in a read-only folder.
std::string read_only_sqlite_name(const std::filesystem::path& path, bool live_reader);

struct ProgramQuery {
  std::optional<int> island;
  std::optional<bool> correct;
  std::string order_by = "generation";  // "generation" | "score" (desc)
  int limit = -1;
  int offset = 0;
};

class ProgramDatabase {
 public:
  // Opens or creates; throws SystemError on I/O failure.
  explicit ProgramDatabase(const std::filesystem::path& path, DbAccess access = DbAccess::ReadWrite);
  ~ProgramDatabase();
  ProgramDatabase(const ProgramDatabase&) = delete;
  ProgramDatabase& operator=(const ProgramDatabase&) = delete;

  void insert(const ProgramRecord& record);  // one transaction; throws on duplicate id
  // All records in one transaction, all or none (imports, benchmark setup).
  void insert_batch(const std::vector<ProgramRecord>& records);
  std::optional<ProgramRecord> get(const std::string& id) const;
  std::vector<ProgramRecord> query(const ProgramQuery& q) const;
  std::vector<ProgramSummary> summaries() const;  // every program, compact, generation order
  std::int64_t count() const;
  std::int64_t max_generation() const;             // -1 when empty
  bool has_generation(std::int64_t generation) const;

  // Archive membership changes are batched in one transaction.
  void set_in_archive(const std::vector<std::string>& added, const std::vector<std::string>& removed);
  void set_text_feedback(const std::string& id, const std::string& feedback);

  void insert_attempt(const AttemptRecord& a);
  // Attempts with generation >= since_generation, oldest first; with a limit, the most
  // recent `limit` of them.
  std::vector<AttemptRecord> attempts(std::int64_t since_generation = 0, int limit = -1) const;

  void set_meta(const std::string& key, const std::string& value);
  // Several keys in one transaction: all or none survive a kill.
  void set_metas(const std::vector<std::pair<std::string, std::string>>& entries);
  std::optional<std::string> meta(const std::string& key) const;

  // Process groups of evaluations in flight (pgid + the process start time, so a recycled
  // pid is never killed).
  void add_job(long pgid, const std::string& start_marker, const std::string& what);
  void remove_job(long pgid);  // re-adding a pgid replaces its row
  std::vector<std::tuple<long, std::string, std::string>> jobs() const;

  std::string integrity_check() const;  // "ok" when clean, else SQLite's lines
  static constexpr int kSchemaVersion = 1;  // meta "schema_version"
  sqlite3* handle() const { return db_; } // for modules that add their own tables (llm, report)

 private:
  sqlite3* db_ = nullptr;
  std::filesystem::path path_;
};

}  // namespace braid
