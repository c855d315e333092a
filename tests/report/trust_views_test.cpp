// The trust views of `braid serve` (issue 26 part 4): every candidate with its re-runs and
// rebench medians, the run's state, knob and metric columns, the candidate export, and the
// comparison's workload check; through the HTTP server on a synthetic run whose confirmation,
// noise, rebench and config records are written as the search and `braid rebench` write them.
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/file.h>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <sstream>
#include <thread>

#include "braid/report/candidate_columns.hpp"
#include "braid/report/html_report.hpp"
#include "braid/report/run_reader.hpp"
#include "braid/report/web_server.hpp"
#include "braid/search/confirmation.hpp"
#include "report_support.hpp"

namespace braid::report {
namespace {

namespace fs = std::filesystem;

double now_unix() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

struct TrustRun {
  test::SyntheticRun run;
  std::string confirmed_id, refuted_id;
};

// A synthetic run plus what the search records about trust: the best confirmed by re-runs
// beside the seed, a candidate refuted by its re-runs, the seed re-timed, a rebench round and
// the run's configuration (1000 generations, more than the run has).
TrustRun make_trust_run(const fs::path& dir, const std::string& workload_dir) {
  TrustRun t{test::make_synthetic_run(dir, 120, 2, 600, false), "", ""};
  ProgramDatabase db(dir / "evolution.db");
  ensure_confirmation_table(db);
  t.confirmed_id = t.run.best_id;
  ProgramQuery top;
  top.correct = true;
  top.order_by = "score";
  top.limit = 8;
  for (const auto& rec : db.query(top))
    if (rec.id != t.confirmed_id && rec.patch_type != "seed") {
      t.refuted_id = rec.id;
      break;
    }
  Confirmation good{t.confirmed_id, "h1", 4.0, {3.1, 3.3, 3.2}, t.run.seed_id, "h0", {1.6, 1.7, 1.65}, true, "median 3.2 vs incumbent 1.65", 1.7e9};
  Confirmation bad{t.refuted_id, "h2", 3.9, {1.5, 1.6, 1.55}, t.confirmed_id, "h1", {3.2, 3.25, 3.3}, false, "median 1.55 vs incumbent 3.25", 1.7e9};
  store_confirmation(db, good);
  store_confirmation(db, bad);
  db.set_meta("best", json{{"id", t.confirmed_id}, {"score", 3.2}, {"runs", 3}, {"spread", 0.0625}, {"confirmed", true}}.dump());
  db.set_meta("noise", json{{"id", t.run.seed_id}, {"samples", {1.6, 1.7, 1.65}}, {"median", 1.65}, {"spread", 0.06}}.dump());
  db.set_meta("rebench", json{{"round", 1}, {"runs", 2}, {"rows", {{{"id", t.confirmed_id}, {"scores", {3.0, 3.1}}, {"median", 3.05}}}}}.dump());
  db.set_meta("config", json{{"num_generations", 1000}}.dump());
  db.set_meta("workload_dir", workload_dir);
  return t;
}

class TrustViews : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    a_ = new TrustRun(make_trust_run(test::test_dir("trust_a"), "/work/workloads/matmul_cpu"));
    b_ = new TrustRun(make_trust_run(test::test_dir("trust_b"), "/work/workloads/matmul_cpu"));
    c_ = new TrustRun(make_trust_run(test::test_dir("trust_c"), "/work/workloads/allgather"));
    same_ = new WebServer({a_->run.dir, b_->run.dir}, {"127.0.0.1", 0});
    same_port_ = same_->bind();
    mixed_ = new WebServer({a_->run.dir, c_->run.dir}, {"127.0.0.1", 0});
    mixed_port_ = mixed_->bind();
    threads_[0] = std::thread([] { same_->listen(); });
    threads_[1] = std::thread([] { mixed_->listen(); });
  }
  static void TearDownTestSuite() {
    same_->stop();
    mixed_->stop();
    for (auto& t : threads_) t.join();
    delete same_;
    delete mixed_;
    for (auto* r : {a_, b_, c_}) {
      fs::remove_all(r->run.dir);
      delete r;
    }
  }
  static httplib::Result get(int port, const std::string& path) { return httplib::Client("127.0.0.1", port).Get(path.c_str()); }
  static json get_json(const std::string& path, int port = same_port_) {
    auto res = get(port, path);
    EXPECT_TRUE(res && res->status == 200) << path << ": " << (res ? res->body : "no answer");
    return res ? json::parse(res->body, nullptr, false) : json(nullptr);
  }
  static TrustRun *a_, *b_, *c_;
  static WebServer *same_, *mixed_;
  static int same_port_, mixed_port_;
  static std::thread threads_[2];
};
TrustRun *TrustViews::a_ = nullptr, *TrustViews::b_ = nullptr, *TrustViews::c_ = nullptr;
WebServer *TrustViews::same_ = nullptr, *TrustViews::mixed_ = nullptr;
int TrustViews::same_port_ = 0, TrustViews::mixed_port_ = 0;
std::thread TrustViews::threads_[2];

TEST_F(TrustViews, PointsCarryReRunsRebenchTheSeedAndTheConfirmedBest) {
  json p = get_json("/api/runs/0/points");
  EXPECT_EQ(p["evaluations"], 120);
  EXPECT_EQ(p["best"]["id"], a_->confirmed_id);
  EXPECT_EQ(p["best"]["score"], 3.2);
  EXPECT_EQ(p["best"]["confirmed"], true);
  EXPECT_EQ(p["noise"]["median"], 1.65);
  ASSERT_TRUE(p["seed"].is_object());
  std::int64_t correct = 0, failed = p["failed"];
  std::map<std::string, json> by_id;
  for (const auto& item : p["items"]) by_id[item["id"]] = item;
  correct = static_cast<std::int64_t>(p["items"].size());
  EXPECT_EQ(correct + failed, 120);
  // The best's re-runs: as candidate (3) and as the incumbent beside the refuted one (3).
  const json& best = by_id.at(a_->confirmed_id);
  EXPECT_EQ(best["reruns"], json({3.1, 3.3, 3.2, 3.2, 3.25, 3.3}));
  EXPECT_NEAR(best["median"].get<double>(), 3.225, 1e-9);
  EXPECT_NEAR(best["spread"].get<double>(), 0.2 / 3.225, 1e-9);
  EXPECT_FALSE(best["refuted"].get<bool>());
  EXPECT_EQ(best["rebench_median"], 3.05);
  EXPECT_EQ(best["rebench_runs"], 2);
  EXPECT_TRUE(by_id.at(a_->refuted_id)["refuted"].get<bool>());
  // The seed was re-measured as the incumbent: its re-runs count for it.
  EXPECT_EQ(by_id.at(a_->run.seed_id)["reruns"].size(), 3u);
  // Every other candidate rests on its single evaluation.
  int singles = 0;
  for (const auto& [id, item] : by_id) singles += item["reruns"].empty() ? 1 : 0;
  EXPECT_EQ(singles, correct - 3);
  for (const auto& [id, item] : by_id) EXPECT_GE(item["x"].get<int>(), 1);
}

TEST_F(TrustViews, StateSaysInterruptedWithGenerationsDoneAndRunningWhileLocked) {
  json st = get_json("/api/runs/0/state");
  EXPECT_EQ(st["state"], "interrupted") << st.dump();
  EXPECT_EQ(st["generations_total"], 1000);
  EXPECT_EQ(st["generations_done"], 118);  // synthetic: one generation per child, 2 seeds
  EXPECT_TRUE(st["eta_s"].is_null());
  // Held as `braid evolve` holds it: running, with an ETA from the pace of the last generations.
  const auto lock_path = a_->run.dir / "braid.lock";
  int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  json running = get_json("/api/runs/0/status")["state"];
  EXPECT_EQ(running["state"], "running") << running.dump();
  EXPECT_EQ(running["generations_total"], 1000);
  EXPECT_GT(running["eta_s"].get<double>(), 0.0);
  EXPECT_TRUE(running["activity"].is_null()) << "no activity.json yet";
  // What the runner publishes while it runs reaches the status; a stale file does not.
  json activity = {{"in_flight", 2}, {"proposing", 3}, {"proposals_asking", 1}, {"proposal_wait_s", 12.0},
                   {"proposals_paused_s", 0.0}, {"note", "slurm: 1 running, 1 queued"}, {"updated_at", now_unix()}};
  write_file_atomic(a_->run.dir / "activity.json", activity.dump());
  running = get_json("/api/runs/0/status")["state"];
  EXPECT_EQ(running["activity"]["note"], "slurm: 1 running, 1 queued") << running.dump();
  EXPECT_EQ(running["activity"]["in_flight"], 2);
  activity["updated_at"] = now_unix() - 120.0;
  write_file_atomic(a_->run.dir / "activity.json", activity.dump());
  EXPECT_TRUE(get_json("/api/runs/0/status")["state"]["activity"].is_null());
  std::filesystem::remove(a_->run.dir / "activity.json");
  ::close(fd);  // the lock goes with its holder
  EXPECT_EQ(get_json("/api/runs/0/state")["state"], "interrupted");
  {
    ProgramDatabase db(a_->run.dir / "evolution.db");
    db.set_meta("config", json{{"num_generations", 10}}.dump());
  }
  EXPECT_EQ(get_json("/api/runs/0/state")["state"], "done");
  ProgramDatabase(a_->run.dir / "evolution.db").set_meta("config", json{{"num_generations", 1000}}.dump());
}

TEST_F(TrustViews, CandidateListHasKnobAndMetricColumnsSortable) {
  json page = get_json("/api/runs/0/candidates?order=knob:kChunks&dir=asc&limit=500");
  EXPECT_EQ(page["columns"]["knobs"], json({"kChunks", "kUnroll"}));
  EXPECT_NE(std::find(page["columns"]["metrics"].begin(), page["columns"]["metrics"].end(), "speedup"), page["columns"]["metrics"].end());
  ASSERT_EQ(page["items"].size(), 120u);
  std::vector<int> chunks;
  for (const auto& c : page["items"]) chunks.push_back(std::stoi(c["knobs"]["kChunks"].get<std::string>()));
  EXPECT_TRUE(std::is_sorted(chunks.begin(), chunks.end()));
  EXPECT_EQ(chunks.front(), 1);
  EXPECT_EQ(chunks.back(), 8);
  json desc = get_json("/api/runs/0/candidates?order=metric:speedup&dir=desc&limit=10");
  double prev = 1e300;
  for (const auto& c : desc["items"]) {
    double v = c["metrics"]["speedup"];
    EXPECT_LE(v, prev);
    prev = v;
  }
  // Candidates without the metric (failures) come last in either direction.
  json asc = get_json("/api/runs/0/candidates?order=metric:speedup&dir=asc&offset=110&limit=10");
  EXPECT_FALSE(asc["items"].back()["metrics"].contains("speedup"));
  EXPECT_EQ(get(same_port_, "/api/runs/0/candidates?order=knob:kChunks&dir=up")->status, 400);
  // Each listed candidate says what its score rests on.
  int remeasured = 0;
  for (const auto& c : page["items"]) {
    ASSERT_TRUE(c.contains("reruns") && c.contains("rebench_median")) << c.dump();
    remeasured += c["reruns"].empty() ? 0 : 1;
    if (c["id"] == a_->confirmed_id) {
      EXPECT_EQ(c["reruns"].size(), 6u);
    }
  }
  EXPECT_EQ(remeasured, 3);
}

TEST(CandidateColumns, KnobValuesCompareAsNumbersAndCsvCellsAreInert) {
  CandidateNode a, b;
  a.knob_key = "kBK=16;kBM=8";
  b.knob_key = "kBK=128;kBM=8";
  EXPECT_EQ(knobs_of_key(a.knob_key).at("kBM"), "8");
  EXPECT_TRUE(column_before(a, b, "knob:kBK", true, false));   // 16 < 128 as numbers, not text
  EXPECT_FALSE(column_before(a, b, "knob:kBK", false, false));
  EXPECT_EQ(csv_text_cell("=HYPERLINK(\"x\")"), "\"'=HYPERLINK(\"\"x\"\")\"");
  EXPECT_EQ(csv_text_cell("plain"), "plain");
  EXPECT_EQ(csv_text_cell("a,b"), "\"a,b\"");
}

TEST_F(TrustViews, ExportsEveryCandidateAsCsvAndJson) {
  auto csv = get(same_port_, "/api/runs/0/export.csv");
  ASSERT_TRUE(csv);
  EXPECT_EQ(csv->status, 200);
  EXPECT_EQ(csv->get_header_value("Content-Type"), "text/csv; charset=utf-8");
  EXPECT_NE(csv->get_header_value("Content-Disposition").find("attachment; filename=\""), std::string::npos);
  std::istringstream lines(csv->body);
  std::string header, line;
  std::getline(lines, header);
  EXPECT_EQ(header.rfind("id,parent,generation,island,patch_type,model,failure,correct,score,median,spread,reruns,refuted,rebench_median", 0), 0u)
      << header;
  EXPECT_NE(header.find(",knob:kChunks,knob:kUnroll,"), std::string::npos) << header;
  EXPECT_NE(header.find("metric:speedup"), std::string::npos) << header;
  const auto columns = std::count(header.begin(), header.end(), ',');
  int rows = 0;
  bool best_row = false;
  while (std::getline(lines, line)) {
    ++rows;
    EXPECT_EQ(std::count(line.begin(), line.end(), ','), columns) << line;
    if (line.rfind(a_->confirmed_id + ",", 0) == 0) {
      best_row = true;
      EXPECT_NE(line.find(",6,0,3.05,"), std::string::npos) << line;  // re-runs, refuted, rebench median
    }
  }
  EXPECT_EQ(rows, 120);
  EXPECT_TRUE(best_row);
  json all = get_json("/api/runs/0/export.json");
  EXPECT_EQ(all["items"].size(), 120u);
  EXPECT_EQ(all["knobs"], json({"kChunks", "kUnroll"}));
  EXPECT_TRUE(all["items"][5]["knobs"].contains("kChunks"));
}

TEST_F(TrustViews, CompareFlagsRunsOfDifferentWorkloadsAndRefusesTheirOverlay) {
  json same = get_json("/api/compare/workloads");
  EXPECT_TRUE(same["same"].get<bool>()) << same.dump();
  EXPECT_EQ(same["runs"][0]["workload"], "matmul_cpu");
  EXPECT_EQ(get(same_port_, "/api/compare/plots/best_by_eval.svg")->status, 200);

  json mixed = get_json("/api/compare/workloads", mixed_port_);
  EXPECT_FALSE(mixed["same"].get<bool>());
  EXPECT_NE(mixed["why"].get<std::string>().find("different workloads"), std::string::npos) << mixed.dump();
  EXPECT_NE(mixed["why"].get<std::string>().find("allgather"), std::string::npos);
  auto refused = get(mixed_port_, "/api/compare/plots/best_by_eval.svg");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 409);
  EXPECT_NE(refused->body.find("mixed=1"), std::string::npos);
  EXPECT_EQ(get(mixed_port_, "/api/compare/plots/best_by_eval.svg?mixed=1")->status, 200);
}

TEST_F(TrustViews, ReportAndPlotShowEveryCandidateWithItsReRunsAndTheState) {
  auto svg = get(same_port_, "/api/runs/0/plots/every_candidate.svg");
  ASSERT_TRUE(svg);
  EXPECT_EQ(svg->status, 200);
  EXPECT_EQ(svg->get_header_value("Content-Type"), "image/svg+xml");
  auto count = [](const std::string& text, const std::string& what) {
    std::size_t n = 0;
    for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count(svg->body, "class=\"pt confirmed\""), 2u);  // the best and the seed (as incumbent)
  EXPECT_EQ(count(svg->body, "class=\"pt refuted\""), 1u);
  EXPECT_GT(count(svg->body, "class=\"pt single\""), 50u);
  EXPECT_EQ(count(svg->body, "class=\"rebench\""), 1u);
  EXPECT_EQ(count(svg->body, "class=\"best-mark\""), 1u);
  EXPECT_EQ(count(svg->body, "class=\"seed-line\""), 1u);
  EXPECT_EQ(svg->body.find("<script"), std::string::npos);

  RunReader run(a_->run.dir);
  const std::string html = render_html_report(run, {});
  EXPECT_NE(html.find("<h2>Every candidate</h2>"), std::string::npos);
  EXPECT_NE(html.find("state: <b>interrupted</b> &middot; 118 of 1000 generations"), std::string::npos);
  EXPECT_EQ(count(html, "class=\"best-mark\""), 1u);
}

TEST(TrustPoints, LargeRunsThinSingleMeasurementsToTheirEnvelope) {
  auto dir = test::test_dir("trust_thin");
  auto run = test::make_synthetic_run(dir, 9000, 2, 120, false);
  RunReader reader(dir);
  json p = reader.points();
  const auto singles = p["single_measurements"].get<std::size_t>();
  EXPECT_EQ(singles + p["failed"].get<std::size_t>(), 9000u);
  EXPECT_GT(singles, 4000u);
  EXPECT_LE(p["items"].size(), 4000u);
  EXPECT_GT(p["items"].size(), 2000u);
  double best = 0, lowest = 1e300;
  int last_x = 0;
  bool has_best = false;
  for (const auto& item : p["items"]) {
    EXPECT_GT(item["x"].get<int>(), last_x);  // in evaluation order
    last_x = item["x"];
    best = std::max(best, item["score"].get<double>());
    lowest = std::min(lowest, item["score"].get<double>());
    has_best = has_best || item["id"] == run.best_id;
  }
  EXPECT_TRUE(has_best) << "the highest single measurement is always drawn";
  json all = reader.export_json();
  double all_lowest = 1e300;
  for (const auto& c : all["items"])
    if (c["correct"].get<bool>()) all_lowest = std::min(all_lowest, c["score"].get<double>());
  EXPECT_EQ(lowest, all_lowest) << "and so is the lowest";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace braid::report
