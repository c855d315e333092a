#include "braid/search/runner.hpp"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <thread>
#include <unordered_set>

#include <fmt/format.h>

#include "braid/mutate/knob_mutator.hpp"
#include "braid/program/patch.hpp"
#include "braid/program/program.hpp"
#include "braid/search/archive.hpp"
#include "braid/search/confirmation.hpp"
#include "braid/search/exclusive_bench.hpp"
#include "braid/search/meta_stats.hpp"
#include "braid/search/migration.hpp"
#include "braid/search/population.hpp"
#include "braid/search/proposal.hpp"
#include "braid/search/proposal_pool.hpp"
#include "braid/search/remeasure.hpp"
#include "braid/search/schedule.hpp"
#include "braid/search/selection.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/hash.hpp"
#include "braid/util/log.hpp"
#include "braid/util/subprocess.hpp"
#include "braid/db/sqlite_statement.hpp"

namespace braid {

std::filesystem::path db_path(const std::filesystem::path& results_dir) { return results_dir / "evolution.db"; }

int end_orphaned_jobs(ProgramDatabase& db) {
  int ended = 0;
  for (auto& [pgid, marker, what] : db.jobs()) {
    if (kill_process_group_if_alive(pgid, marker)) {
      log::warn("ended orphaned process group {} ({}) left by an earlier braid", pgid, what);
      ++ended;
    }
    db.remove_job(pgid);
  }
  return ended;
}

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

struct Done {
  ProgramRecord record;
};

}  // namespace

struct EvolutionRunner::Impl {
  std::filesystem::path results;
  ProgramDatabase& db;
  RunnerParts parts;
  SearchConfig& cfg;
  std::uint64_t run_seed = 0;

  std::mutex db_mutex;  // every ProgramDatabase call goes through it
  // The search thread changes `pop` and reads it freely; proposals on other threads read the
  // embeddings under a shared lock, so additions (which reallocate) take it exclusively.
  std::shared_mutex pop_mutex;
  Population pop;
  Archive archive;
  std::unique_ptr<ParentSelector> selector;

  // Evaluation workers hand finished candidates back through this queue.
  std::mutex q_mutex;
  std::condition_variable q_cv;
  std::deque<Done> done_queue;
  std::map<std::int64_t, std::thread> workers;  // by generation; joined when collected
  // Generations proposed and not yet indexed in memory: evaluating, or finished and waiting in
  // `completed` for their turn. Results are indexed in generation order, and generation g is
  // proposed only once every generation <= g - max_parallel_jobs is indexed, so what a proposal
  // sees does not depend on which evaluation happened to finish first (a replayed run repeats).
  std::set<std::int64_t> in_flight;
  std::map<std::int64_t, std::string> pending_knob_keys;  // accepted, not yet indexed: generation -> knob key
  // Proposals (search/proposal.hpp): asked on the pool's threads when the mutator asks a remote
  // model, settled here in generation order; accepted candidates wait in `ready` for an
  // evaluation slot (max_parallel_jobs).
  ProposalSteps steps;
  std::map<std::int64_t, std::unique_ptr<PreparedProposal>> proposing;
  std::set<std::int64_t> asked;  // generations of `proposing` whose ask has returned
  std::map<std::int64_t, ProgramRecord> ready;
  std::vector<std::unique_ptr<PreparedProposal>> dropped;  // may still be read by a pool thread
  std::unique_ptr<ProposalPool> pool;  // declared last: destroyed (threads joined) first
  std::map<std::int64_t, ProgramRecord> completed;  // stored in the database, not yet indexed
  std::atomic<bool> discard_results{false};
  std::map<long, std::string> running_jobs;  // pgid -> what (for stop)

  std::vector<std::string> seed_ids;  // per island
  std::vector<int> runnable_islands;
  std::vector<std::string> recent_ids;  // since the last meta summary
  std::int64_t last_meta_at = 0;
  std::int64_t last_migration_at = 0;
  std::string meta_recommendations;
  RunStatus status;
  std::string last_failure_id;  // whose diagnostics status.last_failure holds
  std::string islands_note, stop_note;  // parts of status.note
  bool target_reached = false;          // config stop_when met by an indexed candidate
  json refuted = json::object();        // meta target_refuted: code hash -> runs and why (re-runs disagreed)
  const std::atomic<bool>* stop_flag = nullptr;  // run()'s stop request
  std::string best_id;                            // the program in best/
  double best_score = 0.0;
  // Trusted estimates by program text (confirmed medians, search/confirmation.hpp).
  std::unordered_map<std::string, Estimate> estimates;
  std::unordered_map<std::string, std::string> code_hash_of;  // program id -> hash_hex(code)
  std::optional<NoiseLevel> noise;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  std::int64_t done_at_start = 0;

  Impl(std::filesystem::path r, ProgramDatabase& d, RunnerParts p)
      : results(std::move(r)),
        db(d),
        parts(std::move(p)),
        cfg(parts.config),
        archive(cfg.archive_size, cfg.elite_selection_ratio),
        selector(make_parent_selector(cfg)) {}

  // ---- database access (serialized) ----
  void insert(const ProgramRecord& rec) {
    std::lock_guard lock(db_mutex);
    db.insert(rec);
  }
  std::optional<ProgramRecord> get(const std::string& id) {
    std::lock_guard lock(db_mutex);
    return db.get(id);
  }

  void load_state() {
    std::vector<ProgramSummary> all;
    {
      std::lock_guard lock(db_mutex);
      all = db.summaries();
      auto s = db.meta("run_seed");
      run_seed = s ? std::stoull(*s) : cfg.seed;
      if (auto m = db.meta("last_meta_at")) last_meta_at = std::stoll(*m);
      if (auto m = db.meta("last_migration_at")) last_migration_at = std::stoll(*m);
    }
    {
      std::lock_guard lock(db_mutex);
      ensure_confirmation_table(db.handle());
      estimates = estimates_by_code(load_confirmations(db.handle()));
      if (auto n = db.meta("noise")) noise = noise_from_json(*n);
      if (auto b = db.meta("best")) {
        json j = json::parse(*b, nullptr, false);
        if (j.is_object()) {
          best_id = j.value("id", std::string());
          best_score = j.value("score", 0.0);
        }
      }
      sql::Statement st(db.handle(), "SELECT id, code FROM programs WHERE correct = 1");
      while (st.step()) code_hash_of[st.column_text(0)] = hash_hex(st.column_text_view(1));
    }
    for (auto& s : all) {
      apply_estimate(s);
      pop.add(std::move(s));
    }
    archive.load(pop);
    seed_ids.assign(std::size_t(cfg.num_islands), "");
    for (std::size_t i = 0; i < pop.size(); ++i) {
      const auto& p = pop.at(i);
      if (p.patch_type == "seed" && p.island_idx < cfg.num_islands) seed_ids[std::size_t(p.island_idx)] = p.id;
    }
    auto mem = try_read_file(results / "meta_memory.json");
    if (mem) {
      try {
        json j = json::parse(*mem);
        meta_recommendations = render_recommendations(j.value("recommendations", json::array()));
      } catch (...) {
        log::warn("meta_memory.json is not valid JSON; starting meta summaries afresh");
      }
    }
    done_at_start = pop.done_count();
    if (cfg.stop_when.enabled()) {  // resume: a stored candidate may already meet the goal
      std::optional<std::string> met;
      {
        std::lock_guard lock(db_mutex);
        met = db.meta("target_reached");
      }
      if (met) {  // recorded for this same goal: no need to read every stored candidate again
        json t = json::parse(*met, nullptr, false);
        if (!t.is_discarded() && t.value("goal", std::string()) == cfg.stop_when.describe()) {
          target_reached = true;
          stop_note = target_note(t.value("metric", std::string()), t.value("value", 0.0), t.value("goal", std::string()),
                                  t.value("id", std::string()), t.value("generation", std::int64_t{0}));
        }
      }
    }
    if (cfg.stop_when.confirm > 0) {  // programs already refuted by re-runs are not re-run again
      std::optional<std::string> r;
      {
        std::lock_guard lock(db_mutex);
        r = db.meta("target_refuted");
      }
      json t = r ? json::parse(*r, nullptr, false) : json();
      if (t.is_object()) refuted = std::move(t);
    }
    if (cfg.stop_when.enabled() && !target_reached) {
      std::vector<std::string> ids;
      for (std::size_t i = 0; i < pop.size(); ++i)
        if (pop.at(i).failure == FailureKind::Ok && pop.at(i).patch_type != "migrant") ids.push_back(pop.at(i).id);
      for (const auto& id : ids)
        if (auto r = get(id); r && !target_reached) check_target(*r);
    }
    refresh_status();
  }

  static std::string render_recommendations(const json& recs) {
    std::string out;
    int i = 1;
    for (const auto& r : recs)
      if (r.is_string()) out += fmt::format("{}. {}\n", i++, r.get<std::string>());
    return out;
  }

  void refresh_status() {
    status.generations_total = cfg.num_generations;
    status.generations_done = pop.done_count();
    status.migrants = 0;
    for (std::size_t i = 0; i < pop.size(); ++i) status.migrants += pop.at(i).patch_type == "migrant" ? 1 : 0;
    status.evaluated = std::int64_t(pop.size()) - status.migrants;
    status.failed = std::int64_t(pop.failures().size());
    if (!pop.failures().empty() && pop.at(pop.failures().back()).id != last_failure_id) {
      const auto& f = pop.at(pop.failures().back());
      last_failure_id = f.id;
      std::string text;
      if (auto rec = get(f.id)) text = rec->error_text.substr(0, rec->error_text.find('\n'));
      status.last_failure = f.id + " " + std::string(to_string(f.failure)) + (text.empty() ? "" : ": " + text);
    }
    status.in_flight = int(workers.size());
    status.proposing = int(proposing.size());
    if (pool) {
      PoolStats ps = pool->stats();
      status.proposals_asking = ps.asking;
      status.proposal_wait_s = ps.oldest_wait_s;
      status.proposals_paused_s = ps.paused_s;
    }
    if (!pop.ranked_all().empty()) {
      const auto& b = pop.at(pop.ranked_all().front());
      status.best_score = b.combined_score;
      status.best_id = b.id;
    }
    status.best_confirmed = false;
    status.best_runs = status.best_id.empty() ? 0 : 1;
    if (!best_id.empty()) {  // the best whose score held up (best/)
      status.best_score = best_score;
      status.best_id = best_id;
      if (auto h = code_hash_of.find(best_id); h != code_hash_of.end() && trusted(h->second)) {
        status.best_confirmed = true;
        status.best_runs = int(estimates.at(h->second).samples.size());
      }
    }
    status.correct = std::int64_t(pop.ranked_all().size());
    status.noise = noise ? noise->describe() : std::string();
    status.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::int64_t progressed = status.generations_done - done_at_start;
    std::int64_t left = cfg.num_generations - status.generations_done;
    status.eta_s = progressed > 0 ? status.elapsed_s / double(progressed) * double(std::max<std::int64_t>(left, 0)) : -1.0;
    if (parts.llm_totals) status.llm_totals = parts.llm_totals();
    // Skipped islands, quarantined GPUs (the evaluator's note) and why the run is stopping.
    status.note.clear();
    for (const std::string& n : {islands_note, parts.evaluator->status_note(), stop_note})
      if (!n.empty()) status.note += (status.note.empty() ? "" : "; ") + n;
  }

  // ---- records ----
  ProgramRecord base_record(const std::string& code, std::int64_t generation, int island) {
    ProgramRecord r;
    r.code = code;
    r.generation = generation;
    r.island_idx = island;
    r.run_seed = run_seed;
    r.created_at = now_s();
    Program p = Program::parse(code, "candidate");
    if (p.ok()) r.knob_key = p.knob_key();
    r.embedding = parts.embedder->embed(code);
    r.archive_cell = archive_cell_for(r.knob_key, code);
    if (!cfg.task_sys_msg_per_island.empty()) r.system_msg_hash = hash_hex(cfg.task_sys_msg_per_island[std::size_t(island)]);
    return r;
  }

  void store(ProgramRecord rec) {
    insert(rec);
    index(rec);
  }

  // In-memory bookkeeping of a stored record (main thread only).
  void index(const ProgramRecord& rec) {
    ProgramSummary summary = summary_of(rec);
    if (rec.correct) code_hash_of[rec.id] = hash_hex(rec.code);
    apply_estimate(summary);
    {
      std::unique_lock lock(pop_mutex);
      pop.add(std::move(summary));
    }
    std::size_t idx = pop.size() - 1;
    // A migrant is a copy: its original already competes for an archive cell.
    ArchiveChange change = rec.patch_type == "migrant" ? ArchiveChange{} : archive.offer(pop, idx);
    if (!change.empty()) {
      std::lock_guard lock(db_mutex);
      db.set_in_archive(change.added, change.removed);
    }
    if (rec.patch_type != "seed" && rec.patch_type != "migrant") recent_ids.push_back(rec.id);
    if (rec.failure == FailureKind::Rejected) ++status.rejected;
    log::info("gen {} island {} {} {} -> {}{}", rec.generation, rec.island_idx, rec.patch_type, rec.id,
              to_string(rec.failure), rec.failure == FailureKind::Ok ? fmt::format(" score {:.4g}", rec.combined_score) : "");
    if (rec.patch_type != "seed") settle_best();  // seeds: once all are stored (ensure_seeds)
    check_target(rec);
  }

  // ---- trust in the best (search/confirmation.hpp) ----
  // A summary carries its program text's trusted estimate where one was measured.
  void apply_estimate(ProgramSummary& s) const {
    if (!s.correct) return;
    auto h = code_hash_of.find(s.id);
    if (h == code_hash_of.end()) return;
    if (auto e = estimates.find(h->second); e != estimates.end()) s.combined_score = e->second.score;
  }

  bool trusted(const std::string& code_hash) const {
    auto e = estimates.find(code_hash);
    return e != estimates.end() && !e->second.refuted && !e->second.samples.empty();
  }

  // best/ holds the highest-ranked program whose figure was confirmed by re-runs (and not
  // refuted by stop_when's). A program that would rank above it unconfirmed is re-measured
  // beside it first; a few rounds at most per call, the rest on the next.
  void settle_best() {
    for (int round = 0; round < 4; ++round) {
      const ProgramRecord* pick = nullptr;
      std::optional<ProgramRecord> rec;
      for (std::size_t idx : pop.ranked_all()) {
        rec = get(pop.at(idx).id);
        if (!rec || refuted.contains(hash_hex(rec->code))) continue;
        const std::string key = hash_hex(rec->code);
        auto e = estimates.find(key);
        if (e != estimates.end() && e->second.refuted) continue;  // lost its confirmation
        pick = &*rec;
        break;
      }
      if (!pick) return;
      const std::string key = hash_hex(pick->code);
      if (cfg.confirm_runs == 0 || trusted(key)) {
        const double figure = trusted(key) ? estimates.at(key).score : pick->combined_score;
        if (best_id.empty() || code_hash_of[best_id] != key || figure != best_score) write_best(*pick);
        return;
      }
      if (!confirm(*pick)) return;  // stopping: decided on resume
    }
  }

  // Re-measures `rec` confirm_runs times, each run followed by one of the incumbent best, and
  // promotes it iff every re-run is correct and its median beats the incumbent's. Stored as a
  // Confirmation; the estimates of both programs follow. False when a stop cut it short.
  bool confirm(const ProgramRecord& rec) {
    std::optional<ProgramRecord> incumbent;
    if (!best_id.empty() && best_id != rec.id) incumbent = get(best_id);
    if (incumbent && hash_hex(incumbent->code) == hash_hex(rec.code)) incumbent.reset();
    Confirmation c;
    c.id = rec.id;
    c.code_hash = hash_hex(rec.code);
    c.first = rec.combined_score;
    if (incumbent) {
      c.against = incumbent->id;
      c.against_hash = hash_hex(incumbent->code);
    }
    const auto dir = results / "remeasure";
    std::string failed;
    auto once = [&](const ProgramRecord& who, const std::string& label) -> std::optional<double> {
      const auto folder = dir / label;
      EvalResult r = remeasure(*parts.evaluator, who.code, label, run_seed, folder, job_observer());
      if (!(r.correct && r.failure == FailureKind::Ok)) {
        if (&who == &rec) failed = fmt::format("re-run {} {}: {}", label, to_string(r.failure), r.error_text.substr(0, 300));
        return std::nullopt;
      }
      std::error_code ec;
      std::filesystem::remove_all(folder, ec);  // kept only when a re-run failed
      return r.combined_score;
    };
    for (int k = 1; k <= cfg.confirm_runs && failed.empty(); ++k) {
      if ((stop_flag != nullptr && stop_flag->load()) || discard_results) return false;
      if (auto v = once(rec, fmt::format("{}-trust{}", rec.id, k))) c.samples.push_back(*v);
      else break;
      if (incumbent)
        if (auto v = once(*incumbent, fmt::format("{}-vs-{}-{}", incumbent->id, rec.id, k))) c.against_samples.push_back(*v);
    }
    if ((stop_flag != nullptr && stop_flag->load()) || discard_results) return false;
    if (!failed.empty()) c.why = failed;
    const double mine = c.estimate(), theirs = c.against_samples.empty() ? 0.0 : median(c.against_samples);
    c.promoted = c.why.empty() && (c.against_samples.empty() || mine > theirs);
    if (c.why.empty())
      c.why = c.against_samples.empty() ? fmt::format("median {:.4g}", mine)
                                        : fmt::format("median {:.4g} vs incumbent {} {:.4g}", mine, c.against, theirs);
    c.created_at = now_s();
    {
      std::lock_guard lock(db_mutex);
      store_confirmation(db.handle(), c);
    }
    log::info("{} {} after {} re-runs (first measured {:.4g}): {}", rec.id, c.promoted ? "confirmed as the new best" : "not promoted",
              c.samples.size(), c.first, c.why);
    // Both programs' estimates follow, wherever copies of them stand in the population.
    estimates = estimates_by_code(load_confirmations_locked());
    for (std::size_t i = 0; i < pop.size(); ++i) {
      auto h = code_hash_of.find(pop.at(i).id);
      if (h == code_hash_of.end() || (h->second != c.code_hash && h->second != c.against_hash)) continue;
      if (auto e = estimates.find(h->second); e != estimates.end()) pop.set_score(pop.at(i).id, e->second.score);
    }
    return true;  // settle_best writes best/ with the refreshed figures
  }

  std::vector<Confirmation> load_confirmations_locked() {
    std::lock_guard lock(db_mutex);
    return load_confirmations(db.handle());
  }

  // The run's noise level: the first seed re-timed noise_runs times (meta "noise"); the runs
  // also confirm the seed's figure, so the first best is a median, not one timing.
  void measure_noise() {
    if (cfg.noise_runs == 0 || noise || seed_ids.empty()) return;
    std::optional<ProgramRecord> seed;
    for (const auto& id : seed_ids)
      if (!id.empty() && (seed = get(id)) && seed->correct) break;
    if (!seed || !seed->correct) return;
    Confirmation c;
    c.id = seed->id;
    c.code_hash = hash_hex(seed->code);
    c.first = seed->combined_score;
    for (int k = 1; k <= cfg.noise_runs; ++k) {
      if ((stop_flag != nullptr && stop_flag->load()) || discard_results) return;
      const std::string label = fmt::format("{}-noise{}", seed->id, k);
      EvalResult r = remeasure(*parts.evaluator, seed->code, label, run_seed, results / "remeasure" / label, job_observer());
      // A stop (Ctrl-C, or its jobs cancelled) mid re-run is not the seed's fault.
      if ((stop_flag != nullptr && stop_flag->load()) || discard_results) return;
      if (!(r.correct && r.failure == FailureKind::Ok))
        throw UserError(parts.workload.program.string(), fmt::format("the seed program passed its evaluation but failed re-run {} ({}): {}",
                                                                   k, to_string(r.failure), r.error_text.substr(0, 800)));
      std::error_code ec;
      std::filesystem::remove_all(results / "remeasure" / label, ec);
      c.samples.push_back(r.combined_score);
    }
    NoiseLevel n;
    n.id = seed->id;
    n.samples = c.samples;
    n.samples.insert(n.samples.begin(), seed->combined_score);
    n.median = median(n.samples);
    n.spread = relative_spread(n.samples);
    c.promoted = true;
    c.why = "seed re-timed";
    c.created_at = now_s();
    {
      std::lock_guard lock(db_mutex);
      store_confirmation(db.handle(), c);
      db.set_meta("noise", n.to_json().dump());
    }
    noise = n;
    log::info("{}", n.describe());
    estimates = estimates_by_code(load_confirmations_locked());
    for (std::size_t i = 0; i < pop.size(); ++i) apply_estimate_to(pop.at(i).id);
  }

  void apply_estimate_to(const std::string& id) {
    auto h = code_hash_of.find(id);
    if (h == code_hash_of.end()) return;
    if (auto e = estimates.find(h->second); e != estimates.end()) pop.set_score(id, e->second.score);
  }

  static std::string target_note(const std::string& metric, double value, const std::string& goal, const std::string& id,
                                 std::int64_t generation) {
    return fmt::format("target reached: {} = {:.4g} ({}) by {} (generation {})", metric, value, goal, id, generation);
  }

  // stop_when: the first correct candidate (in generation order) that meets the goal ends the run;
  // with `confirm` re-runs, only once they agree (confirm_target).
  void check_target(const ProgramRecord& rec) {
    const StopWhen& w = cfg.stop_when;
    if (target_reached || !w.enabled() || rec.failure != FailureKind::Ok || rec.patch_type == "migrant") return;
    if (!w.met(rec.combined_score, rec.public_metrics)) return;
    double v = *w.value(rec.combined_score, rec.public_metrics);
    json info = {{"metric", w.metric}, {"value", v}, {"goal", w.describe()}, {"id", rec.id}, {"generation", rec.generation}};
    if (w.confirm > 0) {
      auto runs = confirm_target(rec, v);
      if (!runs) return;
      v = median(*runs);
      info["value"] = v;
      info["runs"] = *runs;
    }
    target_reached = true;
    stop_note = target_note(w.metric, v, w.describe(), rec.id, rec.generation);
    log::info("{}; no new candidates are proposed", stop_note);
    std::lock_guard lock(db_mutex);
    db.set_meta("target_reached", info.dump());
  }

  // Evaluates a candidate that met the goal `confirm` more times, with fresh inputs (new seeds),
  // outside the population: re-runs are measurements, not candidates. Returns every run's value
  // when each re-run is correct and the median meets the goal; otherwise the program (by code) is
  // recorded as refuted in meta target_refuted, so copies and a resume do not try it again.
  std::optional<std::vector<double>> confirm_target(const ProgramRecord& rec, double first) {
    const StopWhen& w = cfg.stop_when;
    const std::string key = hash_hex(rec.code);
    if (refuted.contains(key)) return std::nullopt;
    std::vector<double> runs{first};
    std::string why;
    for (int k = 1; k <= w.confirm && why.empty(); ++k) {
      EvalResult res = remeasure(*parts.evaluator, rec.code, fmt::format("{}-confirm{}", rec.id, k), run_seed,
                                 results / fmt::format("confirm_{}_{}", rec.id, k), job_observer());
      std::optional<double> v;
      if (res.correct && res.failure == FailureKind::Ok) v = w.value(res.combined_score, res.public_metrics);
      if (v) runs.push_back(*v);
      else why = fmt::format("re-run {}: {}", k, res.failure == FailureKind::Ok ? "no " + w.metric : std::string(to_string(res.failure)));
      log::info("confirming {} ({}): re-run {}/{} -> {}", rec.id, w.describe(), k, w.confirm, v ? fmt::format("{:.4g}", *v) : why);
    }
    if (why.empty() && w.met_value(median(runs))) return runs;
    if ((stop_flag != nullptr && stop_flag->load()) || discard_results) return std::nullopt;  // a stop: decided on resume
    if (why.empty()) why = fmt::format("median {:.4g}", median(runs));
    refuted[key] = {{"id", rec.id}, {"generation", rec.generation}, {"runs", runs}, {"why", why}};
    log::info("{} met {} in its evaluation but not on re-runs ({}); the search goes on", rec.id, w.describe(), why);
    {
      std::lock_guard lock(db_mutex);
      db.set_meta("target_refuted", refuted.dump());
    }
    rewrite_best();
    return std::nullopt;
  }

  void rewrite_best() { settle_best(); }

  // best/ and meta "best": the program with its trusted figure (the median of its re-runs) and
  // the single measurement of its evaluation beside it.
  void write_best(const ProgramRecord& rec) {
    const std::string key = hash_hex(rec.code);
    const bool confirmed = trusted(key);
    best_id = rec.id;
    best_score = confirmed ? estimates.at(key).score : rec.combined_score;
    const std::vector<double> samples = confirmed ? estimates.at(key).samples : std::vector<double>{rec.combined_score};
    json best = {{"id", rec.id}, {"score", best_score}, {"first", rec.combined_score}, {"confirmed", confirmed},
                 {"runs", samples.size()}, {"samples", samples}, {"spread", relative_spread(samples)}};
    if (noise) best["noise"] = noise->to_json();
    auto dir = results / "best";
    std::filesystem::create_directories(dir);
    auto ext = parts.workload.program.extension().string();
    write_file_atomic(dir / ("program" + ext), rec.code);
    json info = {{"id", rec.id}, {"generation", rec.generation}, {"island", rec.island_idx},
                 {"combined_score", best_score}, {"first_measurement", rec.combined_score}, {"confirmed", confirmed},
                 {"runs", samples}, {"public", rec.public_metrics}, {"text_feedback", rec.text_feedback}};
    write_file_atomic(dir / "metrics.json", info.dump(2));
    std::lock_guard lock(db_mutex);
    db.set_meta("best", best.dump());
  }

  // ---- evaluation ----
  std::filesystem::path work_dir_for(std::int64_t generation, int island, bool seed) {
    auto dir = results / (seed ? fmt::format("gen_0_island_{}", island) : fmt::format("gen_{}", generation));
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);  // a half-written folder of an interrupted attempt
    std::filesystem::create_directories(dir);
    return dir;
  }

  JobObserver job_observer() {
    return [this](long pgid, bool running, const std::string& what) {
      std::lock_guard lock(db_mutex);
      if (running) {
        db.add_job(pgid, process_start_marker(pgid), what);
        running_jobs[pgid] = what;
      } else {
        db.remove_job(pgid);
        running_jobs.erase(pgid);
      }
    };
  }

  void evaluate_into(ProgramRecord& rec, const std::filesystem::path& dir) {
    EvalRequest req;
    req.candidate_id = rec.id;
    req.code = rec.code;
    req.work_dir = dir;
    req.seed = hash64(rec.id, run_seed);
    EvalResult res = parts.evaluator->evaluate(req, job_observer());
    rec.failure = res.failure;
    rec.correct = res.correct && res.failure == FailureKind::Ok;
    rec.combined_score = rec.correct ? res.combined_score : 0.0;
    rec.public_metrics = res.public_metrics;
    rec.public_metrics["level_reached"] = res.level_reached;
    rec.private_metrics = res.private_metrics;
    rec.error_text = res.error_text;
    rec.text_feedback = res.text_feedback;
    rec.timings = res.timings;
    if (parts.feedback && cfg.use_text_feedback) {
      std::optional<ProgramRecord> parent;
      if (!rec.parent_id.empty()) parent = get(rec.parent_id);
      std::string fb = parts.feedback->diagnose(rec, parent ? &*parent : nullptr);
      if (!fb.empty()) rec.text_feedback = fb;
    }
  }

  // Accepted candidates start their evaluation, lowest generation first, while fewer than
  // max_parallel_jobs run.
  void launch_ready() {
    while (!ready.empty() && std::int64_t(workers.size()) < cfg.max_parallel_jobs) {
      launch(std::move(ready.begin()->second));
      ready.erase(ready.begin());
    }
  }

  void launch(ProgramRecord candidate) {
    std::int64_t g = candidate.generation;
    auto dir = work_dir_for(g, candidate.island_idx, false);
    workers[g] = std::thread([this, rec = std::move(candidate), dir]() mutable {
      evaluate_into(rec, dir);
      // Stored here, the moment its evaluation ends, so a kill -9 right after loses nothing;
      // a run we killed ourselves on stop is not a result.
      if (!discard_results) insert(rec);
      std::lock_guard lock(q_mutex);
      done_queue.push_back({std::move(rec)});
      q_cv.notify_all();
    });
  }

  void forget_pending(std::int64_t g, const std::string& knob_key) {
    in_flight.erase(g);
    pending_knob_keys.erase(g);
  }

  // Whether a candidate of a generation before `g` (indexed, or accepted and not yet indexed)
  // brought knob vector `key`. Nothing after g is indexed while g is pending.
  bool knob_key_taken(const std::string& key, std::int64_t g) const {
    if (pop.knob_key_seen(key)) return true;
    for (auto it = pending_knob_keys.begin(); it != pending_knob_keys.end() && it->first < g; ++it)
      if (it->second == key) return true;
    return false;
  }

  void collect(Done d) {
    std::int64_t g = d.record.generation;
    if (auto it = workers.find(g); it != workers.end()) {
      it->second.join();
      workers.erase(it);
    }
    if (!discard_results) launch_ready();
    if (discard_results) {  // we killed it on stop: not a result
      forget_pending(g, d.record.knob_key);
      return;
    }
    completed.emplace(g, std::move(d.record));
  }

  // Indexes finished generations <= limit in generation order (with the meta summaries and
  // migrations they trigger). False while one of them is still being evaluated.
  bool index_through(std::int64_t limit) {
    while (!in_flight.empty() && *in_flight.begin() <= limit) {
      auto it = completed.find(*in_flight.begin());
      if (it == completed.end()) return false;
      ProgramRecord rec = std::move(it->second);
      completed.erase(it);
      forget_pending(rec.generation, rec.knob_key);
      index(rec);
      maybe_meta();
      maybe_migrate();
    }
    return true;
  }

  // ---- seeds ----
  void ensure_seeds() {
    std::map<std::string, std::pair<std::string, std::vector<int>>> by_text;  // text -> (origin, islands)
    for (int i : runnable_islands) {
      if (!seed_ids[std::size_t(i)].empty()) continue;
      std::filesystem::path path = parts.workload.program;
      if (!cfg.init_program_paths_per_island.empty()) path = parts.workload.dir / cfg.init_program_paths_per_island[std::size_t(i)];
      auto text = try_read_file(path);
      if (!text) throw UserError(path.string(), "cannot read seed program");
      auto& entry = by_text[*text];
      entry.first = path.string();
      entry.second.push_back(i);
    }
    for (auto& [text, v] : by_text) {
      auto& [origin, islands] = v;
      ProgramRecord rec = base_record(text, 0, islands.front());
      rec.patch_type = "seed";
      rec.model = "seed";
      rec.id = hash_hex(fmt::format("seed:{}:{}", run_seed, islands.front()));
      log::info("evaluating seed program {} for island(s) {}", origin, fmt::join(islands, ","));
      evaluate_into(rec, work_dir_for(0, islands.front(), true));
      for (int island : islands) {
        ProgramRecord copy = rec;
        copy.island_idx = island;
        copy.id = hash_hex(fmt::format("seed:{}:{}", run_seed, island));
        store(copy);
        seed_ids[std::size_t(island)] = copy.id;
      }
      if (!rec.correct) throw_seed_failed(origin, rec);
    }
    // A resumed run whose seed failed has nothing to evolve either.
    for (const auto& id : seed_ids)
      if (const auto* s = id.empty() ? nullptr : pop.find(id); s && !s->correct)
        if (auto r = get(id)) throw_seed_failed(parts.workload.program.string(), *r);
  }

  // A seed that fails leaves nothing to evolve: the run stops at once with the seed's own error.
  [[noreturn]] void throw_seed_failed(const std::string& origin, const ProgramRecord& rec) {
    std::string error = rec.error_text;
    if (error.size() > 2000) error = error.substr(0, 2000) + "\n...";
    throw UserError(origin, fmt::format("the seed program failed its evaluation ({}): {}\n(work folder: {}; fix the program and "
                                        "start a new run)",
                                        to_string(rec.failure), error.empty() ? "no diagnostics" : error,
                                        (results / fmt::format("gen_0_island_{}", rec.island_idx)).string()));
  }

  // ---- proposal (search/proposal.hpp) ----
  // Generation g's plan, parent and inspirations, copied now: the population holds exactly the
  // generations <= g - lag, whatever the timing.
  std::unique_ptr<PreparedProposal> prepare(std::int64_t g) {
    ProposalSources src{cfg, run_seed, pop, archive, *selector, seed_ids, runnable_islands,
                        [this](const std::string& id) { return get(id); }, parts.workload.task, parts.workload.language,
                        meta_recommendations};
    return prepare_proposal(src, g);
  }

  // What proposals on other threads may call (every function thread-safe).
  void make_steps() {
    steps.cfg = &cfg;
    steps.run_seed = run_seed;
    steps.mutator = parts.mutator.get();
    steps.make_record = [this](const std::string& code, std::int64_t g, int island) { return base_record(code, g, island); };
    steps.similarity = [this](const std::vector<float>& e, std::size_t rows, std::string* nearest) {
      std::shared_lock lock(pop_mutex);
      return pop.max_similarity(e, nearest, rows);
    };
    steps.code_of = [this](const std::string& id) -> std::optional<std::string> {
      if (auto r = get(id)) return std::move(r->code);
      return std::nullopt;
    };
    steps.novelty_judge = parts.novelty_judge;
    steps.record_attempt = [this](const AttemptRecord& a) {
      std::lock_guard lock(db_mutex);
      db.insert_attempt(a);
    };
    steps.stopping = [this] { return stop_flag->load() || discard_results || (pool && pool->cancelled()); };
    steps.pool = pool.get();
  }

  // Prepares generation g's proposal and asks for it: on the pool when the mutator asks a
  // remote model, else here and now.
  void start_proposal(std::int64_t g) {
    in_flight.insert(g);
    PreparedProposal& p = *(proposing[g] = prepare(g));
    if (pool) {
      submit_ask(p);
      return;
    }
    do ask(p, steps);
    while (!settle(p));
    proposing.erase(g);
  }

  void submit_ask(PreparedProposal& p) {
    PreparedProposal* raw = &p;  // lives in `proposing` (or `dropped`) until the pool is gone
    pool->submit(p.generation, [this, raw] {
      try {
        ask(*raw, steps);
      } catch (...) {
        raw->error = std::current_exception();
      }
    });
  }

  // The search-thread step of an answered proposal: a knob-only edit must bring a knob vector
  // no candidate before it (evaluated or in flight) has; then the candidate waits for an
  // evaluation slot, or the generation is recorded as rejected. False: asked again.
  bool settle(PreparedProposal& p) {
    const std::int64_t g = p.generation;
    if (p.error) std::rethrow_exception(p.error);
    if (p.cancelled) {  // the run is stopping: proposed again on resume
      forget_pending(g, "");
      return true;
    }
    if (!p.exhausted && p.knob_only) {
      const std::string key = p.candidate->knob_key;
      if (knob_key_taken(key, g)) {
        p.last_text = p.candidate->code;
        p.candidate.reset();
        if (!count_failed_attempt(p, steps, "novelty", "knob vector already evaluated: " + key)) return false;
        p.exhausted = true;
      }
    }
    if (p.exhausted) {
      ProgramRecord rec = rejected_record(p, steps);
      insert(rec);
      completed.emplace(g, std::move(rec));
    } else {
      ProgramRecord rec = accepted_record(p, run_seed);
      if (!rec.knob_key.empty()) pending_knob_keys[g] = rec.knob_key;
      ready.emplace(g, std::move(rec));
    }
    launch_ready();
    return true;
  }

  // Answered proposals are settled as they come, but a knob-only edit only once every
  // generation before it is settled, so it is checked against all their knob vectors and no
  // later one (a replay repeats the outcome); meanwhile later candidates go on to evaluation.
  void settle_proposals() {
    if (!pool) return;
    for (std::int64_t g : pool->take_finished()) asked.insert(g);
    for (auto it = proposing.begin(); it != proposing.end();) {
      PreparedProposal& p = *it->second;
      const bool first = it == proposing.begin();
      if (!asked.count(it->first) || (p.knob_only && !p.exhausted && !p.error && !first)) {
        ++it;
        continue;
      }
      asked.erase(it->first);
      if (settle(p)) {
        it = proposing.erase(it);
        if (first) it = proposing.begin();  // the next may now be a knob-only edit's turn
      } else {
        submit_ask(p);
        ++it;
      }
    }
  }

  // Stopping (Ctrl-C, budget, goal): proposals not yet evaluated are dropped, and their
  // generations proposed again on resume; an answer still on its way is lost.
  void drop_proposals() {
    if (pool) pool->cancel();
    for (auto& [g, p] : proposing) {
      forget_pending(g, "");
      dropped.push_back(std::move(p));
    }
    proposing.clear();
    asked.clear();
    for (auto& [g, rec] : ready) forget_pending(g, rec.knob_key);
    ready.clear();
  }

  // ---- periodic work ----
  void maybe_meta() {
    std::int64_t done = pop.done_count();
    if (cfg.meta_rec_interval <= 0 || done - last_meta_at < cfg.meta_rec_interval || !parts.meta) return;
    std::vector<ProgramRecord> recent;
    for (auto& id : recent_ids)
      if (auto r = get(id)) recent.push_back(std::move(*r));
    std::optional<ProgramRecord> best;
    if (!pop.ranked_all().empty()) best = get(pop.at(pop.ranked_all().front()).id);
    json memory = json::object();
    if (auto m = try_read_file(results / "meta_memory.json")) {
      try {
        memory = json::parse(*m);
      } catch (...) {
      }
    }
    MetaUpdate u = parts.meta->summarize(recent, best ? &*best : nullptr, memory, done);
    json summaries = memory.value("summaries", json::array());
    summaries.push_back({{"generation", done}, {"summary", u.summary}});
    json history = memory.value("history", json::array());
    history.push_back({{"generation", done}, {"recommendations", u.recommendations}});
    json out = {{"summaries", summaries}, {"scratchpad", u.scratchpad}, {"recommendations", u.recommendations},
                {"history", history}, {"generation", done}};
    write_file_atomic(results / "meta_memory.json", out.dump(2));
    write_file_atomic(results / fmt::format("meta_{}.txt", done), render_meta_text(u, done));
    meta_recommendations = render_recommendations(out["recommendations"]);
    recent_ids.clear();
    last_meta_at = done;
    std::lock_guard lock(db_mutex);
    db.set_meta("last_meta_at", std::to_string(done));
  }

  void maybe_migrate() {
    std::int64_t done = pop.done_count();
    if (cfg.migration_interval <= 0 || cfg.num_islands < 2 || done - last_migration_at < cfg.migration_interval) return;
    auto rng = generation_rng(run_seed, done, 0x6d6967);
    auto moves = plan_migrations(cfg, pop, rng);
    for (const auto& m : moves) {
      auto orig = get(m.program_id);
      if (!orig) continue;
      ProgramRecord copy = *orig;
      std::string root = orig->migrated_from.empty() ? orig->id : orig->migrated_from;
      copy.id = hash_hex(fmt::format("migrant:{}:{}:{}", run_seed, root, m.to_island));
      if (pop.find(copy.id)) continue;
      copy.island_idx = m.to_island;
      copy.generation = done;
      copy.patch_type = "migrant";
      copy.migrated_from = root;
      copy.parent_id = orig->id;
      copy.parent_ids = {orig->id};
      copy.code_diff.clear();
      copy.in_archive = false;
      copy.knob_key.clear();  // the original already stands for this knob vector
      copy.archive_cell = "migrant:" + copy.archive_cell;
      copy.created_at = now_s();
      copy.cost_usd = 0.0;
      store(copy);
    }
    if (!moves.empty()) log::info("migration at generation {}: {} program(s) copied", done, moves.size());
    last_migration_at = done;
    std::lock_guard lock(db_mutex);
    db.set_meta("last_migration_at", std::to_string(done));
  }

  void stop_jobs() {
    discard_results = true;
    parts.evaluator->cancel_jobs();
    std::lock_guard lock(db_mutex);
    for (auto& [pgid, what] : running_jobs) ::kill(-pid_t(pgid), SIGKILL);
  }

  void find_runnable_islands() {
    runnable_islands.clear();
    std::string skipped;
    for (int i = 0; i < cfg.num_islands; ++i) {
      std::string why;
      if (!parts.island_runnable || parts.island_runnable(i, &why)) {
        runnable_islands.push_back(i);
      } else {
        log::warn("island {} skipped: {}", i, why);
        skipped += fmt::format("{}island {} skipped ({})", skipped.empty() ? "" : "; ", i, why);
      }
    }
    if (runnable_islands.empty()) throw UserError("", "no island can run on this machine: " + skipped);
    islands_note = skipped;
  }

  RunStatus run(const std::atomic<bool>& stop, const std::function<void(const RunStatus&)>& on_status) {
    stop_flag = &stop;
    find_runnable_islands();
    load_state();
    {
      std::lock_guard lock(db_mutex);
      end_orphaned_jobs(db);
    }
    ensure_seeds();
    measure_noise();
    settle_best();
    auto emit = [&] {
      refresh_status();
      if (on_status) on_status(status);
    };
    emit();
    if (parts.mutator->remote())
      pool = std::make_unique<ProposalPool>(cfg.max_parallel_proposals, [this] {
        std::lock_guard lock(q_mutex);
        q_cv.notify_all();
      });
    make_steps();
    std::int64_t next = 1;
    bool budget_stop = false;
    const std::int64_t lag = effective_proposal_lag(cfg, pool != nullptr);
    while (true) {
      bool stopping = stop.load() || budget_stop || target_reached;
      // Propose the lowest generations not yet done while the pipeline has room.
      while (!stopping) {
        while (next <= cfg.num_generations && (pop.generation_done(next) || in_flight.count(next))) ++next;
        if (next > cfg.num_generations) break;
        if (!index_through(next - lag) || std::int64_t(in_flight.size()) >= lag) break;
        if (parts.budget_exhausted && parts.budget_exhausted()) {
          budget_stop = true;
          stop_note = "stopping: max_api_cost reached";
          log::warn("LLM budget (max_api_cost) reached: no new candidates are proposed");
          break;
        }
        if (target_reached) break;  // indexing above may have met the goal
        start_proposal(next);
        emit();
        if (stop.load()) break;
      }
      settle_proposals();
      const bool halted = budget_stop || target_reached;
      if (halted || stop.load()) drop_proposals();
      // Nothing more to propose: index what has finished, in order.
      if (!discard_results && (next > cfg.num_generations || halted)) index_through(cfg.num_generations);
      if (in_flight.empty()) break;
      // All finished: go round to index them or propose more (a stop goes on to end the jobs).
      if (in_flight.size() == completed.size() && !stop.load() && !halted) continue;
      std::deque<Done> ready;
      {
        std::unique_lock lock(q_mutex);
        q_cv.wait_for(lock, std::chrono::milliseconds(200),
                      [&] { return !done_queue.empty() || (pool && pool->has_finished()); });
        ready.swap(done_queue);
      }
      if (stop.load() && !discard_results) {
        stop_note = "stopping: interrupted";
        stop_jobs();
        // Finished results are already in the database; `resume` indexes them.
        for (auto& [g, rec] : completed) forget_pending(g, rec.knob_key);
        completed.clear();
      }
      for (auto& d : ready) collect(std::move(d));
      emit();
    }
    pool.reset();  // joins asks still on their way (their answers are dropped)
    dropped.clear();
    for (auto& [g, t] : workers) t.join();
    workers.clear();
    emit();
    return status;
  }
};

EvolutionRunner::EvolutionRunner(std::filesystem::path results_dir, ProgramDatabase& db, RunnerParts parts)
    : impl_(std::make_unique<Impl>(std::move(results_dir), db, std::move(parts))) {
  impl_->parts.evaluator = with_exclusive_bench(std::move(impl_->parts.evaluator), impl_->parts.workload.evaluator);
  if (!impl_->parts.embedder) impl_->parts.embedder = make_hashed_ngram_embedder(impl_->cfg.embedding_dims);
  if (!impl_->parts.meta) impl_->parts.meta = std::make_unique<StatsMetaSummarizer>();
  impl_->parts.evaluator->attach_run(db, impl_->results);
  // The knob mutator steers away from vectors already evaluated or in flight.
  if (auto* knobs = dynamic_cast<KnobMutator*>(impl_->parts.mutator.get())) {
    Impl* impl = impl_.get();
    knobs->set_seen([impl](const std::string& key) { return impl->knob_key_taken(key, kMaxGenerations + 1); });
  }
}

EvolutionRunner::~EvolutionRunner() {
  for (auto& [g, t] : impl_->workers)
    if (t.joinable()) t.join();
}

RunStatus EvolutionRunner::run(const std::atomic<bool>& stop, const std::function<void(const RunStatus&)>& on_status) {
  return impl_->run(stop, on_status);
}

}  // namespace braid
