// A hostile or broken endpoint (issue #18): answers that are not UTF-8, Latin-1 error pages,
// compression bombs, huge answers, rejected keys and stalls end as failure values, with memory
// and log size bounded; Ctrl-C (cancel_requests) ends a stalled request; malformed URLs are
// refused when the model string is read.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "braid/llm/client.hpp"
#include "braid/llm/exchange_log.hpp"
#include "braid/llm/http.hpp"
#include "braid/llm/model_spec.hpp"
#include "braid/util/error.hpp"
#include "braid/util/text.hpp"
#include "loopback_llm_server.hpp"

namespace braid::llm {
namespace {

using testing::Fault;
using testing::LoopbackLlmServer;

LlmRequest ping() {
  LlmRequest r;
  r.system = "You are terse.";
  r.messages = {{"user", "ping"}};
  r.max_tokens = 64;
  return r;
}

RetryPolicy no_wait_policy(int retries = 2) {
  RetryPolicy p;
  p.max_retries = retries;
  p.timeout_s = 20.0;
  p.backoff_base_s = 0.0;
  p.backoff_max_s = 0.0;
  return p;
}

// Process-wide state that an auth failure or a cancel leaves behind must not leak into the
// next test.
class HostileEndpoint : public ::testing::Test {
 protected:
  void TearDown() override {
    clear_auth_failure();
    reset_cancel();
  }
  std::unique_ptr<LlmClient> client(RetryPolicy p = no_wait_policy()) {
    return make_http_client(parse_model_spec("local:m@" + server_.base_url()), "", p, [](double) {});
  }
  bool is_json_safe(const std::string& s) { return valid_utf8(s) == s; }
  LoopbackLlmServer server_;
};

TEST(Utf8, InvalidSequencesAreReplacedAndCutsKeepSequencesWhole) {
  EXPECT_EQ(valid_utf8("plain"), "plain");
  EXPECT_EQ(valid_utf8("caf\xC3\xA9"), "caf\xC3\xA9");
  EXPECT_EQ(valid_utf8("caf\xE9"), "caf\xEF\xBF\xBD");                  // Latin-1 é
  EXPECT_EQ(valid_utf8("\xFF\xFE"), "\xEF\xBF\xBD\xEF\xBF\xBD");        // stray bytes
  EXPECT_EQ(valid_utf8("\xE2\x82"), "\xEF\xBF\xBD\xEF\xBF\xBD");        // cut 3-byte sequence
  EXPECT_EQ(valid_utf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");        // overlong '/'
  EXPECT_EQ(valid_utf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(valid_utf8("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");        // emoji kept
  EXPECT_EQ(utf8_prefix("ab\xC3\xA9", 3), "ab");
  EXPECT_EQ(utf8_prefix("ab\xC3\xA9", 4), "ab\xC3\xA9");
  EXPECT_EQ(utf8_prefix("\xF0\x9F\x98\x80x", 2), "");
}

TEST_F(HostileEndpoint, InvalidUtf8AnswerIsMadeValid) {
  server_.push_faults({Fault::InvalidUtf8});
  auto r = client()->complete(ping());
  ASSERT_TRUE(r.ok()) << r.error_kind << ": " << r.error;
  EXPECT_TRUE(is_json_safe(r.text));
  EXPECT_NE(r.text.find("caf\xEF\xBF\xBD"), std::string::npos) << r.text;
  EXPECT_NO_THROW(to_json(r).dump());  // the exchange log and the database take it
}

TEST_F(HostileEndpoint, Latin1BadGatewayIsARetriedServerError) {
  server_.push_faults({Fault::Latin1BadGateway, Fault::Latin1BadGateway, Fault::Latin1BadGateway});
  auto r = client()->complete(ping());
  EXPECT_EQ(r.error_kind, "server_error");
  EXPECT_EQ(r.attempts, 3);
  EXPECT_NE(r.error.find("502"), std::string::npos);
  EXPECT_TRUE(is_json_safe(r.error)) << r.error;
  EXPECT_NE(r.error.find("Passerelle d\xEF\xBF\xBD" "fectueuse"), std::string::npos) << r.error;
  EXPECT_NO_THROW(to_json(r).dump());
}

TEST_F(HostileEndpoint, GzipBombIsCutAtTheDecodedCap) {
  // 64 MiB of zeros in ~64 KiB of gzip: the write callback stops at the 8 MiB cap.
  server_.push_faults({Fault::GzipBomb});
  auto r = client()->complete(ping());
  EXPECT_EQ(r.error_kind, "too_large") << r.error;
  EXPECT_EQ(r.attempts, 1);  // the same endpoint would send it again
  EXPECT_NE(r.error.find("MiB"), std::string::npos) << r.error;
}

TEST_F(HostileEndpoint, HugeAnswerIsRefusedByItsLength) {
  server_.push_faults({Fault::Huge});
  auto r = client()->complete(ping());
  EXPECT_EQ(r.error_kind, "too_large") << r.error;
  // Below the cap the same kind of answer is read normally.
  server_.set_huge_bytes(1 << 20);
  server_.push_faults({Fault::Huge});
  r = client()->complete(ping());
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.text.size(), std::size_t(1) << 20);
}

TEST_F(HostileEndpoint, ExchangeRecordsAreCapped) {
  auto dir = std::filesystem::temp_directory_path() / ("braid_hostile_log_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  {
    ExchangeRecorder rec(dir / kExchangeFile);
    LlmResponse big;
    big.model = "m";
    big.text = std::string(6 << 20, 'x') + "caf\xC3\xA9";
    LlmRequest req = ping();
    req.messages[0].content = std::string(5 << 20, 'y');
    rec.append(rec.next_seq(), req, big);
    LlmResponse bad;
    bad.text = "stray \xFF byte";
    rec.append(rec.next_seq(), ping(), bad);
  }
  std::ifstream in(dir / kExchangeFile);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    ++lines;
    EXPECT_LE(line.size(), kMaxExchangeRecordBytes);
    json j = json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << "line " << lines << " is not valid JSON";
    if (lines == 1) EXPECT_TRUE(j.value("truncated", false));
  }
  EXPECT_EQ(lines, 2);
  std::filesystem::remove_all(dir);
}

TEST_F(HostileEndpoint, RejectedKeyIsReportedOnceAndCancelsTheRest) {
  server_.push_faults({Fault::Unauthorized});
  bool hook_called = false;
  set_auth_failure_hook([&] { hook_called = true; });
  auto c = make_http_client(parse_model_spec("openai:gpt-x@" + server_.base_url(), "BRAID_HOSTILE_KEY"), "k",
                            no_wait_policy(), [](double) {});
  auto r = c->complete(ping());
  set_auth_failure_hook({});
  EXPECT_EQ(r.error_kind, "auth");
  EXPECT_EQ(r.attempts, 1);
  EXPECT_TRUE(hook_called);
  auto failure = auth_failure();
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(failure->key_env, "BRAID_HOSTILE_KEY");
  EXPECT_NE(failure->detail.find("401"), std::string::npos);
  // Every later request ends at once, without reaching the server.
  const auto served = server_.request_count();
  r = c->complete(ping());
  EXPECT_EQ(r.error_kind, "cancelled");
  EXPECT_EQ(server_.request_count(), served);
}

TEST_F(HostileEndpoint, CancelEndsAStalledRequest) {
  // The server would answer after 60 s (within the 120 s timeout): only the cancel can end the
  // request, so "cancelled" proves it did.
  server_.set_stall_seconds(60);
  server_.push_faults({Fault::Stall});
  RetryPolicy p = no_wait_policy(4);
  p.timeout_s = 120;
  auto c = make_http_client(parse_model_spec("local:m@" + server_.base_url()), "", p);  // real back-off sleep
  std::thread canceller([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    cancel_requests();
  });
  auto t0 = std::chrono::steady_clock::now();
  auto r = c->complete(ping());
  canceller.join();
  EXPECT_EQ(r.error_kind, "cancelled") << r.error;
  EXPECT_EQ(r.attempts, 1);
  std::printf("cancelled after %.2f s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

TEST(ModelSpecUrls, MalformedUrlsAreRefused) {
  for (const char* bad : {"local:m@http://", "local:m@http://127.0.0.1:99999/v1", "local:m@http://[::1/v1",
                          "openai:gpt-x@https://"}) {
    try {
      parse_model_spec(bad, "", "config.yaml");
      ADD_FAILURE() << bad << " accepted";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("not a valid URL"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("config.yaml"), std::string::npos) << e.what();
    }
  }
  EXPECT_NO_THROW(parse_model_spec("local:m@http://[::1]:8000/v1"));
  EXPECT_NO_THROW(parse_model_spec("local:m@http://127.0.0.1:8000/v1"));
}

}  // namespace
}  // namespace braid::llm
