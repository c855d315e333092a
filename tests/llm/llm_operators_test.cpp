// The LLM operators (mutator, feedback, meta-summary, novelty judge, make_llm_operators)
// driven through the loopback server, with patches applied by the real apply_patch.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>

#include "braid/db/database.hpp"
#include "braid/eval/ncu_profile.hpp"
#include "braid/llm/secrets.hpp"
#include "braid/mutate/llm_agents.hpp"
#include "braid/mutate/llm_mutator.hpp"
#include "braid/mutate/llm_operators.hpp"
#include "braid/mutate/llm_runtime.hpp"
#include "braid/program/patch.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"
#include "loopback_llm_server.hpp"

namespace braid {
namespace {

using testing::Fault;
using testing::LoopbackLlmServer;

const char* kProgram = R"(#include <cstdio>
enum class Order { A, B };
// EVOLVE-BLOCK-START kernel
constexpr int kTile = 4;  // braid:knob 1|2|4|8
constexpr Order kOrder = Order::A;  // braid:knob Order::A|Order::B
int work(int x) { return x * kTile; }
// EVOLVE-BLOCK-END
int main() { std::printf("%d\n", work(2)); }
)";

std::filesystem::path temp_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("braid_llmops_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

ProgramRecord seed_record() {
  ProgramRecord r;
  r.id = "0000000000000001";
  r.code = kProgram;
  r.patch_type = "seed";
  r.correct = true;
  r.combined_score = 1.0;
  r.public_metrics = {{"time_ms", 2.5}};
  return r;
}

struct Fixture {
  LoopbackLlmServer server;
  std::filesystem::path dir;
  std::unique_ptr<ProgramDatabase> db;
  std::shared_ptr<LlmRuntime> rt;
  ProgramRecord parent_rec = seed_record();
  Program parent = Program::parse(kProgram, "test");
  std::mt19937_64 rng{1};

  explicit Fixture(const std::string& name, LlmSettings s = {}) {
    dir = temp_dir(name);
    db = std::make_unique<ProgramDatabase>(dir / "evolution.db");
    s.retry_backoff_s = 0.0;
    s.retry_backoff_max_s = 0.0;
    s.prices = {{"coder", {1.0, 2.0}}};
    LlmRuntimeOptions opt;
    opt.sleep = [](double) {};
    rt = make_llm_runtime(s, "local:coder@" + server.base_url(), db.get(), dir, "Make work() fast.", "cpp", opt);
  }
  ~Fixture() { std::filesystem::remove_all(dir); }

  MutationContext ctx(PatchType t, std::int64_t g = 1) {
    MutationContext c;
    c.generation = g;
    c.patch_type = t;
    c.temperature = 0.5;
    c.system_message = "Make work() fast.";
    c.parent = &parent_rec;
    c.rng = &rng;
    return c;
  }
};

TEST(LlmMutator, DiffFullAndCrossPatchesApply) {
  Fixture f("patches");
  LlmMutator m(f.rt);
  for (PatchType t : {PatchType::Diff, PatchType::Full, PatchType::Cross}) {
    auto c = f.ctx(t, static_cast<int>(t) + 1);
    ProgramRecord other = seed_record();
    other.id = "0000000000000002";
    other.code = std::string(kProgram).replace(std::string(kProgram).find("Order::A;"), 9, "Order::B;");
    if (t == PatchType::Cross) c.cross_parents = {&other};
    Proposal p = m.propose(f.parent, c);
    ASSERT_TRUE(p.ok()) << p.error;
    EXPECT_EQ(p.patch_type, t);
    EXPECT_EQ(p.model, "local:coder@" + f.server.base_url());
    EXPECT_GT(p.cost_usd, 0.0);
    PatchOutcome out = apply_patch(f.parent, p.patch_type, p.patch);
    ASSERT_TRUE(out.ok()) << to_string(t) << ": " << out.error << "\n" << p.patch;
    EXPECT_NE(out.text, f.parent.text());
  }
  auto kinds = f.server.answers_by_kind();
  EXPECT_EQ(kinds["diff"], 1);
  EXPECT_EQ(kinds["full"], 1);
  EXPECT_EQ(kinds["cross"], 1);
  auto reqs = f.server.requests();
  // The prompt carries the system context, the parent with its metrics, and the format.
  const auto& body = reqs[0].body;
  std::string system = body["messages"][0]["content"];
  std::string user = body["messages"][1]["content"];
  EXPECT_NE(system.find("Make work() fast."), std::string::npos);
  EXPECT_NE(system.find("## Hardware"), std::string::npos);
  EXPECT_NE(system.find("Strategies that have paid off for LSA"), std::string::npos);
  EXPECT_NE(user.find("constexpr int kTile = 4;"), std::string::npos);
  EXPECT_NE(user.find("time_ms"), std::string::npos);
  EXPECT_NE(user.find("<<<<<<< SEARCH"), std::string::npos);
  EXPECT_NE(user.find("- kTile = 4 (1|2|4|8)"), std::string::npos);
  EXPECT_EQ(body["temperature"], 0.5);
  std::string full_user = reqs[1].body["messages"][1]["content"];
  EXPECT_NE(full_user.find("// EVOLVE-BLOCK-START kernel"), std::string::npos);
  std::string cross_user = reqs[2].body["messages"][1]["content"];
  EXPECT_NE(cross_user.find("Program to combine 1"), std::string::npos);
}

TEST(LlmMutator, PromptShowsInspirationsFailuresAndRecommendations) {
  Fixture f("context");
  LlmMutator m(f.rt);
  ProgramRecord top = seed_record();
  top.id = "00000000000000aa";
  top.combined_score = 1.7;
  ProgramRecord failed = seed_record();
  failed.id = "00000000000000bb";
  failed.correct = false;
  failed.failure = FailureKind::BuildFailed;
  failed.patch_type = "diff";
  failed.error_text = "program.cpp:5:1: error: 'foo' was not declared in this scope";
  failed.code_diff = "<<<<<<< SEARCH\nint x;\n=======\nint x = foo;\n>>>>>>> REPLACE";
  auto c = f.ctx(PatchType::Diff);
  c.top_k_inspirations = {&top};
  c.archive_inspirations = {&top};
  c.failed_neighbours = {&failed};
  c.meta_recommendations = "1. Raise kTile";
  c.best = &top;
  std::string user = m.user_message(f.parent, c);
  EXPECT_NE(user.find("# Best programs so far"), std::string::npos);
  EXPECT_NE(user.find("# Diverse programs from the archive"), std::string::npos);
  EXPECT_NE(user.find("'foo' was not declared"), std::string::npos);
  EXPECT_NE(user.find("int x = foo;"), std::string::npos);
  EXPECT_NE(user.find("1. Raise kTile"), std::string::npos);
  EXPECT_NE(user.find("Best program so far: 00000000000000aa"), std::string::npos);
  EXPECT_EQ(user.find("previous attempt"), std::string::npos);
}

// One-knob changes of the parent already evaluated are named (a repeat would be rejected and
// asked again), and the loopback model, reading the prompt as a model does, picks another.
TEST(LlmMutator, PromptNamesTakenKnobChangesAndTheModelAvoidsThem) {
  Fixture f("taken");
  LlmMutator m(f.rt);
  auto c = f.ctx(PatchType::Diff);
  EXPECT_EQ(m.user_message(f.parent, c).find("already evaluated"), std::string::npos);
  Proposal first = m.propose(f.parent, c);
  ASSERT_TRUE(first.ok()) << first.error;
  PatchOutcome first_out = apply_patch(f.parent, first.patch_type, first.patch);
  ASSERT_TRUE(first_out.ok()) << first_out.error;
  const Program first_child = Program::parse(first_out.text, "first");
  std::string change;
  for (const auto& k : first_child.knobs())
    if (f.parent.find_knob(k.name)->value != k.value) change = k.name + " = " + k.value;
  ASSERT_FALSE(change.empty());
  c.taken_knob_changes = {change};
  const std::string user = m.user_message(f.parent, c);
  EXPECT_NE(user.find("Changes of one knob of this program already evaluated"), std::string::npos) << user;
  EXPECT_NE(user.find("- " + change), std::string::npos);
  Proposal second = m.propose(f.parent, c);
  ASSERT_TRUE(second.ok()) << second.error;
  PatchOutcome second_out = apply_patch(f.parent, second.patch_type, second.patch);
  ASSERT_TRUE(second_out.ok()) << second_out.error;
  EXPECT_NE(Program::parse(second_out.text, "second").knob_key(), first_child.knob_key());

  // Asked again after a rejected answer: the retry names what is taken by then.
  c.previous_error = "knob vector already evaluated: " + first_child.knob_key();
  c.taken_knob_changes = {change, "kTile = 1"};
  Proposal retry = m.propose(f.parent, c);
  ASSERT_TRUE(retry.ok()) << retry.error;
  const auto reqs = f.server.requests();
  const auto& msgs = reqs.back().body["messages"];
  const std::string last = msgs[msgs.size() - 1]["content"];
  EXPECT_NE(last.find("could not be used"), std::string::npos) << last;
  EXPECT_NE(last.find("- kTile = 1"), std::string::npos) << last;
}

// A proposal's focus (its share of the parent's one-knob changes, apart from the siblings asked at
// the same time: search/sibling_focus.hpp) is a list of its own in the prompt and in a retry; the
// loopback model keeps to it as a model would, and chooses freely without it.
TEST(LlmMutator, PromptGivesTheFocusAndTheModelKeepsToIt) {
  Fixture f("focus");
  LlmMutator m(f.rt);
  auto c = f.ctx(PatchType::Diff);
  const std::string header = "Changes of one knob for you to choose from";
  EXPECT_EQ(m.user_message(f.parent, c).find(header), std::string::npos);
  for (const std::string change : {"kOrder = Order::B", "kTile = 1", "kTile = 8"}) {
    c.focus_knob_changes = {change};
    const std::string user = m.user_message(f.parent, c);
    const auto at = user.find(header);
    ASSERT_NE(at, std::string::npos) << user;
    EXPECT_EQ(user.substr(user.find('\n', at) + 1, change.size() + 3), "- " + change + "\n") << user;
    Proposal prop = m.propose(f.parent, c);
    ASSERT_TRUE(prop.ok()) << prop.error;
    PatchOutcome out = apply_patch(f.parent, prop.patch_type, prop.patch);
    ASSERT_TRUE(out.ok()) << out.error;
    const Program child = Program::parse(out.text, "child");
    const auto eq = change.find(" = ");
    EXPECT_EQ(child.find_knob(change.substr(0, eq))->value, change.substr(eq + 3)) << prop.patch;
  }
  // Asked again: the retry repeats the focus as it stands then.
  c.previous_error = "knob vector already evaluated: kOrder=Order::A;kTile=8";
  c.taken_knob_changes = {"kTile = 8"};
  c.focus_knob_changes = {"kTile = 2"};
  Proposal retry = m.propose(f.parent, c);
  ASSERT_TRUE(retry.ok()) << retry.error;
  const auto reqs = f.server.requests();
  const auto& msgs = reqs.back().body["messages"];
  const std::string last = msgs[msgs.size() - 1]["content"];
  EXPECT_NE(last.find(header), std::string::npos) << last;
  EXPECT_NE(last.find("- kTile = 2"), std::string::npos) << last;
  PatchOutcome out = apply_patch(f.parent, retry.patch_type, retry.patch);
  ASSERT_TRUE(out.ok()) << out.error;
  EXPECT_EQ(Program::parse(out.text, "retry").find_knob("kTile")->value, "2");

  // A cross with a program that differs in no knob (the islands' seeds are one program) is an edit
  // like any other: it keeps to the focus too.
  auto x = f.ctx(PatchType::Cross, 2);
  x.cross_parents = {&f.parent_rec};
  x.focus_knob_changes = {"kOrder = Order::B"};
  Proposal cross = m.propose(f.parent, x);
  ASSERT_TRUE(cross.ok()) << cross.error;
  PatchOutcome cross_out = apply_patch(f.parent, cross.patch_type, cross.patch);
  ASSERT_TRUE(cross_out.ok()) << cross_out.error;
  EXPECT_EQ(Program::parse(cross_out.text, "cross").find_knob("kOrder")->value, "Order::B");
}

// A parent whose every one-knob change is taken (kTile 1, 2, 8 and kOrder B): the prompt says so
// and asks for two or more knobs at once, and the loopback model, following it, changes two.
TEST(LlmMutator, EveryOneKnobChangeTakenAsksForTwoKnobsAtOnce) {
  Fixture f("spent");
  LlmMutator m(f.rt);
  auto c = f.ctx(PatchType::Diff);
  const std::string line = "Every change of one knob of this program has been evaluated or proposed";
  c.taken_knob_changes = {"kTile = 1", "kTile = 2", "kTile = 8", "kOrder = Order::B"};
  EXPECT_EQ(m.user_message(f.parent, c).find(line), std::string::npos);  // not told: the flag is the search's
  c.one_knob_changes_spent = true;
  const std::string user = m.user_message(f.parent, c);
  EXPECT_NE(user.find(line), std::string::npos) << user;
  EXPECT_NE(user.find("change two or more knobs together, or the code"), std::string::npos) << user;
  Proposal prop = m.propose(f.parent, c);
  ASSERT_TRUE(prop.ok()) << prop.error;
  PatchOutcome out = apply_patch(f.parent, prop.patch_type, prop.patch);
  ASSERT_TRUE(out.ok()) << out.error;
  const Program child = Program::parse(out.text, "child");
  EXPECT_NE(child.find_knob("kTile")->value, "4") << prop.patch;
  EXPECT_NE(child.find_knob("kOrder")->value, "Order::A") << prop.patch;
}

// A proposal whose siblings hold every one-knob change left gets two-knob changes to choose from
// (search/sibling_focus.hpp, claimed): listed in the prompt and in a retry, and the loopback model,
// keeping to the list, changes both knobs of the pair.
TEST(LlmMutator, PromptGivesTwoKnobChangesAndTheModelMakesBoth) {
  Fixture f("pairs");
  LlmMutator m(f.rt);
  auto c = f.ctx(PatchType::Diff);
  const std::string header = "Changes of two knobs together for you to choose from";
  EXPECT_EQ(m.user_message(f.parent, c).find(header), std::string::npos);
  c.focus_knob_pairs = {"kTile = 8, kOrder = Order::B"};
  const std::string user = m.user_message(f.parent, c);
  const auto at = user.find(header);
  ASSERT_NE(at, std::string::npos) << user;
  const std::string line = "- kTile = 8, kOrder = Order::B\n";
  EXPECT_EQ(user.substr(user.find('\n', at) + 1, line.size()), line) << user;
  Proposal prop = m.propose(f.parent, c);
  ASSERT_TRUE(prop.ok()) << prop.error;
  PatchOutcome out = apply_patch(f.parent, prop.patch_type, prop.patch);
  ASSERT_TRUE(out.ok()) << out.error;
  const Program child = Program::parse(out.text, "child");
  EXPECT_EQ(child.find_knob("kTile")->value, "8") << prop.patch;
  EXPECT_EQ(child.find_knob("kOrder")->value, "Order::B") << prop.patch;
  // Asked again: the retry lists the pairs as they stand then.
  c.previous_error = "knob vector already evaluated: kOrder=Order::B;kTile=8";
  c.focus_knob_pairs = {"kTile = 1, kOrder = Order::B"};
  Proposal retry = m.propose(f.parent, c);
  ASSERT_TRUE(retry.ok()) << retry.error;
  const auto reqs = f.server.requests();
  const auto& msgs = reqs.back().body["messages"];
  const std::string last = msgs[msgs.size() - 1]["content"];
  EXPECT_NE(last.find(header), std::string::npos) << last;
  PatchOutcome again = apply_patch(f.parent, retry.patch_type, retry.patch);
  ASSERT_TRUE(again.ok()) << again.error;
  const Program second = Program::parse(again.text, "retry");
  EXPECT_EQ(second.find_knob("kTile")->value, "1");
  EXPECT_EQ(second.find_knob("kOrder")->value, "Order::B");
}

// The GPU cascade's profile level stores ncu's per-kernel lines in public_metrics["profile"];
// they reach the mutation prompt (the parent and the best programs shown) and the feedback
// agent as lines of their own, not inside the metrics JSON.
TEST(LlmMutator, NcuProfileLinesReachTheMutationAndFeedbackPrompts) {
  const auto csv = try_read_file(std::filesystem::path(BRAID_SOURCE_DIR) / "tests/eval/ncu/add_rmsnorm_raw.csv");
  ASSERT_TRUE(csv);
  const NcuProfile profile = parse_ncu_csv(*csv);
  ASSERT_TRUE(profile.ok()) << profile.error;
  const json stored = profile_metrics(profile, 1);
  const std::string line = stored["summary"].get<std::string>();
  ASSERT_NE(line.find("DRAM 86% of peak, L2 41%, occupancy 72%, tensor 0%; stalls: long_scoreboard 18.9"), std::string::npos);

  Fixture f("profile");
  f.parent_rec.public_metrics["profile"] = stored;
  LlmMutator m(f.rt);
  ProgramRecord top = seed_record();
  top.id = "00000000000000aa";
  top.combined_score = 1.7;
  top.public_metrics["profile"] = stored;
  auto c = f.ctx(PatchType::Diff);
  c.top_k_inspirations = {&top};
  const std::string user = m.user_message(f.parent, c);
  EXPECT_NE(user.find("Nsight Compute profile of this program"), std::string::npos) << user;
  EXPECT_NE(user.find("Nsight Compute profile:\n" + line + "\n"), std::string::npos) << user;  // the top program's
  EXPECT_EQ(user.find("\"profile\""), std::string::npos) << user;  // not repeated as JSON in "Metrics:"
  EXPECT_NE(user.find("time_ms"), std::string::npos);
  std::size_t count = 0;
  for (std::size_t at = user.find(line); at != std::string::npos; at = user.find(line, at + 1)) ++count;
  EXPECT_EQ(count, 2u);  // parent and top program

  // A profile that failed is a note: nothing for the prompt.
  f.parent_rec.public_metrics["profile"] = profile_note("ncu not found (looked in PATH, /usr/local/cuda/bin)");
  EXPECT_EQ(m.user_message(f.parent, f.ctx(PatchType::Diff)).find("Nsight Compute"), std::string::npos);

  LlmFeedbackAgent fb(f.rt);
  ProgramRecord cand = seed_record();
  cand.id = "00000000000000cd";
  cand.model = f.rt->mutation_models[0];
  cand.code_diff = "<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE";
  cand.public_metrics = {{"level_reached", 3}, {"time_ms", 2.0}, {"profile", stored}};
  fb.diagnose(cand, &f.parent_rec);
  const std::string feedback_prompt = f.server.requests().back().body["messages"][1]["content"];
  EXPECT_NE(feedback_prompt.find("Nsight Compute profile (longest kernels):\n" + line), std::string::npos) << feedback_prompt;
  EXPECT_EQ(feedback_prompt.find("\"profile\""), std::string::npos) << feedback_prompt;
}

TEST(LlmMutator, ResampleShowsTheExactErrorAndPreviousAnswer) {
  Fixture f("resample");
  LlmMutator m(f.rt);
  auto c = f.ctx(PatchType::Diff, 7);
  Proposal first = m.propose(f.parent, c);
  ASSERT_TRUE(first.ok());
  c.previous_error = "edit 1: SEARCH text not found in block 'kernel'";
  Proposal second = m.propose(f.parent, c);
  ASSERT_TRUE(second.ok()) << second.error;
  auto reqs = f.server.requests();
  ASSERT_EQ(reqs.size(), 2u);
  auto msgs = reqs[1].body["messages"];
  ASSERT_EQ(msgs.size(), 4u);  // system, user, assistant (previous answer), user (error)
  EXPECT_EQ(msgs[2]["role"], "assistant");
  EXPECT_EQ(msgs[2]["content"], reqs.size() ? f.server.answer_for(reqs[0].body["messages"][0]["content"],
                                                                  {{"user", reqs[0].body["messages"][1]["content"]}})
                                            : "");
  std::string retry = msgs[3]["content"];
  EXPECT_NE(retry.find("SEARCH text not found in block 'kernel'"), std::string::npos);
  // Replay keys number the attempts of a generation.
  auto lines = read_file(f.dir / llm::kExchangeFile);
  EXPECT_NE(lines.find("\"mutate/g7/a0\""), std::string::npos);
  EXPECT_NE(lines.find("\"mutate/g7/a1\""), std::string::npos);
}

TEST(LlmMutator, FaultsBecomeCountedErrors) {
  Fixture f("faults");
  LlmMutator m(f.rt);
  f.server.push_faults({Fault::NoPatch});
  Proposal p = m.propose(f.parent, f.ctx(PatchType::Diff, 1));
  EXPECT_FALSE(p.ok());
  EXPECT_EQ(p.error.rfind("no_patch: ", 0), 0u) << p.error;
  f.server.push_faults({Fault::Empty});
  p = m.propose(f.parent, f.ctx(PatchType::Full, 2));
  EXPECT_EQ(p.error.rfind("llm empty: ", 0), 0u) << p.error;
  f.server.push_faults({Fault::Refusal});
  p = m.propose(f.parent, f.ctx(PatchType::Full, 3));
  EXPECT_EQ(p.error.rfind("llm refusal: ", 0), 0u) << p.error;
  f.server.push_faults({Fault::RateLimit, Fault::ServerError});
  p = m.propose(f.parent, f.ctx(PatchType::Diff, 4));
  EXPECT_TRUE(p.ok()) << p.error;
  json t = f.rt->ledger->totals();
  EXPECT_EQ(t["calls"], 4);
  EXPECT_EQ(t["errors"]["no_patch"], 1);
  EXPECT_EQ(t["errors"]["empty"], 1);
  EXPECT_EQ(t["errors"]["refusal"], 1);
  EXPECT_EQ(t["errors"]["rate_limited"], 1);
  EXPECT_EQ(t["errors"]["server_error"], 1);
  // The database holds the same picture, and the cost.
  json db_totals = llm_totals_from_db(*f.db);
  EXPECT_EQ(db_totals["calls"], 4);
  EXPECT_EQ(db_totals["errors"]["no_patch"], 1);
  EXPECT_EQ(db_totals["errors"]["rate_limited"], 1);
  EXPECT_NEAR(db_totals["cost_usd"].get<double>(), t["cost_usd"].get<double>(), 1e-12);
  EXPECT_GT(t["cost_usd"].get<double>(), 0.0);
}

TEST(ExtractPatch, FencesProseAndFormSwitch) {
  std::string why;
  auto d = extract_patch(PatchType::Diff, "Idea.\n```\n<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n```\nThanks!", &why);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->text, "<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n");
  auto f = extract_patch(PatchType::Diff, "// EVOLVE-BLOCK-START\nx\n// EVOLVE-BLOCK-END\n", &why);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->type, PatchType::Full);
  auto s = extract_patch(PatchType::Cross, "<<<< SEARCH\na\n==== REPLACE\nb\n>>>>\n", &why);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->type, PatchType::Diff);
  EXPECT_FALSE(extract_patch(PatchType::Full, "just words", &why));
  EXPECT_NE(why.find("EVOLVE-BLOCK-START"), std::string::npos);
}

TEST(LlmAgents, FeedbackMetaAndNovelty) {
  Fixture f("agents");
  LlmFeedbackAgent fb(f.rt);
  ProgramRecord cand = seed_record();
  cand.id = "00000000000000cc";
  cand.model = f.rt->mutation_models[0];
  cand.correct = false;
  cand.failure = FailureKind::BuildFailed;
  cand.error_text = "program.cpp:4:15: error: 'braid_x' was not declared in this scope";
  cand.code_diff = "<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE";
  cand.public_metrics = {{"level_reached", 1}};
  std::string text = fb.diagnose(cand, &f.parent_rec);
  EXPECT_NE(text.find("build_failed"), std::string::npos) << text;
  EXPECT_NE(text.find("'braid_x' was not declared"), std::string::npos) << text;
  EXPECT_EQ(f.rt->selector->stats()[0]["rewards"], 0);  // the reward is the outcome's, not the diagnosis's
  fb.note_outcome(cand, &f.parent_rec);
  auto stats = f.rt->selector->stats();
  EXPECT_EQ(stats[0]["rewards"], 1);

  LlmMetaSummarizer meta(f.rt);
  std::vector<ProgramRecord> recent = {cand, seed_record()};
  json memory = {{"scratchpad", {{"tried", {"old idea"}}}}, {"recommendations", {"old rec"}}};
  MetaUpdate u = meta.summarize(recent, &f.parent_rec, memory, 10);
  EXPECT_EQ(u.summary, "2 recent candidates, 1 failed.");
  ASSERT_EQ(u.recommendations.size(), 3u);
  EXPECT_EQ(u.scratchpad["won"][0], "larger blocks");
  std::string meta_prompt = f.server.requests().back().body["messages"][1]["content"];
  EXPECT_NE(meta_prompt.find("old idea"), std::string::npos);
  EXPECT_NE(meta_prompt.find("1. old rec"), std::string::npos);

  // A meta answer that is prose still gives a summary and recommendations.
  MetaUpdate prose = parse_meta_answer("Things went well.\n1. Try A\n2) Try B\n- Try C", memory);
  EXPECT_EQ(prose.recommendations, (std::vector<std::string>{"Try A", "Try B", "Try C"}));
  EXPECT_EQ(prose.scratchpad["tried"][0], "old idea");

  LlmSettings s;
  s.use_novelty_judge = true;
  Fixture g("novelty", s);
  EXPECT_TRUE(judge_novelty(*g.rt, kProgram, {kProgram}));
  g.server.set_fixed_answer("DUPLICATE\nOnly a comment changed.");
  EXPECT_FALSE(judge_novelty(*g.rt, kProgram, {kProgram}));
  g.server.push_faults({Fault::ServerError, Fault::ServerError, Fault::ServerError, Fault::ServerError, Fault::ServerError});
  EXPECT_TRUE(judge_novelty(*g.rt, kProgram, {kProgram}));  // a failed call never rejects
}

TEST(MakeLlmOperators, KeysTotalsReplayAndSecrets) {
  LoopbackLlmServer server;
  const std::string key = "sk-operators-secret-31337";
  server.require_key(key);
  auto dir = temp_dir("ops");
  LlmSettings s;
  s.models = {"openai:gpt-4.1-mini@" + server.base_url()};
  s.api_key_env = "BRAID_OPS_TEST_KEY";
  s.retry_backoff_s = 0;
  s.prices = {{"gpt-4.1-mini", {0.4, 1.6}}};
  s.max_api_cost = 1000;
  {
    ProgramDatabase db(dir / "a.db");
    ::unsetenv("BRAID_OPS_TEST_KEY");
    try {
      make_llm_operators(s, "", db, dir / "run1", "task", "cpp");
      FAIL() << "missing key accepted";
    } catch (const UserError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("BRAID_OPS_TEST_KEY: is not set", 0), 0u) << e.what();
    }
    ::setenv("BRAID_OPS_TEST_KEY", key.c_str(), 1);
    LlmOperators ops = make_llm_operators(s, "", db, dir / "run1", "task", "cpp");
    EXPECT_EQ(std::getenv("BRAID_OPS_TEST_KEY"), nullptr);
    ASSERT_TRUE(ops.mutator && ops.feedback && ops.meta);
    EXPECT_FALSE(ops.novelty_judge);
    EXPECT_FALSE(ops.embed);
    ProgramRecord parent = seed_record();
    Program prog = Program::parse(kProgram, "t");
    std::mt19937_64 rng(3);
    MutationContext c;
    c.patch_type = PatchType::Diff;
    c.parent = &parent;
    c.rng = &rng;
    for (int g = 1; g <= 3; ++g) {
      c.generation = g;
      Proposal p = ops.mutator->propose(prog, c);
      ASSERT_TRUE(p.ok()) << p.error;
    }
    json t = ops.totals();
    EXPECT_EQ(t["calls"], 3);
    EXPECT_GT(t["cost_usd"].get<double>(), 0.0);
    EXPECT_EQ(t["models"][0]["picks"], 3);
    EXPECT_FALSE(ops.budget_exhausted());
  }
  // Replay: same answers, no network, no key needed.
  std::vector<std::string> recorded;
  for (auto& line : [&] {
         std::vector<std::string> v;
         std::istringstream in(read_file(dir / "run1" / llm::kExchangeFile));
         for (std::string l; std::getline(in, l);) v.push_back(l);
         return v;
       }())
    recorded.push_back(json::parse(line)["response"]["text"]);
  ASSERT_EQ(recorded.size(), 3u);
  std::size_t served = server.request_count();
  {
    ProgramDatabase db(dir / "b.db");
    LlmSettings none;
    LlmOperators ops = make_llm_operators(none, "replay:" + (dir / "run1").string(), db, dir / "run2", "task", "cpp");
    ProgramRecord parent = seed_record();
    Program prog = Program::parse(kProgram, "t");
    std::mt19937_64 rng(3);
    MutationContext c;
    c.patch_type = PatchType::Diff;
    c.parent = &parent;
    c.rng = &rng;
    for (int g = 1; g <= 3; ++g) {
      c.generation = g;
      Proposal p = ops.mutator->propose(prog, c);
      ASSERT_TRUE(p.ok()) << p.error;
      EXPECT_NE(recorded[g - 1].find(p.patch.substr(0, 20)), std::string::npos);
    }
    EXPECT_EQ(ops.totals()["replay_diverged"], 0);
  }
  EXPECT_EQ(server.request_count(), served);
  // No written file holds the key.
  for (auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file()) EXPECT_EQ(read_file(e.path()).find(key), std::string::npos) << e.path();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace braid
