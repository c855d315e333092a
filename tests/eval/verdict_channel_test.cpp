// The verdict channel's checks (verdict_channel.hpp).
#include <gtest/gtest.h>

#include "braid/eval/verdict_channel.hpp"

namespace braid {
namespace {

const std::string kToken = "0123456789abcdef0123456789abcdef";

std::string record(const std::string& extra, const std::string& token = kToken, const std::string& mode = "bench") {
  return "{\"braid_verdict\": 1, \"token\": \"" + token + "\", \"mode\": \"" + mode + "\", \"seed\": 7, \"rank\": 0, " + extra + "}\n";
}

ChannelExpectation bench(double wall_s = 2.0) { return {kToken, "bench", 7, wall_s, true}; }

TEST(VerdictChannel, AcceptsAConsistentRecord) {
  auto v = read_channel(record("\"correct\": true, \"error\": \"\", \"combined_score\": 2.5, \"public\": {\"ms\": 1.5}, "
                               "\"timed_ms\": 120"),
                        bench());
  EXPECT_TRUE(v.received);
  EXPECT_EQ(v.problem, "");
  EXPECT_TRUE(v.correct);
  EXPECT_EQ(v.metrics["combined_score"].get<double>(), 2.5);
}

TEST(VerdictChannel, NothingReceived) {
  auto v = read_channel("", bench());
  EXPECT_FALSE(v.received);
  EXPECT_EQ(v.problem, "");
}

TEST(VerdictChannel, RejectsEveryInconsistency) {
  const std::string ok = "\"correct\": true, \"combined_score\": 2.5, \"timed_ms\": 100";
  struct Case {
    std::string records;
    std::string problem;
  } cases[] = {
      {record(ok, "ffffffffffffffffffffffffffffffff"), "wrong token"},
      {record(ok, kToken, "verify"), "mode 'verify'"},
      {record(ok) + record(ok), "two records from rank 0"},
      {"not json\n", "not a JSON object"},
      {record("\"correct\": true, \"combined_score\": 2.5, \"timed_ms\": 100000"), "ms of timed work"},
      {record("\"correct\": true, \"timed_ms\": 1"), "no combined_score"},
      {record("\"correct\": true, \"combined_score\": 2.5"), "no timed_ms"},
      {record("\"correct\": true, \"combined_score\": 2.5, \"timed_ms\": 1, \"public\": 3"), "not an object"},
      {"{\"braid_verdict\": 1, \"token\": \"" + kToken + "\", \"mode\": \"bench\", \"seed\": 8, \"correct\": true}\n", "seed"},
      {"{\"braid_verdict\": 1, \"token\": \"" + kToken + "\", \"mode\": \"bench\", \"seed\": 7, \"rank\": 1, \"correct\": true}\n",
       "no record from rank 0"},
  };
  for (const auto& c : cases) {
    auto v = read_channel(c.records, bench());
    EXPECT_NE(v.problem.find(c.problem), std::string::npos) << c.records << " -> '" << v.problem << "'";
  }
}

TEST(VerdictChannel, AnyIncorrectRankFailsTheStep) {
  std::string records = record("\"correct\": true, \"combined_score\": 2.5, \"timed_ms\": 100") +
                        "{\"braid_verdict\": 1, \"token\": \"" + kToken +
                        "\", \"mode\": \"bench\", \"seed\": 7, \"rank\": 1, \"correct\": false, \"error\": \"C[3] wrong\"}\n";
  auto v = read_channel(records, bench());
  EXPECT_EQ(v.problem, "");
  EXPECT_FALSE(v.correct);
  EXPECT_EQ(v.error, "rank 1: C[3] wrong");
}

TEST(VerdictChannel, SourceFromTheHarnessText) {
  EXPECT_EQ(resolve_verdict_source("auto", "getenv(\"BRAID_RESULT_FD\")"), VerdictSource::Channel);
  EXPECT_EQ(resolve_verdict_source("auto", "writes correct.json"), VerdictSource::Files);
  EXPECT_EQ(resolve_verdict_source("files", "BRAID_RESULT_FD"), VerdictSource::Files);
  EXPECT_EQ(resolve_verdict_source("channel", ""), VerdictSource::Channel);
}

// The harness takes the nonce in a constructor of priority 101: candidate code that asks to run
// earlier (an explicit constructor priority, init_priority, its own .init_array entry) is refused
// unrun; a plain constructor (default priority, after the harness's) and ordinary code are not.
TEST(VerdictChannel, CodeAskingToRunBeforeTheHarnessIsRefused) {
  for (const std::string code : {"__attribute__((constructor(100))) static void steal() {}\n",
                                 "__attribute__ (( constructor ( 0 ) )) void f();\n",
                                 "static Thief t __attribute__((init_priority(101)));\n",
                                 "__attribute__((section(\".init_array\"))) void (*p)() = steal;\n",
                                 "__attribute__((section(\".preinit_array\"))) void (*p)() = steal;\n"})
    EXPECT_NE(channel_tampering(code, "").find("asks to run before main"), std::string::npos) << code;
  EXPECT_EQ(channel_tampering("__attribute__((constructor)) static void log_start() {}\nstruct A { A(int) {} };\n", ""), "");
  // A frozen harness in the same file may use one itself; the candidate may not add another.
  const std::string harness = "__attribute__((constructor(101))) static void take() {}\n";
  EXPECT_EQ(channel_tampering(harness + "int x;\n", harness), "");
  EXPECT_NE(channel_tampering(harness + "__attribute__((constructor(1))) void s();\n", harness), "");
}

TEST(VerdictChannel, TokensDiffer) {
  const std::string a = new_eval_token(), b = new_eval_token();
  EXPECT_EQ(a.size(), 32u);
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace braid
