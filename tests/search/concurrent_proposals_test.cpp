// Concurrent proposals (issue #25 part 1), end to end: `braid evolve` of the CPU example against
// a loopback model that answers after a delay, with several proposals in flight. A replay repeats
// the run exactly; kill -9 while proposals are in flight loses no evaluated candidate; a 429
// storm slows the pool instead of failing candidates; a slow meta summary does not stall the
// search; candidates waiting for their turn are evaluated ahead.
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <thread>

#include "../e2e/e2e_support.hpp"
#include "../llm/loopback_llm_server.hpp"
#include "braid/util/fs.hpp"

namespace braid {
namespace {

using testing::Fault;
using testing::LoopbackLlmServer;

const std::string kChildren = "FROM programs WHERE patch_type NOT IN ('seed','migrant')";

std::vector<std::vector<std::string>> rows(const std::filesystem::path& db_file, const std::string& sql) {
  sqlite3* db = nullptr;
  sqlite3_open_v2(db_file.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
  sqlite3_stmt* st = nullptr;
  std::vector<std::vector<std::string>> out;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK)
    while (sqlite3_step(st) == SQLITE_ROW) {
      std::vector<std::string> row;
      for (int c = 0; c < sqlite3_column_count(st); ++c) {
        auto* p = sqlite3_column_text(st, c);
        row.emplace_back(p ? reinterpret_cast<const char*>(p) : "");
      }
      out.push_back(std::move(row));
    }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return out;
}

long count(const std::filesystem::path& db_file, const std::string& sql) {
  auto r = rows(db_file, sql);
  return r.empty() || r[0].empty() || r[0][0].empty() ? -1 : std::stol(r[0][0]);
}

// Delays every mutation answer by [lo, hi) seconds (varied by request) and records how many
// were being answered at once.
struct SlowModel {
  std::atomic<int> now{0}, most{0}, served{0};
  void attach(LoopbackLlmServer& server, double lo, double hi) {
    server.set_responder(
        [this, lo, hi](const std::string&,
                       const std::vector<std::pair<std::string, std::string>>& m) -> std::optional<std::string> {
          const bool mutation = !m.empty() && m.front().second.find("EVOLVE-BLOCK") != std::string::npos;
          if (!mutation) return std::nullopt;
          int n = ++now;
          for (int seen = most.load(); n > seen && !most.compare_exchange_weak(seen, n);) {
          }
          const int k = served++;
          std::this_thread::sleep_for(std::chrono::duration<double>(lo + (hi - lo) * double((k * 7) % 10) / 10.0));
          --now;
          return std::nullopt;  // the server's own prompt-driven answer, after the delay
        });
  }
};

std::filesystem::path write_config(const std::filesystem::path& root, int generations, const std::string& extra) {
  std::filesystem::create_directories(root);
  const auto file = root / "config.yaml";
  write_file_atomic(file, "num_generations: " + std::to_string(generations) +
                              "\n"
                              "num_islands: 2\n"
                              "max_parallel_jobs: 2\n"
                              "max_parallel_proposals: 4\n"
                              "meta_rec_interval: 4\n"
                              "migration_interval: 5\n"
                              "confirm_runs: 0\n"
                              "noise_runs: 0\n"
                              "request_timeout_s: 30\n"
                              "api_type: host\n"
                              // The server makes one-line edits; 0.995 would call most of them duplicates.
                              "code_embed_sim_threshold: 0.9999\n" +
                              extra);
  return file;
}

const std::filesystem::path kWorkload = std::filesystem::path(BRAID_SOURCE_DIR) / "examples" / "matmul_cpu";

// Replays `run1` (its answers and evaluations) into `run2` and expects every stored program again,
// field for field.
void expect_replay_identical(const std::filesystem::path& config, const std::filesystem::path& run1,
                             const std::filesystem::path& run2, const std::string& seed) {
  auto second = test::run_braid({"evolve", kWorkload.string(), "--config", config.string(), "--results", run2.string(),
                                 "--seed", seed, "--llm", "replay:" + run1.string(), "--replay-evals"});
  ASSERT_EQ(second.code, 0) << second.output;
  const std::string sql =
      "SELECT id, code, patch_type, failure_kind, combined_score, parent_id FROM programs ORDER BY generation, id";
  auto a = rows(run1 / "evolution.db", sql), b = rows(run2 / "evolution.db", sql);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "program " << a[i][0];
}

// A first mutation prompt as the model read it: generation, the parent's text, the focus list.
struct FirstAsk {
  long generation = 0;
  std::string parent;
  std::set<std::string> focus;
  std::set<std::string> pairs;  // two-knob changes to choose from (its one-knob share was claimed)
};

std::vector<FirstAsk> first_asks(const LoopbackLlmServer& server) {
  std::vector<FirstAsk> out;
  std::set<long> seen;
  for (const auto& r : server.requests()) {
    const auto& m = r.body.value("messages", nlohmann::json::array());
    if (m.empty() || m.size() > 2) continue;  // a retry continues the conversation
    const std::string user = m.back().value("content", "");
    const auto head = user.find("# Current program (id ");
    if (head == std::string::npos) continue;
    FirstAsk a;
    a.generation = std::stol(user.substr(user.find("generation ", head) + 11));
    const auto code = user.find("```", head), code_end = user.find("\n```", code + 3);
    a.parent = user.substr(code, code_end - code);
    for (auto [header, list] : {std::pair{"Changes of one knob for you to choose from", &a.focus},
                                std::pair{"Changes of two knobs together for you to choose from", &a.pairs}})
      if (auto at = user.find(header); at != std::string::npos)
        for (auto line = user.find('\n', at) + 1; user.compare(line, 2, "- ") == 0; line = user.find('\n', line) + 1)
          list->insert(user.substr(line + 2, user.find('\n', line) - line - 2));
    if (seen.insert(a.generation).second) out.push_back(std::move(a));
  }
  return out;
}

TEST(ConcurrentProposals, ReplayOfARunWithProposalsInFlightIsIdentical) {
  LoopbackLlmServer server;
  SlowModel model;
  model.attach(server, 0.3, 1.2);
  auto root = test::fresh_dir("proposals_replay");
  auto config = write_config(root, 10, "");
  const auto run1 = root / "run1", run2 = root / "run2";
  ::setenv("OPENAI_API_KEY", "sk-loopback", 1);
  auto first = test::run_braid({"evolve", kWorkload.string(), "--config", config.string(), "--results", run1.string(),
                                "--seed", "5", "--llm", "openai:gpt-4.1-mini@" + server.base_url()});
  ASSERT_EQ(first.code, 0) << first.output;
  EXPECT_GE(model.most.load(), 2) << "proposals were never in flight together";
  EXPECT_EQ(count(run1 / "evolution.db", "SELECT COUNT(DISTINCT generation) " + kChildren), 10);
  // Proposals for the same parent text asked blind (generations less than 2 x 4 apart) were given
  // disjoint changes to choose from (search/sibling_focus.hpp).
  const auto asks = first_asks(server);
  EXPECT_GE(asks.size(), 10u);
  int siblings = 0, focused = 0;
  for (std::size_t i = 0; i < asks.size(); ++i) {
    focused += !asks[i].focus.empty() || !asks[i].pairs.empty();  // none once every change is taken
    for (std::size_t j = 0; j < i; ++j) {
      if (asks[i].parent != asks[j].parent || std::labs(asks[i].generation - asks[j].generation) >= 8) continue;
      ++siblings;
      for (const auto& change : asks[i].focus)
        EXPECT_FALSE(asks[j].focus.count(change))
            << change << " in the focus of generations " << asks[j].generation << " and " << asks[i].generation;
      for (const auto& change : asks[i].pairs)
        EXPECT_FALSE(asks[j].pairs.count(change))
            << change << " in the pairs of generations " << asks[j].generation << " and " << asks[i].generation;
    }
  }
  EXPECT_GE(siblings, 3) << "no blind siblings to compare";
  EXPECT_GE(focused * 2, int(asks.size())) << "most first prompts have a focus";

  const std::size_t served = server.request_count();
  expect_replay_identical(config, run1, run2, "5");
  ::unsetenv("OPENAI_API_KEY");
  EXPECT_EQ(server.request_count(), served);  // no network
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(root);
}

// The first mutation answer comes late: the later generations' knob-only candidates wait for its
// turn, and the idle evaluation slots evaluate them ahead meanwhile (kept out of the database
// until their turn). The run still ends with every generation once, and a replay repeats it.
TEST(ConcurrentProposals, CandidatesWaitingForTheirTurnAreEvaluatedAheadAndReplayIdentically) {
  LoopbackLlmServer server;
  // Generation 1's first ask is the slow one, whichever request reaches the server first (on a
  // loaded machine generation 2's often does).
  std::atomic<bool> slowed{false};
  server.set_responder(
      [&](const std::string&, const std::vector<std::pair<std::string, std::string>>& m) -> std::optional<std::string> {
        if (m.empty() || m.front().second.find("EVOLVE-BLOCK") == std::string::npos) return std::nullopt;
        const std::string& user = m.back().second;
        const auto head = user.find("# Current program (id ");
        const bool first_gen =
            m.size() <= 2 && head != std::string::npos && user.find("generation 1,", head) == user.find("generation ", head);
        std::this_thread::sleep_for(std::chrono::duration<double>(first_gen && !slowed.exchange(true) ? 6.0 : 0.2));
        return std::nullopt;
      });
  auto root = test::fresh_dir("proposals_ahead");
  auto config = write_config(root, 6, "");
  const auto run1 = root / "run1", run2 = root / "run2";
  ::setenv("OPENAI_API_KEY", "sk-loopback", 1);
  auto first = test::run_braid({"evolve", kWorkload.string(), "--config", config.string(), "--results", run1.string(),
                                "--seed", "3", "--llm", "openai:gpt-4.1-mini@" + server.base_url()});
  ASSERT_EQ(first.code, 0) << first.output;
  EXPECT_NE(first.output.find("evaluated ahead of its turn"), std::string::npos) << first.output;
  EXPECT_EQ(count(run1 / "evolution.db", "SELECT COUNT(*) " + kChildren), 6);
  EXPECT_EQ(count(run1 / "evolution.db", "SELECT COUNT(DISTINCT generation) " + kChildren), 6);

  expect_replay_identical(config, run1, run2, "3");
  ::unsetenv("OPENAI_API_KEY");
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(root);
}

// Holds the first meta-summary answer until `wanted` more evaluated children are stored (or
// `cap_s` has passed) and records how many were stored meanwhile: a search that waited for the
// summary would store at most the max_parallel_jobs evaluations already running.
struct SlowMeta {
  std::atomic<int> asked{0}, stored_meanwhile{-1};
  void attach(LoopbackLlmServer& server, std::filesystem::path db, int wanted, double cap_s) {
    server.set_responder([this, db, wanted, cap_s](
                             const std::string& system,
                             const std::vector<std::pair<std::string, std::string>>&) -> std::optional<std::string> {
      if (system.find("You guide an evolutionary search") == std::string::npos || ++asked > 1) return std::nullopt;
      const std::string evaluated = "SELECT COUNT(*) " + kChildren + " AND failure_kind != 'rejected'";
      const long before = count(db, evaluated);
      const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(cap_s);
      long now = before;
      while (now - before < wanted && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        now = count(db, evaluated);
      }
      stored_meanwhile = int(now - before);
      return std::nullopt;  // the server's own meta answer, after the wait
    });
  }
};

// A meta summary that takes long no longer stalls the search: while the model writes it, the
// search goes on proposing and evaluating (a summary on the search thread would let at most the
// max_parallel_jobs evaluations already running finish). A replay still repeats the run.
TEST(ConcurrentProposals, ASlowMetaSummaryDoesNotStallTheSearchAndReplaysIdentically) {
  LoopbackLlmServer server;
  auto root = test::fresh_dir("proposals_slow_meta");
  auto config = write_config(root, 10, "");  // a summary every 4 generations
  const auto run1 = root / "run1", run2 = root / "run2";
  SlowMeta model;
  model.attach(server, run1 / "evolution.db", 3, 20.0);
  ::setenv("OPENAI_API_KEY", "sk-loopback", 1);
  auto first = test::run_braid({"evolve", kWorkload.string(), "--config", config.string(), "--results", run1.string(),
                                "--seed", "6", "--llm", "openai:gpt-4.1-mini@" + server.base_url()});
  ASSERT_EQ(first.code, 0) << first.output;
  EXPECT_EQ(model.asked.load(), 2);
  EXPECT_GE(model.stored_meanwhile.load(), 3) << "the search waited for the meta summary";
  EXPECT_EQ(count(run1 / "evolution.db", "SELECT COUNT(DISTINCT generation) " + kChildren), 10);
  EXPECT_TRUE(std::filesystem::exists(run1 / "meta_4.txt"));
  EXPECT_TRUE(std::filesystem::exists(run1 / "meta_8.txt"));  // the last, still out at the end, is written too

  const std::size_t served = server.request_count();
  expect_replay_identical(config, run1, run2, "6");
  ::unsetenv("OPENAI_API_KEY");
  EXPECT_EQ(server.request_count(), served);  // no network
  EXPECT_EQ(read_file(run1 / "meta_memory.json"), read_file(run2 / "meta_memory.json"));
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(root);
}

TEST(ConcurrentProposals, KillDuringProposalsLosesNoEvaluatedCandidate) {
  LoopbackLlmServer server;
  SlowModel model;
  model.attach(server, 1.0, 2.0);
  auto root = test::fresh_dir("proposals_kill");
  auto config = write_config(root, 8, "");
  const auto run = root / "run", db = run / "evolution.db";
  ::setenv("OPENAI_API_KEY", "sk-loopback", 1);
  test::Proc p = test::start_braid({"evolve", kWorkload.string(), "--config", config.string(), "--results",
                                    run.string(), "--seed", "9", "--llm", "openai:gpt-4.1-mini@" + server.base_url()},
                                   root / "first.log");
  // Killed once an evaluated child is stored while the model is answering other proposals (a
  // child rejected before evaluation, e.g. a duplicate knob vector, does not count: it is the
  // evaluated ones that must survive).
  const std::string evaluated = kChildren + " AND failure_kind != 'rejected'";
  bool killed_mid_proposals = false;
  for (int i = 0; i < 2400 && !killed_mid_proposals; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (std::filesystem::exists(db) && count(db, "SELECT COUNT(*) " + evaluated) >= 1 && model.now.load() >= 1) {
      ::kill(p.pid, SIGKILL);
      killed_mid_proposals = true;
    }
  }
  if (!killed_mid_proposals) ::kill(p.pid, SIGKILL);
  test::wait_exit(p);
  ASSERT_TRUE(killed_mid_proposals) << read_file(root / "first.log");
  const std::string ids_sql = "SELECT id, code, combined_score " + evaluated + " ORDER BY id";
  auto before = rows(db, ids_sql);
  ASSERT_FALSE(before.empty());

  auto done = test::run_braid({"resume", run.string()});
  ::unsetenv("OPENAI_API_KEY");
  ASSERT_EQ(done.code, 0) << done.output;
  EXPECT_EQ(count(db, "SELECT COUNT(*) " + kChildren), 8);
  EXPECT_EQ(count(db, "SELECT COUNT(DISTINCT generation) " + kChildren), 8);
  EXPECT_EQ(count(db, "SELECT COUNT(*) FROM jobs"), 0);
  // Every candidate evaluated before the kill is still there, unchanged.
  auto after = rows(db, ids_sql);
  std::set<std::vector<std::string>> kept(after.begin(), after.end());
  for (auto& r : before) EXPECT_TRUE(kept.count(r)) << "lost " << r[0];
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(root);
}

TEST(ConcurrentProposals, PerModelLimitCapsTheRequestsInFlight) {
  LoopbackLlmServer server;
  SlowModel model;
  model.attach(server, 0.5, 1.0);
  auto root = test::fresh_dir("proposals_per_model");
  // Four proposals may be asked at once, but the model takes two.
  auto config = write_config(root, 8, "max_requests_per_model: 2\n");
  ::setenv("OPENAI_API_KEY", "sk-loopback", 1);
  auto r =
      test::run_braid({"evolve", kWorkload.string(), "--config", config.string(), "--results", (root / "run").string(),
                       "--seed", "4", "--llm", "openai:gpt-4.1-mini@" + server.base_url()});
  ::unsetenv("OPENAI_API_KEY");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(model.most.load(), 2);
  EXPECT_EQ(count(root / "run" / "evolution.db", "SELECT COUNT(DISTINCT generation) " + kChildren), 8);
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(root);
}

TEST(ConcurrentProposals, RateLimitStormSlowsThePoolInsteadOfFailingCandidates) {
  LoopbackLlmServer server;
  server.set_retry_after("0");
  // The first 12 requests are refused with 429; the client gives up at once (max_retries 0),
  // so every refusal reaches the pool.
  server.set_fault_plan([](std::size_t n) { return n < 12 ? Fault::RateLimit : Fault::None; });
  auto root = test::fresh_dir("proposals_429");
  auto config = write_config(root, 6, "max_retries: 0\nmax_patch_attempts: 2\n");
  const auto run = root / "run", db = run / "evolution.db";
  ::setenv("OPENAI_API_KEY", "sk-loopback", 1);
  auto r = test::run_braid({"evolve", kWorkload.string(), "--config", config.string(), "--results", run.string(),
                            "--seed", "3", "--llm", "openai:gpt-4.1-mini@" + server.base_url()});
  ::unsetenv("OPENAI_API_KEY");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_GE(server.faults_injected()["rate_limit"], 12);
  EXPECT_NE(r.output.find("proposals paused"), std::string::npos) << r.output;
  EXPECT_EQ(count(db, "SELECT COUNT(DISTINCT generation) " + kChildren), 6);
  // No candidate failed for the rate limit: no attempt and no rejection names it.
  EXPECT_EQ(count(db, "SELECT COUNT(*) FROM attempts WHERE error LIKE '%rate_limited%'"), 0);
  EXPECT_EQ(count(db, "SELECT COUNT(*) " + kChildren + " AND error_text LIKE '%rate_limited%'"), 0);
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace braid
