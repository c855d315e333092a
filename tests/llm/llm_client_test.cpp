// Clients, retries, faults, ledger, record/replay, bandit, templates and settings, against a
// real HTTP server on loopback.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "braid/llm/client.hpp"
#include "braid/llm/embeddings.hpp"
#include "braid/llm/exchange_log.hpp"
#include "braid/llm/hardware.hpp"
#include "braid/llm/ledger.hpp"
#include "braid/llm/model_selector.hpp"
#include "braid/llm/model_spec.hpp"
#include "braid/llm/prompt_template.hpp"
#include "braid/llm/secrets.hpp"
#include "braid/llm/settings.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"
#include "loopback_llm_server.hpp"

namespace braid::llm {
namespace {

using testing::Fault;
using testing::LoopbackLlmServer;

std::filesystem::path temp_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("braid_llm_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

LlmRequest simple_request(const std::string& text = "ping") {
  LlmRequest r;
  r.system = "You are terse.";
  r.messages = {{"user", text}};
  r.temperature = 0.5;
  r.max_tokens = 64;
  return r;
}

RetryPolicy fast_policy(int retries = 3) {
  RetryPolicy p;
  p.max_retries = retries;
  p.timeout_s = 5.0;
  p.backoff_base_s = 0.01;
  p.backoff_max_s = 0.05;
  return p;
}

TEST(ModelSpec, ParsesProvidersAndLocations) {
  auto o = parse_model_spec("openai:gpt-4.1-mini");
  EXPECT_EQ(o.provider, "openai");
  EXPECT_EQ(o.endpoint(), "https://api.openai.com/v1/chat/completions");
  EXPECT_EQ(o.key_env, "OPENAI_API_KEY");
  EXPECT_FALSE(o.is_reasoning_model());

  auto a = parse_model_spec("anthropic:claude-sonnet-4-5");
  EXPECT_EQ(a.protocol, ApiProtocol::AnthropicMessages);
  EXPECT_EQ(a.endpoint(), "https://api.anthropic.com/v1/messages");
  EXPECT_EQ(a.key_env, "ANTHROPIC_API_KEY");

  auto z = parse_model_spec("azure:my-dep@https://x.openai.azure.com/?api-version=2024-10-21");
  EXPECT_EQ(z.endpoint(), "https://x.openai.azure.com/openai/deployments/my-dep/chat/completions?api-version=2024-10-21");
  EXPECT_EQ(z.key_env, "AZURE_OPENAI_API_KEY");

  auto l = parse_model_spec("local:qwen2.5-coder@http://127.0.0.1:8000/v1");
  EXPECT_EQ(l.endpoint(), "http://127.0.0.1:8000/v1/chat/completions");
  EXPECT_TRUE(l.key_optional);

  EXPECT_EQ(parse_model_spec("claude-3-5-haiku").provider, "anthropic");
  EXPECT_TRUE(parse_model_spec("o3-mini").is_reasoning_model());
  EXPECT_TRUE(parse_model_spec("openrouter:openai/gpt-5-mini").is_reasoning_model());
  EXPECT_EQ(parse_model_spec("openai:gpt-4.1", "MY_KEY").key_env, "MY_KEY");

  EXPECT_THROW(parse_model_spec("foo:bar"), UserError);
  EXPECT_THROW(parse_model_spec("azure:dep@https://x.openai.azure.com"), UserError);
  EXPECT_THROW(parse_model_spec("local:qwen"), UserError);
  EXPECT_THROW(parse_model_spec("openai:"), UserError);
  EXPECT_THROW(parse_model_spec("local:q@ftp://host"), UserError);
}

TEST(RequestBody, ReasoningModelsAndExtendedThinking) {
  std::vector<std::string> dropped;
  LlmRequest r = simple_request();
  r.extra = {{"top_p", 0.9}};
  json body = build_request_body(parse_model_spec("openai:o3-mini"), r, &dropped);
  EXPECT_FALSE(body.contains("temperature"));
  EXPECT_FALSE(body.contains("top_p"));
  EXPECT_EQ(body["max_completion_tokens"], 64);
  EXPECT_FALSE(body.contains("max_tokens"));
  EXPECT_EQ(body["messages"][0]["role"], "system");
  ASSERT_GE(dropped.size(), 3u);
  EXPECT_NE(dropped[0].find("temperature"), std::string::npos);

  dropped.clear();
  body = build_request_body(parse_model_spec("openai:gpt-4.1-mini"), r, &dropped);
  EXPECT_EQ(body["temperature"], 0.5);
  EXPECT_EQ(body["max_tokens"], 64);
  EXPECT_EQ(body["top_p"], 0.9);
  EXPECT_TRUE(dropped.empty());

  dropped.clear();
  r.extra = {{"thinking", {{"type", "enabled"}, {"budget_tokens", 1024}}}};
  body = build_request_body(parse_model_spec("anthropic:claude-sonnet-4-5"), r, &dropped);
  EXPECT_FALSE(body.contains("temperature"));
  EXPECT_EQ(body["max_tokens"], 1024 + 64);
  EXPECT_EQ(body["system"], "You are terse.");
  EXPECT_EQ(body["messages"].size(), 1u);
  EXPECT_EQ(dropped.size(), 2u);

  dropped.clear();
  r.extra = json::object();
  r.temperature = 1.4;
  body = build_request_body(parse_model_spec("anthropic:claude-sonnet-4-5"), r, &dropped);
  EXPECT_EQ(body["temperature"], 1.0);
  EXPECT_EQ(dropped.size(), 1u);
}

TEST(RetryAfter, SecondsAndDates) {
  EXPECT_EQ(parse_retry_after("3"), 3.0);
  EXPECT_EQ(parse_retry_after(" 0 "), 0.0);
  EXPECT_FALSE(parse_retry_after("soon").has_value());
  auto past = parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT");
  ASSERT_TRUE(past.has_value());
  EXPECT_EQ(*past, 0.0);
}

TEST(Client, OpenAiProtocolOnLoopback) {
  LoopbackLlmServer server;
  server.require_key("sk-loop-1");
  auto client = make_http_client(parse_model_spec("local:coder@" + server.base_url()), "sk-loop-1", fast_policy());
  auto r = client->complete(simple_request("hello"));
  ASSERT_TRUE(r.ok()) << r.error_kind << ": " << r.error;
  EXPECT_EQ(r.text, "pong: hello");
  EXPECT_GT(r.tokens_in, 0);
  EXPECT_GT(r.tokens_out, 0);
  EXPECT_EQ(r.attempts, 1);
  auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].path, "/v1/chat/completions");
  EXPECT_EQ(reqs[0].headers["authorization"], "Bearer sk-loop-1");
  EXPECT_EQ(reqs[0].body["model"], "coder");
  EXPECT_EQ(reqs[0].body["messages"][0]["content"], "You are terse.");
}

TEST(Client, AnthropicAndAzureOnLoopback) {
  LoopbackLlmServer server;
  server.require_key("ak-2");
  auto anth = make_http_client(parse_model_spec("anthropic:claude-x@" + server.base_url()), "ak-2", fast_policy());
  auto r = anth->complete(simple_request("a"));
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.text, "pong: a");
  auto base = "http://127.0.0.1:" + std::to_string(server.port());
  auto az = make_http_client(parse_model_spec("azure:dep1@" + base + "?api-version=2024-10-21"), "ak-2", fast_policy());
  r = az->complete(simple_request("b"));
  ASSERT_TRUE(r.ok()) << r.error;
  auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].path, "/v1/messages");
  EXPECT_EQ(reqs[0].headers["x-api-key"], "ak-2");
  EXPECT_EQ(reqs[0].headers["anthropic-version"], "2023-06-01");
  EXPECT_EQ(reqs[0].body["system"], "You are terse.");
  EXPECT_EQ(reqs[1].path, "/openai/deployments/dep1/chat/completions");
  EXPECT_EQ(reqs[1].headers["api-key"], "ak-2");
  EXPECT_EQ(reqs[1].headers.count("authorization"), 0u);
}

TEST(Client, RetriesHonourRetryAfterAndBackOff) {
  LoopbackLlmServer server;
  server.set_retry_after("2");
  server.push_faults({Fault::RateLimit, Fault::ServerError, Fault::Truncated, Fault::Drop});
  std::vector<double> sleeps;
  auto client = make_http_client(parse_model_spec("local:m@" + server.base_url()), "", fast_policy(5),
                                 [&](double s) { sleeps.push_back(s); });
  auto r = client->complete(simple_request());
  ASSERT_TRUE(r.ok()) << r.error_kind << ": " << r.error;
  EXPECT_EQ(r.attempts, 5);
  EXPECT_EQ(r.retried_errors, (std::vector<std::string>{"rate_limited", "server_error", "malformed", "connection"}));
  ASSERT_EQ(sleeps.size(), 4u);
  EXPECT_EQ(sleeps[0], 2.0);  // Retry-After
  EXPECT_GE(sleeps[1], 0.01);  // base * 2^1 = 0.02, jitter in [0.5, 1]
  EXPECT_LE(sleeps[1], 0.02);
  EXPECT_LE(sleeps[3], 0.05);  // capped
}

TEST(Client, GivesUpAfterMaxRetriesAndTimesOut) {
  LoopbackLlmServer server;
  server.set_stall_seconds(0.8);
  server.push_faults({Fault::Stall, Fault::Stall});
  RetryPolicy p = fast_policy(1);
  p.timeout_s = 0.2;
  auto client = make_http_client(parse_model_spec("local:m@" + server.base_url()), "", p, [](double) {});
  auto t0 = std::chrono::steady_clock::now();
  auto r = client->complete(simple_request());
  EXPECT_EQ(r.error_kind, "timeout");
  EXPECT_EQ(r.attempts, 2);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.5);

  server.push_faults({Fault::Malformed, Fault::Malformed});
  r = client->complete(simple_request());
  EXPECT_EQ(r.error_kind, "malformed");
  EXPECT_EQ(r.retried_errors, std::vector<std::string>{"malformed"});
}

TEST(Client, EmptyRefusalAndClientErrorsAreNotRetried) {
  LoopbackLlmServer server;
  auto openai = make_http_client(parse_model_spec("local:m@" + server.base_url()), "", fast_policy(), [](double) {});
  auto anth = make_http_client(parse_model_spec("anthropic:c@" + server.base_url()), "k", fast_policy(), [](double) {});
  server.push_faults({Fault::Empty});
  auto r = openai->complete(simple_request());
  EXPECT_EQ(r.error_kind, "empty");
  EXPECT_EQ(r.attempts, 1);
  server.push_faults({Fault::Refusal});
  r = openai->complete(simple_request());
  EXPECT_EQ(r.error_kind, "refusal");
  server.push_faults({Fault::Refusal});
  r = anth->complete(simple_request());
  EXPECT_EQ(r.error_kind, "refusal");
  server.set_fixed_answer("I'm sorry, but I cannot help with modifying this code.");
  r = openai->complete(simple_request());
  EXPECT_EQ(r.error_kind, "refusal");
}

TEST(Client, KeysAreRedactedFromErrors) {
  LoopbackLlmServer server;
  server.require_key("the-right-key");
  ::setenv("BRAID_TEST_SECRET_KEY", "sk-wrong-but-secret-4711", 1);
  auto key = take_api_key("BRAID_TEST_SECRET_KEY");
  ASSERT_TRUE(key.has_value());
  EXPECT_EQ(std::getenv("BRAID_TEST_SECRET_KEY"), nullptr);  // gone from the environment
  EXPECT_EQ(take_api_key("BRAID_TEST_SECRET_KEY"), key);     // still known to braid
  auto names = secret_env_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "BRAID_TEST_SECRET_KEY"), names.end());
  auto client = make_http_client(parse_model_spec("local:m@" + server.base_url()), *key, fast_policy());
  auto r = client->complete(simple_request());
  EXPECT_EQ(r.error_kind, "auth");  // a rejected key: not retried, ends the run (http.hpp)
  EXPECT_EQ(r.attempts, 1);
  EXPECT_NE(r.error.find("401"), std::string::npos);
  EXPECT_EQ(r.error.find(*key), std::string::npos);
  EXPECT_NE(r.error.find("[redacted]"), std::string::npos);
  ASSERT_TRUE(auth_failure().has_value());
  EXPECT_EQ(auth_failure()->detail.find(*key), std::string::npos);
  clear_auth_failure();
  reset_cancel();
}

TEST(Client, ConnectionRefusedIsAConnectionError) {
  int port;
  {
    LoopbackLlmServer server;
    port = server.port();
  }
  auto client = make_http_client(parse_model_spec("local:m@http://127.0.0.1:" + std::to_string(port) + "/v1"), "",
                                 fast_policy(1), [](double) {});
  auto r = client->complete(simple_request());
  EXPECT_EQ(r.error_kind, "connection");
  EXPECT_EQ(r.retried_errors.size(), 1u);
}

TEST(Embeddings, OpenAiCompatibleEndpoint) {
  LoopbackLlmServer server;
  server.push_faults({Fault::RateLimit});
  auto r = embed_text(parse_model_spec("local:emb@" + server.base_url()), "", fast_policy(), "int main() {}");
  ASSERT_TRUE(r.ok()) << r.error;
  ASSERT_EQ(r.vector.size(), 8u);
  double norm = 0;
  for (float f : r.vector) norm += double(f) * f;
  EXPECT_NEAR(norm, 1.0, 1e-5);
  EXPECT_EQ(server.requests().back().path, "/v1/embeddings");
}

TEST(Ledger, PricesTotalsAndBudget) {
  CostLedger ledger({{"gpt-4.1-mini", {0.4, 1.6}}, {"anthropic:claude-x", {3.0, 15.0}}}, 0.05);
  std::vector<CallRecord> sunk;
  ledger.sink = [&](const CallRecord& c) { sunk.push_back(c); };
  LlmRequest req = simple_request();
  req.purpose = "mutate";
  LlmResponse r;
  r.model = "openai:gpt-4.1-mini";
  r.tokens_in = 1000;
  r.tokens_out = 500;
  r.retried_errors = {"rate_limited"};
  double c = ledger.record(req, r, 0);
  EXPECT_NEAR(c, (1000 * 0.4 + 500 * 1.6) / 1e6, 1e-12);
  r.model = "anthropic:claude-x";
  r.error_kind = "refusal";
  ledger.record(req, r, 1);
  ledger.count_error("no_patch");
  json t = ledger.totals();
  EXPECT_EQ(t["calls"], 2);
  EXPECT_EQ(t["tokens_in"], 2000);
  EXPECT_EQ(t["errors"]["rate_limited"], 2);
  EXPECT_EQ(t["errors"]["refusal"], 1);
  EXPECT_EQ(t["errors"]["no_patch"], 1);
  EXPECT_EQ(t["errors_total"], 4);
  EXPECT_FALSE(ledger.exhausted());
  r.tokens_in = 20000;
  ledger.record(req, r, 2);
  EXPECT_TRUE(ledger.exhausted());
  ASSERT_EQ(sunk.size(), 3u);
  EXPECT_EQ(sunk[1].error_kind, "refusal");
  EXPECT_EQ(sunk[0].purpose, "mutate");
  EXPECT_EQ(ledger.price("unknown:model", 1000, 1000), 0.0);
}

TEST(RecordReplay, RecordedExchangesAnswerWithoutNetwork) {
  auto dir = temp_dir("replay");
  std::vector<std::string> texts;
  {
    LoopbackLlmServer server;
    server.push_faults({Fault::RateLimit});
    auto ledger = std::make_shared<CostLedger>(std::map<std::string, ModelPrice>{}, 0.0);
    auto recorder = std::make_shared<ExchangeRecorder>(dir / kExchangeFile);
    TrackedClient client(make_http_client(parse_model_spec("local:m@" + server.base_url()), "sk-never-written-99",
                                          fast_policy(), [](double) {}),
                         nullptr, "local:m", recorder, ledger);
    for (int i = 0; i < 3; ++i) {
      LlmRequest r = simple_request("q" + std::to_string(i));
      r.replay_key = i == 1 ? "" : "k/" + std::to_string(i);
      auto resp = client.complete(r);
      ASSERT_TRUE(resp.ok());
      texts.push_back(resp.text);
    }
    EXPECT_EQ(ledger->totals()["calls"], 3);
  }
  auto file = read_file(dir / kExchangeFile);
  EXPECT_EQ(file.find("sk-never-written-99"), std::string::npos);
  EXPECT_NE(file.find("\"rate_limited\""), std::string::npos);

  auto replay = std::make_shared<ReplayLog>(dir);
  EXPECT_EQ(replay->size(), 3u);
  EXPECT_EQ(replay->models(), std::vector<std::string>{"local:m"});
  auto ledger = std::make_shared<CostLedger>(std::map<std::string, ModelPrice>{}, 0.0);
  auto recorder2 = std::make_shared<ExchangeRecorder>(dir / "second.jsonl");
  TrackedClient client(nullptr, replay, "local:m", recorder2, ledger);
  // Keyed requests are answered by key even out of order; unkeyed ones by sequence number.
  LlmRequest r2 = simple_request("q2");
  r2.replay_key = "k/2";
  EXPECT_EQ(client.complete(r2).text, texts[2]);
  LlmRequest r1 = simple_request("changed prompt");
  EXPECT_EQ(client.complete(r1).text, texts[1]);  // seq 1
  LlmRequest r0 = simple_request("q0");
  r0.replay_key = "k/0";
  EXPECT_EQ(client.complete(r0).text, texts[0]);
  EXPECT_EQ(replay->diverged(), 1);
  EXPECT_EQ(client.complete(r0).error_kind, "replay_missing");
  std::filesystem::remove_all(dir);
}

TEST(RecordReplay, BudgetStopsCallsBeforeTheyHappen) {
  LoopbackLlmServer server;
  auto ledger = std::make_shared<CostLedger>(std::map<std::string, ModelPrice>{{"m", {1e6, 1e6}}}, 0.5);
  TrackedClient client(make_http_client(parse_model_spec("local:m@" + server.base_url()), "", fast_policy()), nullptr,
                       "local:m", nullptr, ledger);
  EXPECT_TRUE(client.complete(simple_request()).ok());
  EXPECT_TRUE(ledger->exhausted());
  EXPECT_EQ(client.complete(simple_request()).error_kind, "budget");
  EXPECT_EQ(server.request_count(), 1u);
}

TEST(ModelSelector, RoundRobinAndUcb) {
  ModelSelector rr({"a", "b", "c"}, Selection::RoundRobin);
  EXPECT_EQ(rr.pick(), 0u);
  EXPECT_EQ(rr.pick(), 1u);
  EXPECT_EQ(rr.pick(), 2u);
  EXPECT_EQ(rr.pick(), 0u);

  ModelSelector ucb({"good", "bad"}, Selection::Ucb, 0.2);
  // Each model is tried before means are compared.
  std::size_t first = ucb.pick(), second = ucb.pick();
  EXPECT_NE(first, second);
  int good = 0;
  for (int i = 0; i < 40; ++i) {
    std::size_t k = ucb.pick();
    good += k == 0;
    ucb.reward(ucb.models()[k], k == 0 ? 0.9 : 0.05);
  }
  EXPECT_GT(good, 30);
  EXPECT_EQ(ucb.stats()[0]["model"], "good");
  EXPECT_DOUBLE_EQ(improvement_reward(false, 2.0, true, 1.0), 0.0);
  EXPECT_DOUBLE_EQ(improvement_reward(true, 0.9, true, 1.0), 0.0);
  EXPECT_GT(improvement_reward(true, 1.3, true, 1.0), 0.9);
  EXPECT_DOUBLE_EQ(improvement_reward(true, 1.0, false, 0.0), 1.0);
}

TEST(PromptTemplate, VariablesSectionsAndErrors) {
  PromptVars v = {{"a", "x"}, {"empty", ""}, {"list", "1. one"}};
  EXPECT_EQ(render_template("A={{a}}; {{ a }}", v, "t"), "A=x; x");
  EXPECT_EQ(render_template("{{#list}}\nRecs:\n{{list}}\n{{/list}}\nend", v, "t"), "Recs:\n1. one\nend");
  EXPECT_EQ(render_template("{{#empty}}\nhidden {{a}}\n{{/empty}}\nend", v, "t"), "end");
  EXPECT_EQ(render_template("{{^empty}}none{{/empty}}", v, "t"), "none");
  try {
    render_template("{{nope}}", v, "over/system.md");
    FAIL() << "unknown variable accepted";
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()), "over/system.md: unknown variable 'nope'");
  }
  EXPECT_THROW(render_template("{{#a}}open", v, "t"), UserError);
  EXPECT_THROW(render_template("{{/a}}", v, "t"), UserError);
  EXPECT_THROW(render_template("{{a", v, "t"), UserError);
}

TEST(PromptTemplate, ShippedPromptsRenderAndOverridesWin) {
  PromptLibrary shipped;
  for (auto name : {"system.md", "mutate.md", "patch_diff.md", "patch_full.md", "patch_cross.md", "retry.md",
                    "feedback_system.md", "feedback.md", "meta_system.md", "meta.md", "novelty_system.md",
                    "novelty.md", "strategies_lsa.md", "strategies_gin.md"})
    EXPECT_TRUE(shipped.has(name)) << name;
  auto dir = temp_dir("prompts");
  write_file_atomic(dir / "retry.md", "Try again: {{previous_error}}");
  PromptLibrary over(dir);
  EXPECT_EQ(over.render("retry.md", {{"previous_error", "E"}, {"patch_instructions", "P"}}), "Try again: E");
  EXPECT_TRUE(over.has("system.md"));  // falls back to the shipped file
  EXPECT_THROW(PromptLibrary(dir / "missing"), UserError);
  std::filesystem::remove_all(dir);
}

TEST(Settings, ParsesEveryKeyAndRejectsBadValues) {
  json cfg = {{"llm_models", {"openai:gpt-4.1-mini", "anthropic:claude-sonnet-4-5"}},
              {"llm_kwargs", {{"top_p", 0.9}, {"max_tokens", {{"explore", 4000}, {"exploit", 2000}}}}},
              {"llm_selection", "ucb"},
              {"llm_ucb_exploration", 0.5},
              {"meta_llm_model", "none"},
              {"feedback_llm_model", "openai:gpt-4.1-nano"},
              {"novelty_llm_model", "openai:gpt-4.1-nano"},
              {"embedding_model", "openai:text-embedding-3-small"},
              {"llm_prices", {{"gpt-4.1-mini", {{"input", 0.4}, {"output", 1.6}}}, {"claude-sonnet-4-5", {3, 15}}}},
              {"api_key_env", "MY_KEY"},
              {"max_api_cost", 2.5},
              {"request_timeout_s", 30},
              {"max_retries", 2},
              {"retry_backoff_s", 0.5},
              {"retry_backoff_max_s", 10},
              {"prompts_dir", "my_prompts"},
              {"use_novelty_judge", true},
              {"api_type", "gin"},
              {"island_api_types", {"lsa", "gin"}},
              {"hardware_facts", "hw.json"},
              {"feedback_max_tokens", 300},
              {"meta_max_tokens", 1000},
              {"novelty_max_tokens", 50},
              {"num_islands", 2}};  // not ours: ignored
  LlmSettings s = parse_llm_settings(cfg, "run.yaml");
  EXPECT_EQ(s.models.size(), 2u);
  EXPECT_EQ(s.selection, Selection::Ucb);
  EXPECT_EQ(s.max_tokens_explore, 4000);
  EXPECT_EQ(s.max_tokens_exploit, 2000);
  EXPECT_FALSE(s.kwargs.contains("max_tokens"));
  EXPECT_EQ(s.prices.at("claude-sonnet-4-5").output_per_mtok, 15.0);
  EXPECT_EQ(s.api_type_of(0), "lsa");
  EXPECT_EQ(s.api_type_of(1), "gin");
  EXPECT_EQ(s.api_type_of(5), "gin");
  EXPECT_TRUE(s.use_novelty_judge);
  EXPECT_EQ(s.meta_model, "none");
  // Every key given above (except the search's own) is one llm_config_keys() names.
  const auto& keys = llm_config_keys();
  for (auto& [k, v] : cfg.items())
    if (k != "num_islands") EXPECT_NE(std::find(keys.begin(), keys.end(), k), keys.end()) << k;

  auto bad = [](json c) {
    try {
      parse_llm_settings(c, "run.yaml");
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(bad({{"llm_selection", "greedy"}}), "run.yaml: llm_selection: expected round_robin or ucb, got 'greedy'");
  EXPECT_NE(bad({{"llm_kwargs", {{"temperature", 0.3}}}}).find("per phase"), std::string::npos);
  EXPECT_NE(bad({{"llm_models", {"nope:x"}}}).find("unknown provider"), std::string::npos);
  EXPECT_NE(bad({{"llm_prices", {{"m", "cheap"}}}}).find("llm_prices.m"), std::string::npos);
  EXPECT_NE(bad({{"max_retries", -1}}).find("max_retries"), std::string::npos);
  EXPECT_NE(bad({{"island_api_types", {"lsa", "nvshmem"}}}).find("nvshmem"), std::string::npos);
  EXPECT_NE(bad({{"use_novelty_judge", "yes"}}).find("true or false"), std::string::npos);
}

TEST(Hardware, FactsFileDescribeAndApiTypes) {
  auto dir = temp_dir("hw");
  write_file_atomic(dir / "hw.json",
                    R"({"gpu_name":"NVIDIA H100 80GB HBM3","gpu_count":8,"nvlink_links":18,"nvlink_gb_s":450,"nvlink_measured":true})");
  auto h = probe_hardware(dir / "hw.json");
  EXPECT_EQ(h.sm_count, 132);
  auto text = h.describe();
  EXPECT_NE(text.find("8 x NVIDIA H100"), std::string::npos);
  EXPECT_NE(text.find("450 GB/s"), std::string::npos);
  std::string why;
  EXPECT_TRUE(api_type_runnable("lsa", h, &why));
  EXPECT_FALSE(api_type_runnable("gin", h, &why));
  EXPECT_NE(why.find("RDMA"), std::string::npos);
  h.rdma_devices = {"mlx5_0"};
  EXPECT_TRUE(api_type_runnable("gin", h, nullptr));
  // Probing writes the cache once; a second probe reads it.
  auto probed = probe_hardware(dir / "cache.json");
  EXPECT_TRUE(std::filesystem::exists(dir / "cache.json"));
  EXPECT_EQ(probe_hardware(dir / "cache.json").gpu_count, probed.gpu_count);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace braid::llm
