// Gemini (native API), Bedrock (Anthropic models, SigV4) and command: against peers of their
// own protocol: the loopback server of loopback_llm_server.hpp and small shell scripts.
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <chrono>
#include <regex>
#include <sstream>
#include <thread>

#include "braid/llm/client.hpp"
#include "braid/llm/command_client.hpp"
#include "braid/llm/exchange_log.hpp"
#include "braid/llm/ledger.hpp"
#include "braid/llm/model_spec.hpp"
#include "braid/llm/secrets.hpp"
#include "braid/llm/sigv4.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/text.hpp"
#include "loopback_llm_server.hpp"

namespace braid::llm {
namespace {

using testing::Fault;
using testing::LoopbackLlmServer;

std::filesystem::path temp_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("braid_providers_" + name + "_" + std::to_string(::getpid()));
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
  r.purpose = "mutate";
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

std::string root_url(const LoopbackLlmServer& server) { return "http://127.0.0.1:" + std::to_string(server.port()); }

// ---------------------------------------------------------------- model strings

TEST(ProviderSpec, Gemini) {
  auto g = parse_model_spec("gemini:gemini-2.5-pro");
  EXPECT_EQ(g.provider, "gemini");
  EXPECT_EQ(g.protocol, ApiProtocol::Gemini);
  EXPECT_EQ(g.endpoint(), "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-pro:generateContent");
  EXPECT_EQ(g.key_env, "GEMINI_API_KEY");
  EXPECT_EQ(g.key_env_fallback, "GOOGLE_API_KEY");
  auto local = parse_model_spec("gemini:gemini-2.5-flash@http://127.0.0.1:9000/");
  EXPECT_EQ(local.endpoint(), "http://127.0.0.1:9000/v1beta/models/gemini-2.5-flash:generateContent");
  auto overridden = parse_model_spec("gemini:gemini-2.5-pro", "MY_GEMINI_KEY");
  EXPECT_EQ(overridden.key_env, "MY_GEMINI_KEY");
  EXPECT_EQ(overridden.key_env_fallback, "");
}

TEST(ProviderSpec, Bedrock) {
  auto b = parse_model_spec("bedrock:anthropic.claude-sonnet-4-5-20250929-v1:0@us-west-2");
  EXPECT_EQ(b.provider, "bedrock");
  EXPECT_EQ(b.protocol, ApiProtocol::AnthropicMessages);
  EXPECT_EQ(b.model, "anthropic.claude-sonnet-4-5-20250929-v1:0");
  EXPECT_EQ(b.region, "us-west-2");
  EXPECT_EQ(b.endpoint(),
            "https://bedrock-runtime.us-west-2.amazonaws.com/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke");
  auto from_env = parse_model_spec("bedrock:us.anthropic.claude-3-7-sonnet-20250219-v1:0");
  EXPECT_EQ(from_env.region, "");  // AWS_REGION / AWS_DEFAULT_REGION when the client is made
  EXPECT_EQ(from_env.base_url, "");
  auto local = parse_model_spec("bedrock:anthropic.claude-v2:1@http://127.0.0.1:9000?region=eu-west-1");
  EXPECT_EQ(local.region, "eu-west-1");
  EXPECT_EQ(local.endpoint(), "http://127.0.0.1:9000/model/anthropic.claude-v2%3A1/invoke");
  // An ARN (inference profile) is one path segment.
  auto arn = parse_model_spec("bedrock:arn:aws:bedrock:us-east-1:123456789012:inference-profile/x@us-east-1");
  EXPECT_EQ(arn.endpoint(), "https://bedrock-runtime.us-east-1.amazonaws.com/model/"
                            "arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2Fx/invoke");
  EXPECT_EQ(parse_model_spec("bedrock:m@us-east-1", "SOME_KEY").key_env, "AWS_SECRET_ACCESS_KEY");
  EXPECT_THROW(parse_model_spec("bedrock:m@US_EAST"), UserError);
  EXPECT_THROW(parse_model_spec("bedrock:m@http://127.0.0.1:9?region=Bad!"), UserError);
  EXPECT_THROW(parse_model_spec("bedrock:@us-east-1"), UserError);
}

TEST(ProviderSpec, Command) {
  auto c = parse_model_spec("command:/usr/local/bin/agent --print 'two words' --model x@y?z");
  EXPECT_EQ(c.provider, "command");
  EXPECT_EQ(c.protocol, ApiProtocol::Command);
  EXPECT_EQ(c.argv, (std::vector<std::string>{"/usr/local/bin/agent", "--print", "two words", "--model", "x@y?z"}));
  EXPECT_EQ(c.key_env, "");
  EXPECT_TRUE(c.key_optional);
  EXPECT_THROW(parse_model_spec("command:"), UserError);
  EXPECT_THROW(parse_model_spec("command:agent 'unterminated"), UserError);
  try {
    parse_model_spec("vertex:gemini");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("gemini, bedrock, command"), std::string::npos);
  }
}

// ---------------------------------------------------------------- Gemini

TEST(Gemini, RequestBody) {
  LlmRequest r = simple_request("first");
  r.messages.push_back({"assistant", "answer"});
  r.messages.push_back({"user", "second"});
  r.extra = {{"top_p", 0.9}, {"stop", "END"}, {"thinking_budget", 512}, {"thinking", {{"type", "enabled"}}},
             {"candidateCount", 1}};
  std::vector<std::string> dropped;
  json b = build_request_body(parse_model_spec("gemini:gemini-2.5-pro"), r, &dropped);
  EXPECT_EQ(b["systemInstruction"]["parts"][0]["text"], "You are terse.");
  ASSERT_EQ(b["contents"].size(), 3u);
  EXPECT_EQ(b["contents"][0]["role"], "user");
  EXPECT_EQ(b["contents"][1]["role"], "model");
  EXPECT_EQ(b["contents"][2]["parts"][0]["text"], "second");
  auto& cfg = b["generationConfig"];
  EXPECT_EQ(cfg["temperature"], 0.5);
  EXPECT_EQ(cfg["maxOutputTokens"], 64);
  EXPECT_EQ(cfg["topP"], 0.9);
  EXPECT_EQ(cfg["stopSequences"], json::array({"END"}));
  EXPECT_EQ(cfg["thinkingConfig"]["thinkingBudget"], 512);
  EXPECT_EQ(cfg["candidateCount"], 1);
  EXPECT_FALSE(b.contains("model"));
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_NE(dropped[0].find("thinking"), std::string::npos);
}

TEST(Gemini, AnswerUsageCostAndNoKeyInTheLog) {
  LoopbackLlmServer server;
  const std::string key = "gm-fallback-key-31337";
  server.require_key(key);
  ::unsetenv("GEMINI_API_KEY");
  ::setenv("GOOGLE_API_KEY", key.c_str(), 1);  // the fallback variable
  const std::string model = "gemini:gemini-test@" + root_url(server);
  auto spec = parse_model_spec(model);
  auto dir = temp_dir("gemini");
  auto ledger = std::make_shared<CostLedger>(std::map<std::string, ModelPrice>{{model, {1.0, 4.0}}}, 0.0);
  auto recorder = std::make_shared<ExchangeRecorder>(dir / kExchangeFile);
  std::vector<CallRecord> rows;
  ledger->sink = [&](const CallRecord& rec) { rows.push_back(rec); };
  TrackedClient client(make_client(spec, fast_policy(), [](double) {}), nullptr, model, recorder, ledger);
  EXPECT_EQ(std::getenv("GOOGLE_API_KEY"), nullptr);  // taken out of the environment
  server.set_fixed_answer("Here is the edit you asked for.");
  auto r = client.complete(simple_request("hello gemini"));
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.text, "Here is the edit you asked for.");
  EXPECT_EQ(r.finish_reason, "STOP");
  EXPECT_GT(r.tokens_in, 0);
  EXPECT_GT(r.tokens_out, 0);
  ASSERT_EQ(server.requests().size(), 1u);
  auto req = server.requests()[0];
  EXPECT_EQ(req.path, "/v1beta/models/gemini-test:generateContent");
  EXPECT_EQ(req.headers["x-goog-api-key"], key);
  EXPECT_EQ(req.body["contents"][0]["parts"][0]["text"], "hello gemini");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_DOUBLE_EQ(rows[0].cost_usd, (r.tokens_in * 1.0 + r.tokens_out * 4.0) / 1e6);
  EXPECT_EQ(read_file(dir / kExchangeFile).find(key), std::string::npos);
}

TEST(Gemini, ErrorsMapToKinds) {
  LoopbackLlmServer server;
  std::vector<double> delays;
  auto client = make_http_client(parse_model_spec("gemini:g@" + root_url(server)), "gm-key", fast_policy(),
                                 [&](double s) { delays.push_back(s); });
  // 429 names its delay in a RetryInfo detail; 5xx and malformed bodies are retried too.
  server.set_retry_after("7");
  server.push_faults({Fault::RateLimit, Fault::ServerError, Fault::Malformed});
  auto r = client->complete(simple_request());
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.retried_errors, (std::vector<std::string>{"rate_limited", "server_error", "malformed"}));
  ASSERT_EQ(delays.size(), 3u);
  EXPECT_DOUBLE_EQ(delays[0], 7.0);
  // A blocked prompt is a refusal (not retried).
  server.push_faults({Fault::Refusal});
  r = client->complete(simple_request());
  EXPECT_EQ(r.error_kind, "refusal");
  EXPECT_EQ(r.attempts, 1);
  EXPECT_NE(r.error.find("SAFETY"), std::string::npos);
  server.push_faults({Fault::Empty});
  EXPECT_EQ(client->complete(simple_request()).error_kind, "empty");
  server.push_faults({Fault::Unauthorized});
  r = client->complete(simple_request());
  EXPECT_EQ(r.error_kind, "auth");
  clear_auth_failure();
  reset_cancel();
}

TEST(Gemini, RejectedKeyIsAuthAndRedacted) {
  LoopbackLlmServer server;
  server.require_key("the-right-key");
  ::setenv("GEMINI_API_KEY", "gm-wrong-but-secret-4242", 1);
  auto client = make_client(parse_model_spec("gemini:g@" + root_url(server)), fast_policy(), [](double) {});
  auto r = client->complete(simple_request());
  EXPECT_EQ(r.error_kind, "auth");  // Gemini's 400 API_KEY_INVALID
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(r.error.find("gm-wrong-but-secret-4242"), std::string::npos);
  EXPECT_NE(r.error.find("[redacted]"), std::string::npos);
  ASSERT_TRUE(auth_failure().has_value());
  EXPECT_EQ(auth_failure()->key_env, "GEMINI_API_KEY");
  clear_auth_failure();
  reset_cancel();
}

TEST(Gemini, MissingKeyIsNamed) {
  ::unsetenv("GEMINI_API_KEY");
  ::unsetenv("GOOGLE_API_KEY");
  // Keys already taken by earlier tests stay known to braid; ask under another name.
  try {
    make_client(parse_model_spec("gemini:g", "BRAID_NO_SUCH_GEMINI_KEY"), fast_policy());
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("BRAID_NO_SUCH_GEMINI_KEY"), std::string::npos);
  }
}

// ---------------------------------------------------------------- Bedrock / SigV4

// AWS's published SigV4 test suite, case get-vanilla: the signing code reproduces it.
TEST(SigV4, AwsTestSuiteVanilla) {
  SigV4Request r;
  r.method = "GET";
  r.path = "/";
  r.region = "us-east-1";
  r.service = "service";
  r.amz_date = "20150830T123600Z";
  r.headers = {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", r.amz_date}};
  AwsCredentials creds{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""};
  EXPECT_EQ(sigv4_authorization(r, creds),
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
            "SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
}

TEST(SigV4, PathSegmentsAreEncodedTwice) {
  SigV4Request r;
  r.path = "/model/anthropic.claude-v2%3A1/invoke";
  r.headers = {{"Host", "h"}};
  r.amz_date = "20250101T000000Z";
  std::string canonical = sigv4_canonical_request(r);
  EXPECT_NE(canonical.find("\n/model/anthropic.claude-v2%253A1/invoke\n"), std::string::npos) << canonical;
  EXPECT_EQ(uri_encode("a b/c:d~", true), "a%20b/c%3Ad~");
}

std::string test_hmac(const std::string& key, const std::string& data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
       data.size(), md, &n);
  return std::string(reinterpret_cast<const char*>(md), n);
}

std::string test_hex(const std::string& bytes) {
  std::string out;
  char buf[3];
  for (unsigned char c : bytes) {
    std::snprintf(buf, sizeof buf, "%02x", c);
    out += buf;
  }
  return out;
}

std::string test_sha256_hex(const std::string& data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), md, &n, EVP_sha256(), nullptr);
  return test_hex(std::string(reinterpret_cast<const char*>(md), n));
}

class BedrockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv("AWS_ACCESS_KEY_ID", "AKIDBRAIDTEST0001", 1);
    ::setenv("AWS_SECRET_ACCESS_KEY", "bedrock/secret+Key-never-written-0042", 1);
    ::setenv("AWS_SESSION_TOKEN", "session-token-never-written-7777", 1);
    ::setenv("AWS_REGION", "eu-central-1", 1);
  }
  void TearDown() override {
    ::unsetenv("AWS_REGION");
    clear_auth_failure();
    reset_cancel();
  }
  LoopbackLlmServer server_;
};

TEST_F(BedrockTest, SignedRequestAnswerAndNoSecretInTheLog) {
  const std::string model = "bedrock:anthropic.claude-3-5-sonnet-20240620-v1:0@" + root_url(server_);
  auto dir = temp_dir("bedrock");
  auto ledger = std::make_shared<CostLedger>(std::map<std::string, ModelPrice>{{model, {3.0, 15.0}}}, 0.0);
  auto recorder = std::make_shared<ExchangeRecorder>(dir / kExchangeFile);
  std::vector<CallRecord> rows;
  ledger->sink = [&](const CallRecord& rec) { rows.push_back(rec); };
  TrackedClient client(make_client(parse_model_spec(model), fast_policy(), [](double) {}), nullptr, model, recorder,
                       ledger);
  EXPECT_EQ(std::getenv("AWS_SECRET_ACCESS_KEY"), nullptr);
  EXPECT_EQ(std::getenv("AWS_SESSION_TOKEN"), nullptr);
  server_.set_fixed_answer("Bedrock says hi.");
  auto r = client.complete(simple_request("hello bedrock"));
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.text, "Bedrock says hi.");
  EXPECT_GT(r.tokens_in, 0);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_DOUBLE_EQ(rows[0].cost_usd, (r.tokens_in * 3.0 + r.tokens_out * 15.0) / 1e6);

  ASSERT_EQ(server_.requests().size(), 1u);
  auto req = server_.requests()[0];
  EXPECT_EQ(req.target, "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/invoke");
  EXPECT_EQ(req.body["anthropic_version"], "bedrock-2023-05-31");
  EXPECT_FALSE(req.body.contains("model"));
  EXPECT_EQ(req.body["system"], "You are terse.");
  EXPECT_EQ(req.body["messages"][0]["content"], "hello bedrock");
  EXPECT_EQ(req.headers["x-amz-security-token"], "session-token-never-written-7777");
  const std::string date = req.headers["x-amz-date"];
  ASSERT_TRUE(std::regex_match(date, std::regex(R"(\d{8}T\d{6}Z)"))) << date;
  const std::string auth = req.headers["authorization"];
  std::smatch m;
  ASSERT_TRUE(std::regex_match(auth, m,
                               std::regex(R"(AWS4-HMAC-SHA256 Credential=AKIDBRAIDTEST0001/(\d{8})/eu-central-1/bedrock/aws4_request, )"
                                          R"(SignedHeaders=([a-z0-9;-]+), Signature=([0-9a-f]{64}))")))
      << auth;
  EXPECT_EQ(m[1].str(), date.substr(0, 8));
  EXPECT_EQ(m[2].str(), "content-type;host;x-amz-date;x-amz-security-token");

  // The signature recomputed here from what the server received, following AWS's description
  // (the path's "%3A" encoded again as "%253A" in the canonical request).
  const std::string canonical = "POST\n/model/anthropic.claude-3-5-sonnet-20240620-v1%253A0/invoke\n\n"
                                "content-type:" + req.headers["content-type"] + "\n"
                                "host:" + req.headers["host"] + "\n"
                                "x-amz-date:" + date + "\n"
                                "x-amz-security-token:session-token-never-written-7777\n\n"
                                "content-type;host;x-amz-date;x-amz-security-token\n" + test_sha256_hex(req.raw_body);
  EXPECT_EQ(req.headers["host"], "127.0.0.1:" + std::to_string(server_.port()));
  const std::string to_sign = "AWS4-HMAC-SHA256\n" + date + "\n" + date.substr(0, 8) +
                              "/eu-central-1/bedrock/aws4_request\n" + test_sha256_hex(canonical);
  std::string k = test_hmac("AWS4bedrock/secret+Key-never-written-0042", date.substr(0, 8));
  k = test_hmac(k, "eu-central-1");
  k = test_hmac(k, "bedrock");
  k = test_hmac(k, "aws4_request");
  EXPECT_EQ(m[3].str(), test_hex(test_hmac(k, to_sign)));

  const std::string log = read_file(dir / kExchangeFile);
  EXPECT_EQ(log.find("bedrock/secret+Key-never-written-0042"), std::string::npos);
  EXPECT_EQ(log.find("session-token-never-written-7777"), std::string::npos);
  EXPECT_EQ(log.find("Signature="), std::string::npos);
}

TEST_F(BedrockTest, ErrorsMapToKinds) {
  std::vector<double> delays;
  auto client = make_client(parse_model_spec("bedrock:anthropic.claude-v2:1@" + root_url(server_)), fast_policy(),
                            [&](double s) { delays.push_back(s); });
  server_.set_retry_after("2");
  server_.push_faults({Fault::RateLimit, Fault::ServerError});
  auto r = client->complete(simple_request());
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.retried_errors, (std::vector<std::string>{"rate_limited", "server_error"}));
  ASSERT_FALSE(delays.empty());
  EXPECT_DOUBLE_EQ(delays[0], 2.0);  // Retry-After honoured
  server_.push_faults({Fault::Refusal});
  EXPECT_EQ(client->complete(simple_request()).error_kind, "refusal");
  server_.push_faults({Fault::Unauthorized});
  r = client->complete(simple_request());
  EXPECT_EQ(r.error_kind, "auth");
  EXPECT_EQ(r.attempts, 1);
  ASSERT_TRUE(auth_failure().has_value());
  EXPECT_NE(auth_failure()->key_env.find("AWS_SECRET_ACCESS_KEY"), std::string::npos);
}

TEST_F(BedrockTest, RegionFromTheModelStringWinsAndMissingRegionIsNamed) {
  // The region signed is the model string's, not AWS_REGION's.
  auto client = make_client(parse_model_spec("bedrock:m@" + root_url(server_) + "?region=ap-south-1"), fast_policy());
  ASSERT_TRUE(client->complete(simple_request()).ok());
  EXPECT_NE(server_.requests().back().headers["authorization"].find("/ap-south-1/bedrock/"), std::string::npos);
  ::unsetenv("AWS_REGION");
  ::unsetenv("AWS_DEFAULT_REGION");
  try {
    make_client(parse_model_spec("bedrock:m"), fast_policy());
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("AWS_REGION"), std::string::npos);
  }
}

// ---------------------------------------------------------------- command:

std::filesystem::path write_script(const std::filesystem::path& dir, const std::string& name, const std::string& body) {
  auto p = dir / name;
  std::ofstream(p) << "#!/bin/sh\n" << body;
  std::filesystem::permissions(p, std::filesystem::perms::owner_all);
  return p;
}

TEST(Command, PromptOnStdinAnswerOnStdoutWithoutSecrets) {
  auto dir = temp_dir("command");
  auto script = write_script(dir, "agent.sh",
                             "cat > \"$1/stdin.txt\"\n"
                             "env > \"$1/env.txt\"\n"
                             "echo 'the answer'\n");
  ::setenv("BRAID_PROVIDERS_TEST_API_KEY", "sk-command-never-sees-1234", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-command-never-sees", 1);
  ::setenv("AWS_ACCESS_KEY_ID", "AKIDCOMMANDNEVERSEES", 1);
  ::setenv("BRAID_PROVIDERS_VISIBLE", "yes", 1);
  const std::string model = "command:" + script.string() + " " + dir.string();
  auto client = make_client(parse_model_spec(model), fast_policy());
  LlmRequest req = simple_request("write a kernel");
  req.messages.push_back({"assistant", "first try"});
  req.messages.push_back({"user", "again"});
  auto r = client->complete(req);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(trimmed(r.text), "the answer");
  EXPECT_EQ(r.tokens_in, 0);  // no usage from a program
  EXPECT_EQ(read_file(dir / "stdin.txt"),
            "===== SYSTEM =====\nYou are terse.\n\n===== USER =====\nwrite a kernel\n\n"
            "===== ASSISTANT =====\nfirst try\n\n===== USER =====\nagain\n\n");
  const std::string env = read_file(dir / "env.txt");
  EXPECT_EQ(env.find("sk-command-never-sees-1234"), std::string::npos);
  EXPECT_EQ(env.find("aws-secret-command-never-sees"), std::string::npos);
  EXPECT_EQ(env.find("AKIDCOMMANDNEVERSEES"), std::string::npos);
  EXPECT_NE(env.find("BRAID_PROVIDERS_VISIBLE=yes"), std::string::npos);
  EXPECT_NE(env.find("BRAID_LLM_PURPOSE=mutate"), std::string::npos);
  ::unsetenv("BRAID_PROVIDERS_TEST_API_KEY");
  ::unsetenv("AWS_SECRET_ACCESS_KEY");
  ::unsetenv("AWS_ACCESS_KEY_ID");
  ::unsetenv("BRAID_PROVIDERS_VISIBLE");
}

// A prompt larger than a pipe's buffer reaches the program whole (stdin is a memory file).
TEST(Command, LargePromptArrivesWhole) {
  auto dir = temp_dir("command_large");
  auto script = write_script(dir, "count.sh", "wc -c\n");
  LlmRequest req = simple_request(std::string(3 << 20, 'x'));
  auto r = make_client(parse_model_spec("command:" + script.string()), fast_policy())->complete(req);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(std::stoul(trimmed(r.text)), render_command_prompt(req).size());
}

bool process_gone_now(long pid) {
  auto stat = try_read_file("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return true;
  auto close = stat->rfind(')');
  return close != std::string::npos && close + 2 < stat->size() && (*stat)[close + 2] == 'Z';
}

// A signal is delivered asynchronously: on a loaded machine a killed process can still be
// runnable for a moment after kill() returns, so wait a bounded while before calling it alive.
bool process_gone(long pid) {
  for (int i = 0; i < 100; ++i) {
    if (process_gone_now(pid)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

TEST(Command, TimeoutKillsTheGroupAndIsRetried) {
  auto dir = temp_dir("command_timeout");
  auto script = write_script(dir, "slow.sh",
                             "sleep 30 &\n"
                             "echo $! >> \"$1/children.txt\"\n"
                             "sleep 30\n");
  RetryPolicy p = fast_policy();
  p.timeout_s = 0.5;
  p.max_timeout_retries = 1;
  auto client = make_client(parse_model_spec("command:" + script.string() + " " + dir.string()), p, [](double) {});
  auto t0 = std::chrono::steady_clock::now();
  auto r = client->complete(simple_request());
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.error_kind, "timeout");
  EXPECT_EQ(r.attempts, 2);
  EXPECT_EQ(r.retried_errors, std::vector<std::string>{"timeout"});
  EXPECT_LT(took, 10.0);
  std::istringstream children(read_file(dir / "children.txt"));
  int n = 0;
  for (long pid; children >> pid; ++n) EXPECT_TRUE(process_gone(pid)) << pid;
  EXPECT_EQ(n, 2);
}

TEST(Command, FailuresMapToKinds) {
  auto dir = temp_dir("command_fail");
  auto failing = write_script(dir, "fail.sh", "echo 'some output'\necho 'agent: unknown flag --x' >&2\necho more >&2\nexit 3\n");
  auto r = make_client(parse_model_spec("command:" + failing.string()), fast_policy())->complete(simple_request());
  EXPECT_EQ(r.error_kind, "command_failed");
  EXPECT_EQ(r.attempts, 1);  // not retried
  EXPECT_NE(r.error.find("exit code 3: agent: unknown flag --x"), std::string::npos) << r.error;
  EXPECT_EQ(r.error.find("more"), std::string::npos);

  auto silent = write_script(dir, "silent.sh", "cat > /dev/null\n");
  EXPECT_EQ(make_client(parse_model_spec("command:" + silent.string()), fast_policy())->complete(simple_request()).error_kind,
            "empty");

  auto chatty = write_script(dir, "chatty.sh", "head -c 5000 /dev/zero | tr '\\0' a\n");
  RetryPolicy p = fast_policy();
  p.limits.max_body_bytes = 1000;
  r = make_client(parse_model_spec("command:" + chatty.string()), p)->complete(simple_request());
  EXPECT_EQ(r.error_kind, "too_large");

  // A program that is not there: refused at start (bad input), and if it goes away later, each
  // call fails as command_failed.
  auto missing = parse_model_spec("command:" + (dir / "missing-agent").string() + " --x");
  EXPECT_THROW(make_client(missing, fast_policy()), UserError);
  EXPECT_THROW(make_client(parse_model_spec("command:no-such-agent-braid-4711"), fast_policy()), UserError);
  EXPECT_NO_THROW(make_client(parse_model_spec("command:sh -c 'cat'"), fast_policy()));  // found in PATH
  r = make_command_client(missing, fast_policy())->complete(simple_request());
  EXPECT_EQ(r.error_kind, "command_failed");
  EXPECT_NE(r.error.find("could not start"), std::string::npos) << r.error;
}

}  // namespace
}  // namespace braid::llm
