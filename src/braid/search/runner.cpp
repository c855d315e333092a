#include "braid/search/runner.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <shared_mutex>

#include <fmt/format.h>

#include "braid/program/origin.hpp"
#include "braid/program/program.hpp"
#include "braid/search/activity_file.hpp"
#include "braid/search/ahead_evaluations.hpp"
#include "braid/search/archive.hpp"
#include "braid/search/candidate_feedback.hpp"
#include "braid/search/confirmation.hpp"
#include "braid/search/evaluation_jobs.hpp"
#include "braid/search/exclusive_bench.hpp"
#include "braid/search/goal_tracker.hpp"
#include "braid/search/meta_journal.hpp"
#include "braid/search/meta_stats.hpp"
#include "braid/search/migration.hpp"
#include "braid/search/population.hpp"
#include "braid/search/proposal_builder.hpp"
#include "braid/search/remeasure.hpp"
#include "braid/search/schedule.hpp"
#include "braid/search/seed_programs.hpp"
#include "braid/search/selection.hpp"
#include "braid/search/shared_database.hpp"
#include "braid/search/withheld_scores.hpp"
#include "braid/util/clock.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/hash.hpp"
#include "braid/util/log.hpp"
#include "braid/util/subprocess.hpp"

namespace braid {

std::filesystem::path db_path(const std::filesystem::path& results_dir) { return results_dir / "evolution.db"; }

namespace {

// The parts the CLI may leave out get braid's defaults; the evaluator keeps benches exclusive.
RunnerParts with_defaults(RunnerParts p) {
  p.evaluator = with_exclusive_bench(std::move(p.evaluator), p.workload.evaluator);
  if (!p.embedder) p.embedder = make_hashed_ngram_embedder(p.config.embedding_dims);
  if (!p.meta) p.meta = std::make_unique<StatsMetaSummarizer>();
  return p;
}

}  // namespace

struct EvolutionRunner::Impl {
  std::filesystem::path results;
  SharedDatabase db;  // every ProgramDatabase call goes through it
  RunnerParts parts;
  SearchConfig& cfg;
  std::uint64_t run_seed = 0;

  // The search thread changes `pop` and reads it freely; proposals on other threads read the
  // embeddings under a shared lock, so additions (which reallocate) take it exclusively.
  std::shared_mutex pop_mutex;
  Population pop;
  Archive archive;
  std::unique_ptr<ParentSelector> selector;
  std::vector<std::string> seed_ids;  // per island
  std::vector<int> runnable_islands;

  // Generations proposed and not yet indexed in memory: proposing, evaluating, or finished and
  // waiting in `completed` for their turn. Results are indexed in generation order, and
  // generation g is proposed only once every generation <= g - lag is indexed, so what a
  // proposal sees does not depend on which evaluation happened to finish first (a replayed run
  // repeats).
  std::set<std::int64_t> in_flight;
  std::map<std::int64_t, ProgramRecord> ready;      // accepted, waiting for an evaluation slot
  std::map<std::int64_t, ProgramRecord> completed;  // stored in the database, not yet indexed
  AheadEvaluations ahead{results};                  // knob-only candidates evaluated before their turn
  std::int64_t next_generation = 1;                 // the lowest generation perhaps not proposed yet
  std::int64_t last_migration_at = 0;

  CandidateFeedback feedback;  // before what asks or reads feedback on threads of its own
  MetaJournal meta;
  GoalTracker goals;
  WithheldScores withheld;
  EvaluationJobs jobs;

  const std::atomic<bool>* stop_flag = nullptr;  // run()'s stop request
  std::function<void(const RunStatus&)> on_status;
  bool budget_stop = false;  // the LLM budget is spent
  RunStatus status;
  ActivityFile activity{results / "activity.json"};
  std::string last_failure_id;          // whose diagnostics status.last_failure holds
  std::string islands_note, stop_note;  // parts of status.note
  bool interrupted = false;             // a stop's bookkeeping is done (its jobs may be halted before)
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  std::int64_t done_at_start = 0;
  std::unique_ptr<ProposalBuilder> proposals;  // declared last: its pool's threads read the above

  Impl(std::filesystem::path r, ProgramDatabase& d, RunnerParts p)
      : results(std::move(r)),
        db(d),
        parts(with_defaults(std::move(p))),
        cfg(parts.config),
        archive(cfg.archive_size, cfg.elite_selection_ratio),
        selector(make_parent_selector(cfg)),
        feedback(parts.feedback.get(), cfg.use_text_feedback, db),
        meta(results, cfg.meta_rec_interval, parts.meta.get(), db, [this] { jobs.wake(); }),
        goals(GoalTrackerParts{
                  cfg, results, parts.workload.program, db, confirmation_log(),
                  [this](const std::string& code, const std::string& label, const std::filesystem::path& folder) {
                    return remeasure_watched(code, label, folder);
                  },
                  [this] { return stopping(); }},
              pop),
        jobs(db) {
    parts.evaluator->attach_run(d, results);
    meta.set_complete([this](ProgramRecord& rec) { feedback.complete(rec, [this] { return stopping(); }); });
  }

  bool stopping() const { return (stop_flag != nullptr && stop_flag->load()) || jobs.stopped(); }

  // ---- the run, step by step ----
  RunStatus run(const std::atomic<bool>& stop, const std::function<void(const RunStatus&)>& status_sink) {
    stop_flag = &stop;
    on_status = status_sink;
    start_up();
    emit();
    proposals = std::make_unique<ProposalBuilder>(proposal_context());
    const std::int64_t lag = effective_proposal_lag(cfg, proposals->concurrent());
    meta.set_answer_delay(lag);
    while (true) {
      if (!stop.load() && !budget_stop && !goals.target_reached()) propose_while_room(lag);
      take_settled(proposals->settle_answered());
      const bool halted = budget_stop || goals.target_reached();
      if (halted || stop.load()) drop_proposals();
      // Nothing more to propose: index what has finished, in order.
      if (!jobs.stopped() && (next_generation > cfg.num_generations || halted)) index_through(cfg.num_generations);
      if (in_flight.empty()) break;
      // All finished: go round to index them or propose more (a stop goes on to end the jobs),
      // unless the next must wait for a meta summary's answer.
      if (in_flight.size() == completed.size() && !stop.load() && !halted && !meta.blocks(*in_flight.begin())) continue;
      std::vector<ProgramRecord> finished =
          jobs.wait(std::chrono::milliseconds(200), [this] { return proposals->has_answers() || meta.answered(); });
      if (stop.load() && !interrupted) stop_evaluations();
      for (auto& rec : finished) collect(std::move(rec));
      launch_ready();  // a slot freed before its candidate's follow-up ended
      emit();
    }
    if (proposals->concurrent()) log::info("model slots {}", idle_summary(proposals->pool_stats()));
    proposals->shutdown();  // joins asks still on their way (their answers are dropped)
    // A summary still out (the last of the run) is waited for and written, unless stopping.
    meta.finish([&] { return stop.load(); });
    jobs.join_all();
    goals.write_best_feedback();
    emit();
    activity.remove();  // nothing is in flight any more
    return status;
  }

  // Islands, stored state, orphaned jobs of a crash, seeds, the noise level and best/.
  void start_up() {
    find_runnable_islands();
    load_state();
    db.with([](ProgramDatabase& db) { end_orphaned_jobs(db); });
    ensure_seeds();
    emit("re-timing the seed (the run's noise level)");
    goals.measure_noise(seed_ids);
    goals.settle_best();
  }

  // Proposes the lowest generations not yet done while the pipeline has room: generation g
  // waits until every generation <= g - lag is indexed, and at most `lag` are in flight.
  void propose_while_room(std::int64_t lag) {
    while (true) {
      while (next_generation <= cfg.num_generations &&
             (pop.generation_done(next_generation) || in_flight.count(next_generation)))
        ++next_generation;
      if (next_generation > cfg.num_generations) return proposals->set_idle_cause("every generation proposed");
      if (!index_through(next_generation - lag) || std::int64_t(in_flight.size()) >= lag)
        return proposals->set_idle_cause(index_wait_cause());
      if (budget_spent()) return;
      if (goals.target_reached()) return;  // indexing above may have met the goal
      in_flight.insert(next_generation);
      take_settled(proposals->start(next_generation));
      emit();
      if (stop_flag->load()) return;
    }
  }

  // What the lowest generation not indexed waits for: while it does, nothing more is proposed.
  std::string index_wait_cause() const {
    const std::int64_t g = in_flight.empty() ? 0 : *in_flight.begin();
    const std::string doing = proposals->doing(g);
    return "the index waits for " + std::string(completed.count(g) ? "a meta summary"
                                                : ready.count(g)   ? "an evaluation slot"
                                                : !doing.empty()   ? "its proposal: " + doing
                                                                   : "its evaluation");
  }

  bool budget_spent() {
    if (!parts.budget_exhausted || !parts.budget_exhausted()) return false;
    budget_stop = true;
    stop_note = "stopping: max_api_cost reached";
    log::warn("LLM budget (max_api_cost) reached: no new candidates are proposed");
    return true;
  }

  // Settled proposals: an accepted candidate waits for an evaluation slot, a rejected
  // generation is stored as it is, a dropped one is proposed again on resume.
  void take_settled(std::vector<SettledProposal> settled) {
    for (auto& s : settled) {
      const std::int64_t g = s.generation;
      switch (s.kind) {
        case SettledProposal::Kind::Dropped: forget_pending(g); continue;
        case SettledProposal::Kind::Rejected:
          ahead.drop(g);
          db.insert(s.record);
          completed.emplace(g, std::move(s.record));
          break;
        case SettledProposal::Kind::Accepted: ready.emplace(g, std::move(s.record)); break;
      }
      launch_ready();
    }
  }

  // Stopping (Ctrl-C, budget, goal): proposals not yet evaluated are dropped, and their
  // generations proposed again on resume.
  void drop_proposals() {
    for (std::int64_t g : proposals->drop_all()) forget_pending(g);
    for (auto& [g, rec] : ready) forget_pending(g);
    ready.clear();
  }

  void forget_pending(std::int64_t g) {
    in_flight.erase(g);
    ahead.drop(g);
    if (proposals) proposals->forget(g);
  }

  // A stop (Ctrl-C): running evaluations are killed and their results discarded.
  void stop_evaluations() {
    interrupted = true;
    halt_jobs();
    // Finished results are already in the database; `resume` indexes them.
    for (auto& [g, rec] : completed) forget_pending(g);
    completed.clear();
  }
  void halt_jobs() {
    stop_note = "stopping: interrupted";
    if (!jobs.stopped()) jobs.stop(*parts.evaluator);
  }

  // A re-measurement (noise runs, a best's confirmation) takes a whole evaluation: the status line
  // goes on, and a stop kills it at once (a SIGTERM's grace, Slurm's or timeout's, is short).
  // Each is kept in the database once measured, so a resume after a stop does not repeat it.
  EvalResult remeasure_watched(const std::string& code, const std::string& label, const std::filesystem::path& folder) {
    auto measure = [&] {
      return measure_beside([&] { return remeasure(*parts.evaluator, code, label, run_seed, folder, jobs.observer()); },
                            [&](int n) {
                              if (stop_flag != nullptr && stop_flag->load()) halt_jobs();
                              if (n % 5 == 0) emit("re-measuring " + label);  // once a second
                            });
    };
    return remeasure_kept(db, code, label, measure, [this] { return stopping(); });
  }

  void collect(ProgramRecord rec) {
    const std::int64_t g = rec.generation;
    if (ahead.finish(g, rec, !jobs.stopped() && in_flight.count(g))) {
      launch_ready();
      return;
    }
    if (jobs.stopped()) {  // we killed it on stop: not a result
      forget_pending(g);
      return;
    }
    launch_ready();
    completed.emplace(g, std::move(rec));
  }

  // Indexes finished generations <= limit in generation order (with the meta summaries and
  // migrations they trigger). False while one of them is still being evaluated, or waits for
  // the answer of a meta summary started before it (search/meta_journal.hpp).
  bool index_through(std::int64_t limit) {
    while (!in_flight.empty() && *in_flight.begin() <= limit) {
      auto it = completed.find(*in_flight.begin());
      if (it == completed.end()) return false;
      if (!meta.take_up_before(it->first)) return false;  // a summary's answer must come first
      ProgramRecord rec = std::move(it->second);
      completed.erase(it);
      forget_pending(rec.generation);
      index(rec);
      meta.maybe_summarize(pop, rec.generation);
      maybe_migrate();
    }
    return true;
  }

  // `doing`: a step that can take a while (the start's re-runs), said in the status too.
  void emit(const std::string& doing = "") {
    refresh_status();
    if (!doing.empty()) status.note += (status.note.empty() ? "" : "; ") + doing;
    activity.publish(status);
    if (on_status) on_status(status);
  }

  // ---- stored state ----
  void load_state() {
    std::vector<ProgramSummary> all = db.with([](ProgramDatabase& db) { return db.summaries(); });
    auto s = db.meta("run_seed");
    run_seed = s ? std::stoull(*s) : cfg.seed;
    if (auto m = db.meta("last_migration_at")) last_migration_at = std::stoll(*m);
    meta.load();
    goals.load(correct_code_hashes());
    for (auto& summary : all) {
      goals.apply_estimate(summary);
      pop.add(std::move(summary));
    }
    archive.load(pop);
    seed_ids.assign(std::size_t(cfg.num_islands), "");
    for (std::size_t i = 0; i < pop.size(); ++i) {
      const auto& p = pop.at(i);
      if (origin_from(p.patch_type) == Origin::Seed && p.island_idx < cfg.num_islands)
        seed_ids[std::size_t(p.island_idx)] = p.id;
    }
    done_at_start = pop.done_count();
    goals.check_stored();  // resume: a stored candidate may already meet the goal
    if (goals.target_reached()) stop_note = goals.target_note();
    refresh_status();
  }

  // hash_hex(code) of every correct stored program, by id (the confirmations table is created
  // where absent first: old runs gain it on resume).
  std::unordered_map<std::string, std::string> correct_code_hashes() {
    std::unordered_map<std::string, std::string> out;
    db.with([&](ProgramDatabase& db) {
      ensure_confirmation_table(db);
      for (const auto& [id, code] : db.correct_program_codes()) out[id] = hash_hex(code);
    });
    return out;
  }

  ConfirmationLog confirmation_log() {
    return {[this] { return db.with([](ProgramDatabase& db) { return load_confirmations(db); }); },
            [this](const Confirmation& c) { db.with([&](ProgramDatabase& db) { store_confirmation(db, c); }); }};
  }

  void refresh_status() {
    status.generations_total = cfg.num_generations;
    status.generations_done = pop.done_count();
    status.migrants = 0;
    for (std::size_t i = 0; i < pop.size(); ++i)
      status.migrants += origin_from(pop.at(i).patch_type) == Origin::Migrant ? 1 : 0;
    status.evaluated = std::int64_t(pop.size()) - status.migrants;
    status.failed = std::int64_t(pop.failures().size());
    if (!pop.failures().empty() && pop.at(pop.failures().back()).id != last_failure_id) {
      const auto& f = pop.at(pop.failures().back());
      last_failure_id = f.id;
      std::string text;
      if (auto rec = db.get(f.id)) text = rec->error_text.substr(0, rec->error_text.find('\n'));
      status.last_failure = f.id + " " + std::string(to_string(f.failure)) + (text.empty() ? "" : ": " + text);
    }
    status.in_flight = jobs.running();
    status.proposing = proposals ? proposals->proposing() : 0;
    if (proposals && proposals->concurrent()) {
      PoolStats ps = proposals->pool_stats();
      status.proposals_asking = ps.asking;
      status.proposal_wait_s = ps.oldest_wait_s;
      status.proposals_paused_s = ps.paused_s;
    }
    refresh_best();
    status.correct = std::int64_t(pop.ranked_all().size());
    status.noise = goals.noise_note();
    status.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::int64_t progressed = status.generations_done - done_at_start;
    std::int64_t left = cfg.num_generations - status.generations_done;
    status.eta_s =
        progressed > 0 ? status.elapsed_s / double(progressed) * double(std::max<std::int64_t>(left, 0)) : -1.0;
    if (parts.llm_totals) status.llm_totals = parts.llm_totals();
    // Skipped islands, quarantined GPUs (the evaluator's note) and why the run is stopping.
    status.note.clear();
    for (const std::string& n : {islands_note, parts.evaluator->status_note(), stop_note})
      if (!n.empty()) status.note += (status.note.empty() ? "" : "; ") + n;
  }

  // The best whose score held up (best/), else the highest single measurement.
  void refresh_best() {
    if (!pop.ranked_all().empty()) {
      const auto& b = pop.at(pop.ranked_all().front());
      status.best_score = b.combined_score;
      status.best_id = b.id;
    }
    status.best_confirmed = false;
    status.best_runs = status.best_id.empty() ? 0 : 1;
    if (auto b = goals.best()) {
      status.best_score = b->score;
      status.best_id = b->id;
      if (b->confirmed) {
        status.best_confirmed = true;
        status.best_runs = b->runs;
      }
    }
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
    if (!cfg.task_sys_msg_per_island.empty())
      r.system_msg_hash = hash_hex(cfg.task_sys_msg_per_island[std::size_t(island)]);
    return r;
  }

  void store(const ProgramRecord& rec) {
    db.insert(rec);
    index(rec);
  }

  // In-memory bookkeeping of a stored record (main thread only).
  void index(const ProgramRecord& rec) {
    ProgramSummary summary = summary_of(rec);
    goals.note_program(rec);
    goals.apply_estimate(summary);
    {
      std::unique_lock lock(pop_mutex);
      pop.add(std::move(summary));
    }
    std::size_t idx = pop.size() - 1;
    // A migrant is a copy: its original already competes for an archive cell.
    ArchiveChange change = origin_from(rec.patch_type) == Origin::Migrant ? ArchiveChange{} : archive.offer(pop, idx);
    if (!change.empty()) db.with([&](ProgramDatabase& db) { db.set_in_archive(change.added, change.removed); });
    meta.note(rec);
    if (rec.failure == FailureKind::Rejected) ++status.rejected;
    log::info("gen {} island {} {} {} -> {}{}", rec.generation, rec.island_idx, rec.patch_type, rec.id,
              to_string(rec.failure), withheld.score_text(rec));
    const bool reached = goals.target_reached();
    goals.indexed(rec);
    if (!reached && goals.target_reached()) stop_note = goals.target_note();
  }

  // ---- evaluation ----
  std::filesystem::path work_dir_for(std::int64_t generation, int island, bool seed) {
    auto dir = results / (seed ? fmt::format("gen_0_island_{}", island) : fmt::format("gen_{}", generation));
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);  // a half-written folder of an interrupted attempt
    std::filesystem::create_directories(dir);
    return dir;
  }

  void evaluate_into(ProgramRecord& rec, const std::filesystem::path& dir) {
    EvalRequest req;
    req.candidate_id = rec.id;
    req.code = rec.code;
    req.work_dir = dir;
    req.seed = hash64(rec.id, run_seed);
    record_result(rec, parts.evaluator->evaluate(req, jobs.observer()));
  }

  // Accepted candidates start their evaluation, lowest generation first, while fewer than
  // max_parallel_jobs run; one evaluated ahead of its turn is stored at once (then its feedback
  // is asked), one whose evaluation ahead still runs waits for it. Slots left idle evaluate
  // waiting knob-only candidates ahead.
  void launch_ready() {
    for (auto it = ready.begin(); it != ready.end();) {
      const std::int64_t g = it->first;
      const bool evaluated = ahead.has_result(g, it->second.code);
      if (ahead.running(g) || (!evaluated && std::int64_t(jobs.running()) >= cfg.max_parallel_jobs)) {
        ++it;
        continue;
      }
      std::optional<ProgramRecord> early = ahead.take(g, it->second.code);
      ProgramRecord candidate = std::move(early ? *early : it->second);
      it = ready.erase(it);
      if (evaluated) log::info("gen {} was evaluated ahead of its turn", g);
      launch_evaluation(std::move(candidate), !evaluated, true);
    }
    evaluate_ahead();
  }

  // One job: the candidate evaluated in its work folder (unless it was already), then stored and
  // handed back with its feedback asked beside the search (at its turn), or kept aside (ahead of
  // its turn: AheadEvaluations).
  void launch_evaluation(ProgramRecord candidate, bool evaluate, bool at_turn) {
    const std::int64_t g = candidate.generation;
    auto dir = evaluate ? work_dir_for(g, candidate.island_idx, false) : std::filesystem::path();
    std::function<void(ProgramRecord&)> outcome;
    std::function<void(const ProgramRecord&)> diagnosis;
    if (at_turn) outcome = [this](ProgramRecord& rec) { feedback.note_outcome(rec); };
    if (at_turn && feedback.asks()) diagnosis = [this](const ProgramRecord& rec) { feedback.ask(rec, jobs.stopped()); };
    jobs.launch(
        [this, rec = std::move(candidate), dir, evaluate]() mutable {
          if (evaluate) evaluate_into(rec, dir);
          return std::move(rec);
        },
        std::move(outcome), at_turn, std::move(diagnosis));
  }

  void evaluate_ahead() {
    if (!proposals || stopping()) return;
    while (ready.empty() && std::int64_t(jobs.running()) < cfg.max_parallel_jobs) {
      auto candidate = proposals->waiting_candidate(
          [this](std::int64_t g, const ProgramRecord& rec) { return ahead.covers(g, rec.code); });
      if (!candidate) return;
      ahead.start(candidate->generation);
      launch_evaluation(std::move(*candidate), true, false);
    }
  }

  // ---- seeds ----
  void ensure_seeds() {
    for (auto& [text, seed] : seed_programs(cfg, parts.workload, runnable_islands, seed_ids)) {
      const auto& [origin, islands] = seed;
      ProgramRecord rec = base_record(text, 0, islands.front());
      rec.patch_type = std::string(to_string(Origin::Seed));
      rec.model = "seed";
      rec.id = hash_hex(fmt::format("seed:{}:{}", run_seed, islands.front()));
      log::info("evaluating seed program {} for island(s) {}", origin, fmt::join(islands, ","));
      evaluate_into(rec, work_dir_for(0, islands.front(), true));
      if (std::string fb = feedback.now(rec); !fb.empty()) rec.text_feedback = fb;
      for (int island : islands) {
        ProgramRecord copy = rec;
        copy.island_idx = island;
        copy.id = hash_hex(fmt::format("seed:{}:{}", run_seed, island));
        store(copy);
        seed_ids[std::size_t(island)] = copy.id;
      }
      if (!rec.correct) throw_seed_failed(origin, rec, results);
    }
    // A resumed run whose seed failed has nothing to evolve either.
    for (const auto& id : seed_ids)
      if (const auto* s = id.empty() ? nullptr : pop.find(id); s && !s->correct)
        if (auto r = db.get(id)) throw_seed_failed(parts.workload.program.string(), *r, results);
  }

  // ---- proposals (search/proposal_builder.hpp) ----
  ProposalContext proposal_context() {
    return {cfg,
            run_seed,
            pop,
            pop_mutex,
            archive,
            *selector,
            seed_ids,
            runnable_islands,
            parts.workload.task,
            parts.workload.language,
            meta.recommendations(),
            *parts.mutator,
            db,
            [this](const std::string& code, std::int64_t g, int island) { return base_record(code, g, island); },
            parts.novelty_judge,
            [this] { return stopping(); },
            [this] { jobs.wake(); },
            [this](ProgramRecord& rec) { feedback.complete(rec, [this] { return stopping(); }); },
            [this](const ProgramRecord& rec) { return stopping() || feedback.settled(rec.id); }};
  }

  // ---- migration ----
  void maybe_migrate() {
    std::int64_t done = pop.done_count();
    if (cfg.migration_interval <= 0 || cfg.num_islands < 2 || done - last_migration_at < cfg.migration_interval) return;
    auto rng = generation_rng(run_seed, done, 0x6d6967);
    auto moves = plan_migrations(cfg, pop, rng);
    for (const auto& m : moves) {
      auto orig = db.get(m.program_id);
      if (!orig) continue;
      ProgramRecord copy = migrant_copy(*orig, m.to_island, done, run_seed);
      if (!pop.find(copy.id)) store(copy);
    }
    if (!moves.empty()) log::info("migration at generation {}: {} program(s) copied", done, moves.size());
    last_migration_at = done;
    db.set_meta("last_migration_at", std::to_string(done));
  }

  void find_runnable_islands() { runnable_islands = braid::runnable_islands(cfg, parts.island_runnable, islands_note); }
};

EvolutionRunner::EvolutionRunner(std::filesystem::path results_dir, ProgramDatabase& db, RunnerParts parts)
    : impl_(std::make_unique<Impl>(std::move(results_dir), db, std::move(parts))) {}

EvolutionRunner::~EvolutionRunner() {
  impl_->meta.drop();  // its thread wakes the jobs: joined first
  impl_->jobs.join_all();
}

RunStatus EvolutionRunner::run(const std::atomic<bool>& stop, const std::function<void(const RunStatus&)>& on_status) {
  return impl_->run(stop, on_status);
}

}  // namespace braid
