// The runner's parts on their own: the goal tracker (best/, stop_when with re-runs that agree or
// refute) and the meta journal (summaries every interval, recommendations for the prompts),
// each against a real database and a scripted re-measurement, with no search around them; and
// the evaluation jobs (a slot is free while a stored candidate waits for its model feedback).
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <filesystem>
#include <future>
#include <thread>

#include <fmt/format.h>

#include "braid/db/database.hpp"
#include "braid/search/candidate_feedback.hpp"
#include "braid/search/evaluation_jobs.hpp"
#include "braid/search/goal_tracker.hpp"
#include "braid/search/meta_journal.hpp"
#include "braid/util/fs.hpp"

namespace braid {
namespace {

std::filesystem::path fresh_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("braid_parts_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

ProgramRecord child(const std::string& id, std::int64_t generation, double score) {
  ProgramRecord r;
  r.id = id;
  r.code = "// program " + id + "\n";
  r.combined_score = score;
  r.correct = true;
  r.patch_type = "diff";
  r.generation = generation;
  return r;
}

// A goal tracker over a fresh run folder whose re-runs answer the scripted scores in turn.
struct TrackerFixture {
  std::filesystem::path dir;
  ProgramDatabase raw;
  SharedDatabase db{raw};
  SearchConfig cfg;
  Population pop;
  std::vector<Confirmation> confirmations;
  std::deque<double> reruns;
  std::vector<std::string> labels;

  explicit TrackerFixture(const std::string& name) : dir(fresh_dir(name)), raw(dir / "evolution.db") {
    cfg.confirm_runs = 0;
    cfg.noise_runs = 0;
  }

  GoalTracker tracker() {
    GoalTrackerParts parts{
        cfg,
        dir,
        dir / "program.cpp",
        db,
        {[this] { return confirmations; }, [this](const Confirmation& c) { confirmations.push_back(c); }},
        [this](const std::string&, const std::string& label, const std::filesystem::path&) {
          labels.push_back(label);
          EvalResult r;
          r.correct = true;
          r.combined_score = reruns.front();
          reruns.pop_front();
          return r;
        },
        [] { return false; }};
    return GoalTracker(std::move(parts), pop);
  }

  void index(GoalTracker& goals, const ProgramRecord& rec) {
    raw.insert(rec);
    ProgramSummary s = summary_of(rec);
    goals.note_program(rec);
    goals.apply_estimate(s);
    pop.add(std::move(s));
    goals.indexed(rec);
  }
};

TEST(GoalTracker, BestFolderFollowsTheHighestUnconfirmedScoreWithoutReRuns) {
  TrackerFixture f("best");
  GoalTracker goals = f.tracker();
  goals.load({});
  f.index(goals, child("a", 1, 1.5));
  f.index(goals, child("b", 2, 2.5));
  f.index(goals, child("c", 3, 2.0));
  ASSERT_TRUE(goals.best().has_value());
  EXPECT_EQ(goals.best()->id, "b");
  EXPECT_FALSE(goals.best()->confirmed);
  EXPECT_EQ(read_file(f.dir / "best" / "program.cpp"), child("b", 2, 0).code);
  json meta = json::parse(*f.raw.meta("best"));
  EXPECT_EQ(meta["id"], "b");
  EXPECT_TRUE(f.labels.empty());
  EXPECT_FALSE(goals.target_reached());
}

TEST(GoalTracker, ConfirmedBestIsTheMedianOfItsReRuns) {
  TrackerFixture f("confirm");
  f.cfg.confirm_runs = 3;
  f.reruns = {1.9, 2.1, 2.0};
  GoalTracker goals = f.tracker();
  goals.load({});
  f.index(goals, child("a", 1, 2.4));
  ASSERT_TRUE(goals.best().has_value());
  EXPECT_TRUE(goals.best()->confirmed);
  EXPECT_EQ(goals.best()->runs, 3);
  EXPECT_DOUBLE_EQ(goals.best()->score, 2.0);
  ASSERT_EQ(f.confirmations.size(), 1u);
  EXPECT_TRUE(f.confirmations[0].promoted);
  EXPECT_DOUBLE_EQ(f.pop.at(0).combined_score, 2.0);  // selection sees the median, not the lucky timing
}

// On a noisy run (the seed's re-timings spread 19% of their median) a new best takes three times
// confirm_runs re-runs; on a quiet one (1%) confirm_runs.
TEST(GoalTracker, ANoisyRunConfirmsWithMoreReRuns) {
  for (const bool noisy : {true, false}) {
    TrackerFixture f(noisy ? "noisy" : "quiet");
    f.cfg.confirm_runs = 3;
    f.cfg.noise_runs = 3;
    ProgramRecord seed = child("s", 0, 2.0);
    seed.patch_type = "seed";
    f.raw.insert(seed);
    f.reruns = noisy ? std::deque<double>{1.8, 2.1, 2.2} : std::deque<double>{2.0, 2.02, 2.01};
    GoalTracker goals = f.tracker();
    goals.load({});
    goals.measure_noise({"s"});
    EXPECT_EQ(goals.confirmation_runs(), noisy ? 9 : 3);
    f.reruns = {2.3, 2.5, 2.4, 2.6, 2.2, 2.45, 2.35, 2.55, 2.4};
    f.index(goals, child("a", 1, 2.9));
    ASSERT_TRUE(goals.best().has_value());
    EXPECT_EQ(goals.best()->runs, noisy ? 9 : 3);
  }
}

TEST(GoalTracker, GoalIsReachedOnlyWhenReRunsAgreeAndARefutedProgramIsKept) {
  TrackerFixture f("goal");
  f.cfg.stop_when.metric = "combined_score";
  f.cfg.stop_when.at_least = 2.0;
  f.cfg.stop_when.confirm = 2;
  f.reruns = {1.0, 1.2, 2.2, 2.4};  // a: refuted (median 1.2); b: agrees (median 2.2)
  GoalTracker goals = f.tracker();
  goals.load({});
  f.index(goals, child("a", 1, 2.5));
  EXPECT_FALSE(goals.target_reached());
  EXPECT_EQ(json::parse(*f.raw.meta("target_refuted")).size(), 1u);
  f.index(goals, child("b", 2, 2.1));
  EXPECT_TRUE(goals.target_reached());
  EXPECT_NE(goals.target_note().find("by b (generation 2)"), std::string::npos) << goals.target_note();
  EXPECT_EQ(f.labels, (std::vector<std::string>{"a-confirm1", "a-confirm2", "b-confirm1", "b-confirm2"}));

  // A resumed run reads the goal back instead of re-running anything.
  GoalTracker again = f.tracker();
  again.load({});
  EXPECT_TRUE(again.target_reached());
  EXPECT_EQ(again.target_note(), goals.target_note());
}

struct CountingSummarizer : MetaSummarizer {
  std::vector<std::size_t> batches;
  MetaUpdate summarize(const std::vector<ProgramRecord>& recent, const ProgramRecord* best, const json& memory,
                       std::int64_t generation) override {
    batches.push_back(recent.size());
    return {fmt::format("batch of {}", recent.size()), json::object(), {"try " + std::to_string(generation)}};
  }
};

TEST(MetaJournal, SummarizesEveryIntervalAndFeedsTheRecommendationsBack) {
  auto dir = fresh_dir("meta");
  ProgramDatabase raw(dir / "evolution.db");
  SharedDatabase db(raw);
  CountingSummarizer summarizer;
  Population pop;
  MetaJournal journal(dir, 2, &summarizer, db, {});
  journal.load();
  for (int g = 1; g <= 5; ++g) {
    ProgramRecord rec = child("c" + std::to_string(g), g, 1.0 + g);
    raw.insert(rec);
    pop.add(summary_of(rec));
    journal.note(rec);
    journal.maybe_summarize(pop, g);
  }
  EXPECT_EQ(summarizer.batches, (std::vector<std::size_t>{2, 2}));
  EXPECT_EQ(journal.recommendations(), "1. try 4\n");
  EXPECT_TRUE(std::filesystem::exists(dir / "meta_2.txt"));
  EXPECT_EQ(raw.meta("last_meta_at").value_or(""), "4");

  // Resume: the recommendations and where summaries left off come back.
  MetaJournal resumed(dir, 2, &summarizer, db, {});
  resumed.load();
  EXPECT_EQ(resumed.recommendations(), "1. try 4\n");
  resumed.maybe_summarize(pop, 5);  // 5 done, last at 4: not yet
  EXPECT_EQ(summarizer.batches.size(), 2u);
}

// A remote model's summary: answers once released.
struct HeldSummarizer : MetaSummarizer {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> asked{0};
  MetaUpdate summarize(const std::vector<ProgramRecord>& recent, const ProgramRecord*, const json&,
                       std::int64_t generation) override {
    ++asked;
    released.wait();
    return {fmt::format("batch of {}", recent.size()), json::object(), {"try " + std::to_string(generation)}};
  }
  bool remote() const override { return true; }
};

TEST(MetaJournal, ARemoteSummaryIsTakenUpAtAFixedGenerationWithoutBlocking) {
  auto dir = fresh_dir("meta_remote");
  ProgramDatabase raw(dir / "evolution.db");
  SharedDatabase db(raw);
  HeldSummarizer summarizer;
  Population pop;
  std::atomic<int> wakes{0};
  MetaJournal journal(dir, 2, &summarizer, db, [&] { ++wakes; });
  journal.set_answer_delay(5);  // clamped to interval - 1 = 1
  for (int g = 1; g <= 2; ++g) {
    ProgramRecord rec = child("c" + std::to_string(g), g, 1.0 + g);
    raw.insert(rec);
    pop.add(summary_of(rec));
    journal.note(rec);
    journal.maybe_summarize(pop, g);  // returns at once: the model answers on its own thread
  }
  // Started after generation 2, taken up before generation 4 is indexed.
  EXPECT_TRUE(journal.take_up_before(3));
  EXPECT_TRUE(journal.blocks(4));
  EXPECT_FALSE(journal.take_up_before(4));
  EXPECT_EQ(journal.recommendations(), "");
  EXPECT_FALSE(std::filesystem::exists(dir / "meta_2.txt"));

  summarizer.release.set_value();
  for (int i = 0; i < 500 && !journal.answered(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(journal.answered());
  EXPECT_FALSE(journal.blocks(4));
  EXPECT_TRUE(journal.take_up_before(4));
  EXPECT_EQ(journal.recommendations(), "1. try 2\n");
  EXPECT_TRUE(std::filesystem::exists(dir / "meta_2.txt"));
  EXPECT_EQ(raw.meta("last_meta_at").value_or(""), "2");
  EXPECT_EQ(wakes.load(), 1);
  EXPECT_EQ(summarizer.asked.load(), 1);
}

TEST(MetaJournal, ARemoteSummaryDroppedOnStopWritesNothing) {
  auto dir = fresh_dir("meta_remote_stop");
  ProgramDatabase raw(dir / "evolution.db");
  SharedDatabase db(raw);
  HeldSummarizer summarizer;
  summarizer.release.set_value();
  Population pop;
  MetaJournal journal(dir, 1, &summarizer, db, {});
  ProgramRecord rec = child("c1", 1, 2.0);
  raw.insert(rec);
  pop.add(summary_of(rec));
  journal.note(rec);
  journal.maybe_summarize(pop, 1);
  journal.finish([] { return true; });  // stopped: the answer is discarded
  EXPECT_FALSE(journal.answered());
  EXPECT_TRUE(journal.take_up_before(100));
  EXPECT_EQ(journal.recommendations(), "");
  EXPECT_FALSE(std::filesystem::exists(dir / "meta_memory.json"));
  EXPECT_FALSE(raw.meta("last_meta_at").has_value());  // resume asks for it again
}

// The follow-up (the model's feedback) runs after the candidate is stored and its slot is free:
// a slow feedback answer does not hold an evaluation slot, and a kill -9 during it loses nothing.
TEST(EvaluationJobsTest, SlotIsFreeWhileTheFollowUpRuns) {
  auto dir = fresh_dir("jobs_slot");
  ProgramDatabase raw(dir / "evolution.db");
  SharedDatabase db(raw);
  EvaluationJobs jobs(db);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> follow_up_started{false};
  jobs.launch([] { return child("c1", 1, 2.0); },
              [&](ProgramRecord& rec) {
                follow_up_started = true;
                released.wait();
                rec.text_feedback = "slow answer";
              });
  // The slot frees (wait() returns on it) before the follow-up ends; the candidate is stored.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!follow_up_started && std::chrono::steady_clock::now() < deadline)
    jobs.wait(std::chrono::milliseconds(50), [] { return false; });
  ASSERT_TRUE(follow_up_started.load());
  EXPECT_EQ(jobs.running(), 0);
  EXPECT_TRUE(db.get("c1").has_value());
  EXPECT_TRUE(jobs.wait(std::chrono::milliseconds(50), [] { return false; }).empty());  // not handed back yet
  release.set_value();
  std::vector<ProgramRecord> finished;
  while (finished.empty() && std::chrono::steady_clock::now() < deadline)
    finished = jobs.wait(std::chrono::milliseconds(50), [] { return false; });
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0].text_feedback, "slow answer");
}

// What runs after the hand-back (the model's feedback, asked beside the search) holds up neither
// the slot nor the search: the candidate is handed back while it still runs.
TEST(EvaluationJobsTest, TheCandidateIsHandedBackBeforeWhatComesAfter) {
  auto dir = fresh_dir("jobs_after");
  ProgramDatabase raw(dir / "evolution.db");
  SharedDatabase db(raw);
  EvaluationJobs jobs(db);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> after_ended{false};
  jobs.launch([] { return child("c1", 1, 2.0); }, {}, true,
              [&](const ProgramRecord& rec) {
                EXPECT_EQ(rec.id, "c1");
                released.wait();
                after_ended = true;
              });
  std::vector<ProgramRecord> finished;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (finished.empty() && std::chrono::steady_clock::now() < deadline)
    finished = jobs.wait(std::chrono::milliseconds(50), [] { return false; });
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_FALSE(after_ended.load());
  EXPECT_EQ(jobs.running(), 0);
  release.set_value();
  jobs.join_all();
  EXPECT_TRUE(after_ended.load());
}

// A diagnosis asked beside the search: a prompt that shows the candidate waits for it (so it reads
// the same whatever the timing); a record no one is asking about is read as stored; the model's
// reward comes with the outcome, before the candidate is indexed.
class SlowDiagnosis final : public FeedbackAgent {
 public:
  std::string diagnose(const ProgramRecord& c, const ProgramRecord*) override {
    released.wait();
    return "diagnosis of " + c.id;
  }
  void note_outcome(const ProgramRecord&, const ProgramRecord*) override { ++outcomes; }
  std::shared_future<void> released;
  std::atomic<int> outcomes{0};
};

TEST(CandidateFeedbackTest, APromptWaitsForTheDiagnosisBeingAsked) {
  auto dir = fresh_dir("candidate_feedback");
  ProgramDatabase raw(dir / "evolution.db");
  SharedDatabase db(raw);
  SlowDiagnosis agent;
  std::promise<void> release;
  agent.released = release.get_future().share();
  CandidateFeedback feedback(&agent, true, db);
  ProgramRecord c1 = child("c1", 1, 2.0);
  db.insert(c1);
  feedback.note_outcome(c1);
  EXPECT_EQ(agent.outcomes.load(), 1);
  EXPECT_FALSE(feedback.await("other", {}).has_value());  // not asked here: the stored text holds
  std::thread asker([&] { feedback.ask(c1, false); });
  std::atomic<bool> got{false};
  ProgramRecord shown = c1;
  std::thread prompt([&] {
    feedback.complete(shown, {});
    got = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_FALSE(got.load());  // still being asked
  release.set_value();
  asker.join();
  prompt.join();
  EXPECT_EQ(shown.text_feedback, "diagnosis of c1");
  EXPECT_EQ(db.get("c1")->text_feedback, "diagnosis of c1");
  // Stopping ends a wait for a diagnosis that will not come.
  ProgramRecord c2 = child("c2", 2, 1.0);
  feedback.note_outcome(c2);
  EXPECT_EQ(feedback.await("c2", [] { return true; }), std::string());
  // Without text feedback (use_text_feedback false): no diagnosis, no reward.
  CandidateFeedback off(&agent, false, db);
  off.note_outcome(c2);
  EXPECT_EQ(agent.outcomes.load(), 2);
  EXPECT_FALSE(off.asks());
}

}  // namespace
}  // namespace braid
