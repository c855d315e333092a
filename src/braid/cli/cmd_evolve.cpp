// `braid evolve` and `braid resume`.
#include <sys/ioctl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <optional>
#include <random>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "braid/cli/command.hpp"
#include "braid/cli/run_setup.hpp"
#include "braid/llm/http.hpp"
#include "braid/pipeline/pipeline.hpp"
#include "braid/pipeline/run_lock.hpp"
#include "braid/search/evaluation_jobs.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/log.hpp"
#include "braid/util/text.hpp"

namespace braid::cli {
namespace {

std::atomic<bool> g_stop{false};
// Ctrl-C / SIGTERM: stop proposing and end the LLM requests in flight (async-signal-safe).
extern "C" void on_signal(int) {
  g_stop = true;
  llm::cancel_requests();
}

std::string format_duration(double s) {
  if (!(s >= 0)) return "?";  // negative or NaN: not known yet
  if (s >= 1e7) return ">100d";  // int64 below; a run this long shows no more digits
  std::int64_t t = std::int64_t(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, t / 60 % 60);
  if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

std::string status_text(const RunStatus& s) {
  std::string line = fmt::format("gen {}/{}  evaluated {}  failed {}  in flight {}  best {:.4g}{}  elapsed {}  eta {}",
                                 s.generations_done, s.generations_total, s.evaluated, s.failed, s.in_flight,
                                 s.best_score, s.best_confirmed || s.best_id.empty() ? "" : "?", format_duration(s.elapsed_s),
                                 format_duration(s.eta_s));
  if (s.proposing > 0)  // model requests in flight, and how long the oldest has waited
    line += fmt::format("  proposing {} ({} asking, oldest {}{})", s.proposing, s.proposals_asking,
                        format_duration(s.proposal_wait_s),
                        s.proposals_paused_s > 0 ? ", 429 pause " + format_duration(s.proposals_paused_s) : "");
  if (s.llm_totals.is_object() && s.llm_totals.contains("cost_usd"))
    line += fmt::format("  llm ${:.4f} ({} calls, {} errors)", s.llm_totals.value("cost_usd", 0.0),
                        s.llm_totals.value("calls", 0), s.llm_totals.value("errors_total", 0));
  if (!s.note.empty()) line += "  [" + s.note + "]";
  return line;
}

// The terminal's width for the one-line status (it must not wrap, or \r stops erasing it).
std::size_t terminal_width() {
  winsize w{};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col >= 20) return w.ws_col;
  return 120;
}

std::string fit(std::string line, std::size_t width) {
  if (line.size() < width) return line;
  line.resize(width - 4);
  while (!line.empty() && (static_cast<unsigned char>(line.back()) & 0xC0) == 0x80) line.pop_back();  // whole UTF-8 characters
  if (!line.empty() && static_cast<unsigned char>(line.back()) >= 0xC0) line.pop_back();
  return line + "...";
}

std::string best_text(const RunStatus& s) {
  return fmt::format("{} (score {:.6g}, {})", s.best_id, s.best_score,
                     s.best_confirmed ? fmt::format("median of {} re-runs", s.best_runs) : std::string("single measurement"));
}

std::filesystem::path default_results(const WorkloadSpec& spec) {
  auto t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", std::localtime(&t));
  return std::filesystem::path("results") / fmt::format("{}-{}", spec.name, buf);
}

// Whether the database holds a run whose set-up completed (its "config" is committed last).
// Files a set-up killed in its first milliseconds leaves behind (0 bytes, no tables yet, a hot
// rollback journal) hold no run; anything else that is not a braid database is refused by
// name rather than overwritten.
bool run_was_started(const std::filesystem::path& db_file) {
  std::error_code ec;
  if (std::filesystem::file_size(db_file, ec) == 0 && !ec) return false;
  if (std::filesystem::exists(db_file.string() + "-journal")) return false;
  if (schema_object_count(db_file) == 0) return false;
  ProgramDatabase db(db_file, DbAccess::ReadOnly);  // UserError naming a damaged/foreign file
  return db.meta("config").has_value() || db.count() > 0;
}

}  // namespace

int run_with_status(EvolutionRunner& runner, const std::filesystem::path& results) {
  g_stop = false;
  llm::reset_cancel();
  llm::clear_auth_failure();
  // A rejected key stops the run at once (every later request would be rejected too).
  llm::set_auth_failure_hook([] { g_stop = true; });
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  const bool tty = ::isatty(STDERR_FILENO);
  if (tty) spdlog::set_level(spdlog::level::warn);  // the status line replaces per-candidate logs
  auto last_log = std::chrono::steady_clock::now();
  std::string shown_best, shown_failure;
  bool first = true;
  // Events (a new best, a failed candidate) get a line of their own above the status line.
  auto event = [&](const std::string& line) {
    if (tty) std::fprintf(stderr, "\r\033[K%s\n", fit(line, terminal_width()).c_str());
    else log::info("{}", line);
  };
  auto on_status = [&](const RunStatus& s) {
    if (!s.best_id.empty() && s.best_id != shown_best) {
      if (!first) event("new best: " + best_text(s));
      shown_best = s.best_id;
    }
    if (!s.last_failure.empty() && s.last_failure != shown_failure) {
      if (!first) event("failed: " + s.last_failure);
      shown_failure = s.last_failure;
    }
    first = false;
    if (tty) {
      std::fprintf(stderr, "\r\033[K%s", fit(status_text(s), terminal_width()).c_str());
      std::fflush(stderr);
    } else if (std::chrono::steady_clock::now() - last_log > std::chrono::seconds(10)) {
      log::info("status: {}", status_text(s));
      last_log = std::chrono::steady_clock::now();
    }
  };
  RunStatus s = runner.run(g_stop, on_status);
  llm::set_auth_failure_hook({});
  if (tty) std::fprintf(stderr, "\n");
  if (auto auth = llm::auth_failure()) {
    const std::string var = auth->key_env.empty() ? "the model's API key" : auth->key_env;
    throw UserError(var, "was refused by " + auth->model + " (" + std::string(utf8_prefix(auth->detail, 160)) +
                             "); the run stopped: set a valid key and continue with `braid resume " + results.string() + "`");
  }
  log::info("done: {}", status_text(s));
  std::printf("results: %s\nbest: %s\n", results.string().c_str(), best_text(s).c_str());
  if (!s.noise.empty()) std::printf("%s\n", s.noise.c_str());
  std::printf("score: the workload's combined_score, higher is better (GPU workloads: the baseline's time over the candidate's)\n");
  if (s.correct == 0) std::printf("no candidate was correct: see why with `braid top %s` and `braid show %s ID`\n", results.string().c_str(),
                                  results.string().c_str());
  std::printf("next: braid top %s | braid show %s %s | braid export %s -o FILE | braid report %s\n", results.string().c_str(),
              results.string().c_str(), s.best_id.empty() ? "ID" : s.best_id.c_str(), results.string().c_str(), results.string().c_str());
  if (g_stop) {
    std::printf("interrupted: continue with `braid resume %s`\n", results.string().c_str());
    return 130;
  }
  return 0;
}

namespace {

struct EvolveArgs {
  EvolveRequest req;
  std::optional<std::int64_t> generations;
  std::optional<std::string> seed;  // parsed by parse_seed: the full uint64 range
  std::optional<std::int64_t> parallel;
  std::optional<int> ranks;
};

// --seed: a decimal integer in [0, 2^64 - 1] (0 = draw one); no sign, no wrap-around.
std::uint64_t parse_seed(const std::string& text) {
  const std::string why = "must be an integer between 0 and 18446744073709551615, got '" + text + "'";
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) throw UserError("--seed", why);
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (errno == ERANGE || *end != '\0') throw UserError("--seed", why);
  return v;
}


int do_evolve(EvolveArgs& a) {
  EvolveRequest& req = a.req;
  req.generations = a.generations;
  if (a.seed) req.seed = parse_seed(*a.seed);
  req.parallel = a.parallel;
  if (a.ranks) {
    if (*a.ranks < 1) throw UserError("--ranks", "must be at least 1 (got " + std::to_string(*a.ranks) + ")");
    req.ranks = *a.ranks;
  }
  WorkloadSpec spec = load_workload(req.workload);
  apply_ranks_override(spec, req.ranks);
  SearchConfig cfg = resolve_config(req, spec);
  auto results = req.results.empty() ? default_results(spec) : req.results;
  std::optional<RunLock> lock;
  if (std::filesystem::exists(db_path(results))) {
    lock.emplace(results);  // a live braid there is named in the refusal
    if (run_was_started(db_path(results)))
      throw UserError(results.string(), "already holds a run: continue it with `braid resume " + results.string() + "`");
  }
  if (cfg.seed == 0) cfg.seed = std::random_device{}() | (std::uint64_t(std::random_device{}()) << 32);
  RunnerParts parts = prepare_run(req, spec, cfg);
  // Input is valid: from here on we write. Should the LLM set-up still refuse (a missing API
  // key), the folder made here is removed again, so bad input leaves nothing behind.
  bool created = !std::filesystem::exists(results);
  std::filesystem::create_directories(results);
  try {
    if (!lock) lock.emplace(results);
  } catch (...) {
    if (created) std::filesystem::remove_all(results);
    throw;
  }
  // A braid killed during its set-up (before the run's metadata was committed) left a database
  // that holds no run: start afresh. The lock above makes sure that braid is gone.
  if (std::filesystem::exists(db_path(results)) && !run_was_started(db_path(results))) {
    log::warn("{}: an earlier start was interrupted during set-up; starting the run afresh", db_path(results).string());
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) std::filesystem::remove(db_path(results).string() + suffix);
  }
  auto db = std::make_unique<ProgramDatabase>(db_path(results));
  try {
    attach_llm(parts, req, *db, results);
  } catch (const UserError&) {
    db.reset();
    lock.reset();
    if (created) std::filesystem::remove_all(results);
    throw;
  }
  // One transaction: "config" marks a run as started, so a kill before this commit leaves a
  // folder that `evolve` takes over (above) and a kill after it one that `resume` continues.
  std::vector<std::pair<std::string, std::string>> meta = {
      {"workload_dir", std::filesystem::absolute(spec.dir).string()},
      {"run_seed", std::to_string(cfg.seed)},
      {"llm", req.llm},
      {"replay_evals", req.replay_evals ? "1" : "0"},
      {"braid_version", BRAID_VERSION},
      {"config", cfg.to_json().dump()}};
  if (req.ranks) meta.emplace_back("evaluator_ranks", std::to_string(*req.ranks));
  db->set_metas(meta);
  write_file_atomic(results / "config.json", cfg.to_json().dump(2));
  log::info("run seed {}; results in {}", cfg.seed, results.string());
  EvolutionRunner runner(results, *db, std::move(parts));
  return run_with_status(runner, results);
}

struct ResumeArgs {
  std::filesystem::path results;
  std::optional<std::int64_t> generations;
  std::optional<std::int64_t> parallel;
};

int do_resume(ResumeArgs& a) {
  if (a.generations) check_int_config_value("num_generations", *a.generations, "--generations");
  if (a.parallel) check_int_config_value("max_parallel_jobs", *a.parallel, "--parallel");
  if (!std::filesystem::is_directory(a.results)) throw UserError(a.results.string(), "no such results folder");
  const bool pipeline = is_pipeline_run(a.results);
  if (!pipeline && !std::filesystem::exists(db_path(a.results)))
    throw UserError(a.results.string(), "holds no braid run (no evolution.db)");
  // Before anything else: a live braid on this folder owns its evaluations (which would
  // otherwise look orphaned below) and its database.
  RunLock lock(a.results);
  if (pipeline) return continue_pipeline(a.results, a.generations.value_or(-1), int(a.parallel.value_or(-1)));
  ProgramDatabase db(db_path(a.results), DbAccess::Existing);
  auto workload_dir = db.meta("workload_dir");
  auto config = db.meta("config");
  if (!config)
    throw UserError(db_path(a.results).string(),
                    "holds no started run (its set-up was interrupted): start it again with `braid evolve`");
  if (!workload_dir) throw UserError(db_path(a.results).string(), "run metadata missing (workload_dir)");
  EvolveRequest req;
  req.workload = *workload_dir;
  req.llm = db.meta("llm").value_or("none");
  req.replay_evals = db.meta("replay_evals").value_or("0") == "1";
  WorkloadSpec spec = load_workload(req.workload);
  if (auto r = db.meta("evaluator_ranks")) req.ranks = std::stoi(*r);
  apply_ranks_override(spec, req.ranks);
  SearchConfig cfg = continued_config(db, *config, db_path(a.results).string(), a.generations, a.parallel);
  RunnerParts parts = prepare_run(req, spec, cfg);
  attach_llm(parts, req, db, a.results);
  db.set_meta("config", cfg.to_json().dump());
  int ended = end_orphaned_jobs(db);
  if (ended) log::warn("ended {} process group(s) left running by the interrupted braid", ended);
  log::info("resuming {} ({} programs stored)", a.results.string(), db.count());
  EvolutionRunner runner(a.results, db, std::move(parts));
  return run_with_status(runner, a.results);
}

Registrar evolve_reg(10, [](CLI::App& app, Action& action) {
  static EvolveArgs a;
  auto* cmd = app.add_subcommand("evolve", "Evolve a workload's program (island search)");
  cmd->footer("Reference (workload.yaml, config keys, knobs, LLM, exit codes): docs/reference.md\n"
              "Exit codes: 0 done, 2 bad input or a seed program that fails (then no candidate can be correct), 1 braid's own error, "
              "130 interrupted.");
  cmd->add_option("workload", a.req.workload, "Workload folder or its workload.yaml")->required();
  cmd->add_option("--config,-c", a.req.config, "Search config (YAML); overrides the workload's config.yaml");
  cmd->add_option("--generations,-g", a.generations, "Number of generations (children) to propose");
  cmd->add_option("--results,-r", a.req.results, "Results folder (default results/<workload>-<time>)");
  cmd->add_option("--seed,-s", a.seed, "RNG seed of the run (default: random, stored)");
  cmd->add_option("--parallel,-j", a.parallel, "Evaluations in flight (max_parallel_jobs)");
  cmd->add_option("--ranks", a.ranks, "GPU workloads: ranks per evaluation instead of workload.yaml's (kept for resume)");
  cmd->add_option("--llm", a.req.llm,
                  "Variation operator: none (knob mutator), config (llm_models of the config), model strings "
                  "(comma-separated), or replay:<results>")
      ->envname("BRAID_LLM");
  cmd->add_flag("--replay-evals", a.req.replay_evals, "With --llm replay:<results>, replay stored evaluations too");
  cmd->callback([&action] { action = [] { return do_evolve(a); }; });
});

Registrar resume_reg(11, [](CLI::App& app, Action& action) {
  static ResumeArgs a;
  auto* cmd = app.add_subcommand("resume", "Continue an interrupted run (after kill -9 too)");
  cmd->add_option("results", a.results, "Results folder of the run")->required();
  cmd->add_option("--generations,-g", a.generations, "New total number of generations");
  cmd->add_option("--parallel,-j", a.parallel, "Evaluations in flight");
  cmd->callback([&action] { action = [] { return do_resume(a); }; });
});

}  // namespace
}  // namespace braid::cli
