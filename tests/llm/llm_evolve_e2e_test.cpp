// End to end: `braid evolve` of the CPU example driven by the loopback LLM server through
// faults, then replayed from its recording with --replay-evals and compared.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <thread>

#include "../e2e/e2e_support.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/json.hpp"
#include "loopback_llm_server.hpp"

namespace braid {
namespace {

using testing::Fault;
using testing::LoopbackLlmServer;

struct Row {
  std::string id, code, patch_type, failure, error, feedback, model;
  double score = 0;
  bool operator==(const Row& o) const {
    return id == o.id && code == o.code && patch_type == o.patch_type && failure == o.failure && score == o.score;
  }
};

std::vector<Row> programs(const std::filesystem::path& db_file) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(db_file.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  std::vector<Row> out;
  const char* sql =
      "SELECT id, code, patch_type, failure_kind, error_text, text_feedback, model, combined_score FROM programs "
      "ORDER BY generation, id";
  EXPECT_EQ(sqlite3_prepare_v2(db, sql, -1, &st, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  auto text = [&](int c) {
    auto* p = sqlite3_column_text(st, c);
    return p ? std::string(reinterpret_cast<const char*>(p)) : std::string();
  };
  while (st && sqlite3_step(st) == SQLITE_ROW)
    out.push_back({text(0), text(1), text(2), text(3), text(4), text(5), text(6), sqlite3_column_double(st, 7)});
  sqlite3_finalize(st);
  sqlite3_close(db);
  return out;
}

json query_json(const std::filesystem::path& db_file, const std::string& sql) {
  sqlite3* db = nullptr;
  sqlite3_open_v2(db_file.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
  sqlite3_stmt* st = nullptr;
  json rows = json::array();
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK) {
    while (sqlite3_step(st) == SQLITE_ROW) {
      json row = json::array();
      for (int c = 0; c < sqlite3_column_count(st); ++c) {
        auto* p = sqlite3_column_text(st, c);
        row.push_back(p ? std::string(reinterpret_cast<const char*>(p)) : std::string());
      }
      rows.push_back(row);
    }
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return rows;
}

TEST(LlmEvolveE2E, FaultStormFeedbackMetaCostReplayAndSecrets) {
  const std::string key = "sk-e2e-loopback-secret-8d1f2c";
  LoopbackLlmServer server;
  server.require_key(key);
  server.set_break_every(3);
  server.set_stall_seconds(1.2);
  server.set_retry_after("0");
  server.set_fault_plan([](std::size_t n) {
    if (n % 9 == 2) return Fault::RateLimit;
    if (n % 11 == 4) return Fault::ServerError;
    if (n % 13 == 6) return Fault::Truncated;
    if (n % 17 == 8) return Fault::NoPatch;
    if (n % 19 == 10) return Fault::Empty;
    if (n % 23 == 12) return Fault::Refusal;
    if (n % 29 == 14) return Fault::Stall;
    if (n % 31 == 16) return Fault::Drop;
    if (n % 37 == 18) return Fault::Malformed;
    return Fault::None;
  });

  auto root = test::fresh_dir("llm_e2e");
  std::filesystem::create_directories(root);
  // Two models, one per protocol, taking turns (round robin).
  const std::string openai = "openai:gpt-4.1-mini@" + server.base_url();
  const std::string anthropic = "anthropic:claude-sonnet-4-5@" + server.base_url();
  write_file_atomic(root / "config.yaml",
                    "num_generations: 12\n"
                    "num_islands: 2\n"
                    // Two evaluations in flight: results are indexed in generation order, so
                    // the replay must still repeat the run exactly.
                    "max_parallel_jobs: 2\n"
                    "meta_rec_interval: 4\n"
                    "migration_interval: 6\n"
                    "llm_prices:\n  gpt-4.1-mini: {input: 0.4, output: 1.6}\n  claude-sonnet-4-5: {input: 3, output: 15}\n"
                    "request_timeout_s: 0.6\n"
                    "max_retries: 3\n"
                    "retry_backoff_s: 0\n"
                    "retry_backoff_max_s: 0\n"
                    "api_type: host\n"
                    // The server makes one-line edits; the default 0.995 would call most of them duplicates.
                    "code_embed_sim_threshold: 0.9999\n");
  const auto workload = std::filesystem::path(BRAID_SOURCE_DIR) / "examples" / "matmul_cpu";
  const auto run1 = root / "run1", run2 = root / "run2";

  ::setenv("OPENAI_API_KEY", key.c_str(), 1);
  ::setenv("ANTHROPIC_API_KEY", key.c_str(), 1);
  auto first = test::run_braid({"evolve", workload.string(), "--config", (root / "config.yaml").string(), "--results",
                                run1.string(), "--seed", "7", "--llm", openai + "," + anthropic});
  ::unsetenv("OPENAI_API_KEY");
  ::unsetenv("ANTHROPIC_API_KEY");
  ASSERT_EQ(first.code, 0) << first.output;
  EXPECT_EQ(first.output.find(key), std::string::npos);

  auto rows = programs(run1 / "evolution.db");
  ASSERT_GE(rows.size(), 13u);  // the seed (per island) and 12 children
  std::set<std::string> patch_types, models_used;
  int with_feedback = 0, probe_failures = 0;
  for (auto& r : rows) {
    patch_types.insert(r.patch_type);
    if (r.patch_type != "seed" && r.patch_type != "migrant") {
      EXPECT_TRUE(r.model == openai || r.model == anthropic) << r.id << ": " << r.model;
      models_used.insert(r.model);
    }
    if (!r.feedback.empty() && r.patch_type != "seed") ++with_feedback;
    if (r.failure == "build_failed" && r.error.find("braid_probe_undeclared") != std::string::npos) ++probe_failures;
  }
  EXPECT_EQ(models_used.size(), 2u);
  std::set<std::string> paths;
  for (auto& r : server.requests()) paths.insert(r.path);
  EXPECT_EQ(paths, (std::set<std::string>{"/v1/chat/completions", "/v1/messages"}));
  auto kinds = server.answers_by_kind();
  EXPECT_GE(kinds["diff"] + kinds["full"] + kinds["cross"], 12);
  EXPECT_GE(patch_types.count("diff") + patch_types.count("full") + patch_types.count("cross"), 2u);
  EXPECT_GT(kinds["feedback"], 0);
  EXPECT_GT(with_feedback, 0);
  // The feedback path: a broken patch failed to build with the real compiler's error, and
  // the server produced its fix only after a prompt carried that error.
  EXPECT_GT(server.broken_answers(), 0);
  EXPECT_GT(probe_failures, 0);
  EXPECT_GT(server.fixes_after_error(), 0);
  auto exchanges = read_file(run1 / "llm_exchanges.jsonl");
  EXPECT_NE(exchanges.find("braid_probe_undeclared"), std::string::npos);

  // Meta-summaries: files in the results, recommendations from the model.
  ASSERT_TRUE(std::filesystem::exists(run1 / "meta_memory.json"));
  json memory = json::parse(read_file(run1 / "meta_memory.json"));
  ASSERT_FALSE(memory["recommendations"].empty());
  EXPECT_EQ(memory["recommendations"][0], "Try kOrder = LoopOrder::IKJ with kTransposeB = false");
  bool meta_txt = false;
  for (auto& e : std::filesystem::directory_iterator(run1))
    meta_txt = meta_txt || e.path().filename().string().rfind("meta_", 0) == 0 && e.path().extension() == ".txt";
  EXPECT_TRUE(meta_txt);
  EXPECT_GT(kinds["meta"], 0);

  // Cost and faults in the database.
  json totals = query_json(run1 / "evolution.db", "SELECT COUNT(*), SUM(cost_usd), SUM(tokens_in) FROM llm_calls");
  ASSERT_EQ(totals.size(), 1u);
  EXPECT_GT(std::stod(totals[0][0].get<std::string>()), 12);
  EXPECT_GT(std::stod(totals[0][1].get<std::string>()), 0.0);
  json kinds_db = query_json(run1 / "evolution.db",
                             "SELECT error_kind, COUNT(*) FROM llm_calls WHERE error_kind != '' GROUP BY error_kind");
  json retried = query_json(run1 / "evolution.db", "SELECT retried_errors FROM llm_calls WHERE retried_errors != '[]'");
  std::string seen = kinds_db.dump() + retried.dump();
  for (auto k : {"rate_limited", "server_error", "malformed"}) EXPECT_NE(seen.find(k), std::string::npos) << k << seen;
  auto injected = server.faults_injected();
  EXPECT_GT(injected["rate_limit"], 0);

  // Secrets: no written file holds the key.
  for (auto& e : std::filesystem::recursive_directory_iterator(run1))
    if (e.is_regular_file()) EXPECT_EQ(read_file(e.path()).find(key), std::string::npos) << e.path();

  // Replay with recorded evaluations: no network, identical programs.
  std::size_t served = server.request_count();
  auto second = test::run_braid({"evolve", workload.string(), "--config", (root / "config.yaml").string(), "--results",
                                 run2.string(), "--seed", "7", "--llm", "replay:" + run1.string(), "--replay-evals"});
  ASSERT_EQ(second.code, 0) << second.output;
  EXPECT_EQ(server.request_count(), served);
  auto replayed = programs(run2 / "evolution.db");
  ASSERT_EQ(replayed.size(), rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) EXPECT_TRUE(replayed[i] == rows[i]) << "program " << rows[i].id;
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(root);
}

// Hostile answers (issue #18): text that is not UTF-8, a Latin-1 502 page, a gzip bomb and a huge
// answer are failures of single calls; the run finishes, every exchange record is bounded JSON,
// and the run resumes.
TEST(LlmEvolveE2E, HostileAnswersDoNotStopTheRun) {
  LoopbackLlmServer server;
  server.set_retry_after("0");
  server.set_fault_plan([](std::size_t n) {
    switch (n % 6) {
      case 0: return Fault::InvalidUtf8;
      case 1: return Fault::Latin1BadGateway;
      case 2: return Fault::GzipBomb;
      case 3: return Fault::Huge;
      default: return Fault::None;
    }
  });
  auto root = test::fresh_dir("llm_hostile");
  std::filesystem::create_directories(root);
  write_file_atomic(root / "config.yaml",
                    "num_generations: 4\nnum_islands: 1\nmax_parallel_jobs: 2\nmax_retries: 2\nretry_backoff_s: 0\n"
                    "retry_backoff_max_s: 0\napi_type: host\nfeedback_llm_model: none\nmeta_llm_model: none\n"
                    "code_embed_sim_threshold: 0.9999\n");
  const auto workload = std::filesystem::path(BRAID_SOURCE_DIR) / "examples" / "matmul_cpu";
  const auto run = root / "run";
  const std::string model = "local:m@" + server.base_url();
  auto first = test::run_braid({"evolve", workload.string(), "--config", (root / "config.yaml").string(), "--results",
                                run.string(), "--seed", "5", "--llm", model});
  ASSERT_EQ(first.code, 0) << first.output;
  EXPECT_EQ(first.output.find("terminate called"), std::string::npos);
  auto injected = server.faults_injected();
  for (auto k : {"invalid_utf8", "latin1_bad_gateway", "gzip_bomb", "huge"}) EXPECT_GT(injected[k], 0) << k;
  // Every exchange record is valid JSON and bounded; the log holds no megabytes of answer.
  std::ifstream in(run / "llm_exchanges.jsonl");
  std::size_t lines = 0, bytes = 0;
  for (std::string line; std::getline(in, line); ++lines) {
    bytes += line.size();
    EXPECT_FALSE(json::parse(line, nullptr, false).is_discarded()) << "line " << lines;
  }
  EXPECT_GT(lines, 4u);
  EXPECT_LT(bytes, std::size_t(4) << 20);
  auto rows = programs(run / "evolution.db");
  std::size_t children = 0;
  for (auto& r : rows) children += r.patch_type != "seed";
  EXPECT_EQ(children, 4u);
  auto more = test::run_braid({"resume", run.string(), "--generations", "6"});
  EXPECT_EQ(more.code, 0) << more.output;
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(root);
}

// A rejected key (401) ends the run at once with one line naming the key's variable and exit
// code 2; no candidate is stored as rejected because of it.
TEST(LlmEvolveE2E, RejectedKeyStopsTheRun) {
  LoopbackLlmServer server;
  server.require_key("the-right-key");
  auto root = test::fresh_dir("llm_auth");
  std::filesystem::create_directories(root);
  write_file_atomic(root / "config.yaml", "num_generations: 20\nnum_islands: 1\napi_key_env: BRAID_E2E_AUTH_KEY\napi_type: host\n");
  const auto workload = std::filesystem::path(BRAID_SOURCE_DIR) / "examples" / "matmul_cpu";
  const auto run = root / "run";
  ::setenv("BRAID_E2E_AUTH_KEY", "sk-wrong-key-0042", 1);
  auto o = test::run_braid({"evolve", workload.string(), "--config", (root / "config.yaml").string(), "--results",
                            run.string(), "--seed", "5", "--llm", "openai:gpt-4.1-mini@" + server.base_url()});
  ::unsetenv("BRAID_E2E_AUTH_KEY");
  EXPECT_EQ(o.code, 2) << o.output;
  EXPECT_NE(o.output.find("braid: BRAID_E2E_AUTH_KEY: was refused"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("401"), std::string::npos) << o.output;
  EXPECT_EQ(o.output.find("sk-wrong-key-0042"), std::string::npos) << o.output;
  EXPECT_LE(server.request_count(), 2u);  // not one request per candidate
  for (auto& r : programs(run / "evolution.db")) EXPECT_EQ(r.patch_type, "seed") << r.id << " " << r.error;
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(root);
}

// Ctrl-C while a request is stalled: the request is cancelled (it would otherwise wait out a
// 600 s timeout), braid exits 130, and the interrupted proposal is not stored.
TEST(LlmEvolveE2E, CtrlCCancelsAStalledRequest) {
  LoopbackLlmServer server;
  server.set_stall_seconds(600);
  server.set_fault_plan([](std::size_t) { return Fault::Stall; });
  auto root = test::fresh_dir("llm_sigint");
  std::filesystem::create_directories(root);
  write_file_atomic(root / "config.yaml", "num_generations: 5\nnum_islands: 1\nrequest_timeout_s: 600\napi_type: host\n"
                                          "feedback_llm_model: none\nmeta_llm_model: none\n");
  const auto workload = std::filesystem::path(BRAID_SOURCE_DIR) / "examples" / "matmul_cpu";
  const auto run = root / "run";
  auto log = root / "braid.log";
  test::Proc p = test::start_braid({"evolve", workload.string(), "--config", (root / "config.yaml").string(), "--results",
                                    run.string(), "--seed", "5", "--llm", "local:m@" + server.base_url()},
                                   log);
  for (int i = 0; i < 1200 && server.request_count() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_GT(server.request_count(), 0u) << read_file(log);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto t0 = std::chrono::steady_clock::now();
  ::kill(p.pid, SIGINT);
  int code = test::wait_exit(p);
  std::printf("exited %.2f s after SIGINT\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  EXPECT_EQ(code, 130) << read_file(log);
  EXPECT_NE(read_file(log).find("braid resume"), std::string::npos);
  for (auto& r : programs(run / "evolution.db")) EXPECT_EQ(r.patch_type, "seed") << r.id << " " << r.error;
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(root);
}

// Gemini, Bedrock and command: in one run: a Gemini model, a Bedrock model (both answered by the
// loopback server, which writes real patches) and a command: agent (a shell script) take turns;
// the keys never reach the output, the database, the exchange log or the agent's environment.
TEST(ProvidersE2E, GeminiBedrockAndCommandTakeTurns) {
  const std::string gemini_key = "gm-e2e-secret-5c1e9a";
  const std::string aws_secret = "aws-e2e-secret/7f3b+d2";
  const std::string aws_token = "aws-e2e-session-token-91aa";
  LoopbackLlmServer server;
  server.require_key(gemini_key);  // checked on Gemini requests; Bedrock's are signed
  auto root = test::fresh_dir("providers_e2e");
  std::filesystem::create_directories(root);
  const auto agent = root / "agent.sh";
  write_file_atomic(agent, "#!/bin/sh\ncat > /dev/null\nenv >> \"" + (root / "agent_env.txt").string() +
                               "\"\necho 'I would keep the program as it is.'\n");
  std::filesystem::permissions(agent, std::filesystem::perms::owner_all);
  write_file_atomic(root / "config.yaml",
                    "num_generations: 3\nnum_islands: 1\napi_type: host\nmeta_llm_model: none\n"
                    "confirm_runs: 0\nnoise_runs: 0\nmax_patch_attempts: 1\ncode_embed_sim_threshold: 0.9999\n");
  const std::string port = std::to_string(server.port());
  const std::string gemini = "gemini:gemini-e2e@http://127.0.0.1:" + port;
  const std::string bedrock = "bedrock:anthropic.claude-e2e-v1:0@http://127.0.0.1:" + port + "?region=us-east-2";
  const std::string command = "command:" + agent.string();
  const auto workload = std::filesystem::path(BRAID_SOURCE_DIR) / "examples" / "matmul_cpu";
  const auto run = root / "run";

  ::setenv("GEMINI_API_KEY", gemini_key.c_str(), 1);
  ::setenv("AWS_ACCESS_KEY_ID", "AKIDE2ETEST", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", aws_secret.c_str(), 1);
  ::setenv("AWS_SESSION_TOKEN", aws_token.c_str(), 1);
  auto o = test::run_braid({"evolve", workload.string(), "--config", (root / "config.yaml").string(), "--results",
                            run.string(), "--seed", "3", "--llm", gemini + "," + bedrock + "," + command});
  for (const char* v : {"GEMINI_API_KEY", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"}) ::unsetenv(v);
  ASSERT_EQ(o.code, 0) << o.output;

  // Every model was asked; the HTTP ones through their own protocol.
  std::set<std::string> paths;
  int signed_requests = 0;
  for (auto& r : server.requests()) {
    paths.insert(r.path);
    if (r.path.rfind("/model/", 0) == 0) {
      EXPECT_TRUE(std::regex_match(r.headers["authorization"],
                                   std::regex(R"(AWS4-HMAC-SHA256 Credential=AKIDE2ETEST/\d{8}/us-east-2/bedrock/aws4_request, )"
                                              R"(SignedHeaders=content-type;host;x-amz-date;x-amz-security-token, Signature=[0-9a-f]{64})")))
          << r.headers["authorization"];
      ++signed_requests;
    }
  }
  EXPECT_TRUE(paths.count("/v1beta/models/gemini-e2e:generateContent"));
  EXPECT_TRUE(paths.count("/model/anthropic.claude-e2e-v1:0/invoke"));
  EXPECT_GT(signed_requests, 0);
  const std::string agent_env = read_file(root / "agent_env.txt");  // the agent ran
  EXPECT_NE(agent_env.find("PATH="), std::string::npos);

  // Patches from the HTTP models were evaluated; the agent's answers have none.
  std::map<std::string, int> evaluated, proposed;
  for (auto& r : programs(run / "evolution.db")) {
    ++proposed[r.model];
    if (r.failure == "ok" && r.patch_type != "seed") ++evaluated[r.model];
  }
  EXPECT_GT(evaluated[gemini], 0);
  EXPECT_GT(evaluated[bedrock], 0);
  EXPECT_GT(proposed[command], 0);
  EXPECT_EQ(evaluated[command], 0);
  const std::string db = read_file(run / "evolution.db");

  for (const std::string& secret : {gemini_key, aws_secret, aws_token}) {
    EXPECT_EQ(o.output.find(secret), std::string::npos) << secret;
    EXPECT_EQ(db.find(secret), std::string::npos) << secret;
    EXPECT_EQ(agent_env.find(secret), std::string::npos) << secret;
    for (auto& f : std::filesystem::recursive_directory_iterator(run))
      if (f.is_regular_file()) EXPECT_EQ(read_file(f.path()).find(secret), std::string::npos) << f.path() << " " << secret;
  }
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace braid
