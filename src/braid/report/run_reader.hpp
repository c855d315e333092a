// RunReader: a read-only, live view of one results folder (evolution.db, meta_N.txt,
// meta_memory.json, gen_N/ logs) for `braid serve` and `braid report`.
//
// The database is opened read-only (DbAccess::LiveReadOnly) while `braid evolve` may be writing it (WAL).
// Every candidate's compact columns (no code, no JSON blobs) are held in memory and extended
// incrementally by rowid, so the lineage, curves and paged listings never reload the table;
// heavy columns (code, diff, metrics, feedback) are read one candidate at a time by primary key.
//
// All public methods are thread-safe (one mutex per run) and return JSON values whose shape is
// documented in web/API.md.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "braid/db/database.hpp"
#include "braid/util/json.hpp"

namespace braid::report {

// One candidate as kept in memory: its compact columns (db/record.hpp) and its place in the tree.
struct CandidateNode : CandidateRow {
  std::int32_t parent_index = -1;        // index into nodes, -1 for seeds or unknown parents
  std::vector<std::uint32_t> children;   // indices into nodes, insertion order
};

// A best-so-far curve: step points where the best improved (x = evaluations or seconds).
struct CurvePoint {
  double x = 0.0;
  double y = 0.0;
  std::string id;  // candidate that set the new best
};
struct Curve {
  std::string label;  // "all" or "island N"
  std::vector<CurvePoint> points;
  double x_end = 0.0;  // last x of the run, so the step line extends to the present
};

enum class CurveAxis { Evaluations, WallSeconds };
enum class CurveValue { BestScore, RatioToBoundOfBest };

struct CandidatePageQuery {
  // "score" (desc) | "generation" (desc) | "generation_asc" | "knob:NAME" | "metric:NAME"
  std::string order = "score";
  bool ascending = false;       // knob: and metric: orders only (their default: descending)
  std::optional<int> island;
  std::optional<std::string> failure;
  int offset = 0;
  int limit = 50;
};

struct TreeQuery {
  std::string focus;    // candidate id; "" = the best candidate
  int up = 4;           // ancestor levels above the focus
  int down = 2;         // descendant levels below the focus
  int max_children = 8; // children shown per node (best first; the focus path always shown)
  int max_nodes = 400;
};

class RunReader {
 public:
  // Throws UserError when `results_dir` holds no evolution.db or it is not a braid database.
  explicit RunReader(const std::filesystem::path& results_dir);
  ~RunReader();
  RunReader(const RunReader&) = delete;
  RunReader& operator=(const RunReader&) = delete;

  const std::filesystem::path& dir() const { return dir_; }
  std::string name() const;  // folder name shown in the UI

  // Reads candidates added since the last call; cheap when the database did not change.
  // Returns true when something new was read.
  bool refresh();

  json status();                                  // counts and the change counter for polling
  json overview();                                // best, failure counts, per island, LLM cost
  json candidates(const CandidatePageQuery& q);   // one page of the listing
  std::optional<json> candidate(const std::string& id);  // full record, diff, logs
  json tree(const TreeQuery& q);                  // laid-out subtree around a node
  json children(const std::string& id, int offset, int limit);
  json islands();
  json archive(int offset, int limit);
  json meta();                                    // meta recommendations over time
  json best_knobs();                              // the best candidate's knob values

  // Trust views (run_trust.cpp): what an engineer needs to judge the reported best.
  json points();         // every correct candidate by evaluation index, with its re-runs
  json state();          // running / done / interrupted, N of M generations, ETA
  json workload();       // the workload the run evaluated (compare refuses mixed ones)
  json export_json();    // every candidate with its knobs and numeric metrics
  std::string export_csv();

  std::vector<Curve> curves(CurveAxis axis, CurveValue value, bool per_island);
  // A copy of the compact nodes (the report uses them for its tables).
  std::vector<CandidateNode> top_candidates(int limit);
  std::int64_t count();

 private:
  bool refresh_locked();
  void read_new_rows();
  void refresh_archive_flags();
  std::optional<std::uint32_t> index_of(const std::string& id) const;
  std::optional<std::uint32_t> best_index() const;
  json best_json() const;
  json meta_json(const char* key) const;  // a meta value parsed; null when absent or unreadable
  json node_json(const CandidateNode& n) const;
  std::vector<Curve> curves_locked(CurveAxis axis, CurveValue value, bool per_island) const;
  json state_locked() const;
  json live_activity() const;  // <results>/activity.json of a running search, or null
  json export_locked() const;
  void add_trust_fields(json& items) const;  // the points' measurement fields, per listed node  // export_json() under the lock

  std::filesystem::path dir_;
  std::filesystem::path db_path_;
  std::unique_ptr<ProgramDatabase> db_;
  std::mutex mutex_;
  std::vector<CandidateNode> nodes_;
  std::unordered_map<std::string, std::uint32_t> by_id_;
  std::unordered_map<std::string, std::vector<std::uint32_t>> orphans_;  // children seen before parent
  std::int64_t last_rowid_ = 0;
  std::int64_t data_version_ = -1;
  std::int64_t changes_ = 0;  // bumped on every refresh that read something (for polling)
  double archive_checked_at_ = 0.0;
  bool archive_dirty_ = false;
};

}  // namespace braid::report
