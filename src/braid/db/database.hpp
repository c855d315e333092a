// ProgramDatabase: SQLite (WAL, synchronous=NORMAL, one transaction per insert) holding
// every evaluated candidate, failures included, plus the run's metadata. Safe against
// kill -9: a candidate is either fully stored or absent.
//
// Tables: programs (columns of ProgramRecord), attempts (AttemptRecord), meta (key/value:
// config JSON, run seed, workload path, schema version), jobs (process groups of running
// evaluations, so a restarted braid can end orphans), archive membership lives in
// programs.in_archive. Tables other modules need are created on their first use, so runs
// recorded before them stay readable: confirmations (search/confirmation.hpp), llm_calls (the
// LLM cost ledger's calls), slurm_jobs (eval/slurm_jobs.hpp). Every SQL statement of braid is
// in this folder; other modules see plain value types (record.hpp).
#pragma once
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "braid/db/record.hpp"

struct sqlite3;

namespace braid {

// ReadOnly opens an existing database (another process may be writing it: WAL lets readers
// see the last committed state) and never changes the file or its folder, which may be
// read-only; ReadWrite creates it if absent; Existing writes a database that must already be a
// braid one (resume: a missing, empty or foreign file is refused, never turned into a new run).
// A file that is not a braid database (garbage, truncated, 0 bytes) is a UserError naming it.
// LiveReadOnly is ReadOnly for a reader that stays open while a run may start writing (the web
// UI): see read_only_sqlite_name().
enum class DbAccess { ReadWrite, ReadOnly, Existing, LiveReadOnly };

// The name to open `path` with (sqlite3_open_v2, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI) so
// that reading writes nothing beside the file: a read-only connection to a WAL database would
// otherwise create -wal/-shm files, and fails where they cannot be created (a read-only
// folder). When no writer can have the file open (no -wal content, no -shm; or a read-only
// folder) it is read as immutable. A `live_reader` (the web UI, which keeps reading while a
// run may start writing) takes the immutable path only in a read-only folder.
std::string read_only_sqlite_name(const std::filesystem::path& path, bool live_reader);

// How many tables and indexes the SQLite file at `path` holds; nullopt when it cannot be opened
// or read. 0 tells a file a set-up killed early left behind from a braid database.
std::optional<std::int64_t> schema_object_count(const std::filesystem::path& path);

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

  // Removes the programs of generations >= `generation` (benchmarks restore a cached database
  // to its size); returns how many went.
  std::int64_t delete_generations_from(std::int64_t generation);

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

  // Program views (program_views.cpp).
  std::map<std::string, std::int64_t> failure_counts() const;  // by stored failure kind
  // Ids starting with `prefix`, in id order, at most `limit`.
  std::vector<std::string> ids_with_prefix(const std::string& prefix, int limit) const;
  // (id, code) of every correct program.
  std::vector<std::pair<std::string, std::string>> correct_program_codes() const;
  std::optional<ProgramCode> program_code(const std::string& id) const;
  std::optional<std::string> first_seed_code() const;  // the first seed stored
  // Changes whenever another connection commits; costs no I/O (PRAGMA data_version).
  std::int64_t data_version() const;
  // Candidates stored after `rowid` (0: all), in storage order.
  std::vector<CandidateRow> candidates_after(std::int64_t rowid) const;
  std::vector<std::string> archive_ids() const;  // programs in the archive
  // Every column of the program as stored, by name (columns a newer braid added included): JSON
  // columns parsed, the embedding as `embedding_dims`, run_seed as a decimal string.
  std::optional<json> program_columns(const std::string& id) const;

  // The confirmations and remeasurements tables (confirmations.cpp): created where absent (old
  // runs gain them on resume); reading a run from before them gives no rows.
  void ensure_confirmations_table();
  void insert_confirmation(const ConfirmationRecord& c);
  std::vector<ConfirmationRecord> confirmations() const;  // oldest first
  void insert_remeasurement(const RemeasurementRecord& r);  // replaces one of the same key
  std::optional<RemeasurementRecord> remeasurement(const std::string& label, const std::string& code_hash) const;

  // The llm_calls table (llm_calls.cpp): one row per LLM call.
  void ensure_llm_calls_table();
  // The error, when the row could not be written (the call happened anyway: not fatal).
  std::optional<std::string> insert_llm_call(const LlmCallRecord& call);
  // A call whose answer proved unusable afterwards: its latest row with `replay_key` gets that
  // error. Best effort: nothing happens without the table or the row.
  void mark_llm_call_error(const std::string& replay_key, const std::string& kind, const std::string& error);
  LlmCallTotals llm_call_totals() const;
  std::optional<LlmCallCost> llm_call_cost() const;  // nullopt: no llm_calls table

  // The slurm_jobs table (slurm_jobs_table.cpp), keyed by candidate id.
  void ensure_slurm_jobs_table();
  void put_slurm_job(const SlurmJobEntry& entry);  // replaces the candidate's row
  std::optional<SlurmJobEntry> slurm_job(const std::string& candidate_id) const;
  std::vector<SlurmJobEntry> slurm_jobs_with_state(const std::string& state) const;  // oldest submission first

 private:
  sqlite3* db_ = nullptr;
  std::filesystem::path path_;
};

}  // namespace braid
