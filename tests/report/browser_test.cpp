// End-to-end tests of `braid serve` in a real browser: Debian's chromium, headless, driven by
// playwright-core (web/e2e/ui_test.mjs). Screenshots and timings go to
// <test working dir>/artifacts/report/. Skipped, with the reason, only where chromium, node or
// playwright-core (installed by scripts/setup.sh) is missing.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <regex>

#include "../e2e/e2e_support.hpp"
#include "braid/report/run_reader.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/json.hpp"
#include "report_support.hpp"

namespace braid::report {
namespace {

namespace fs = std::filesystem;

const fs::path kWeb = fs::path(BRAID_SOURCE_DIR) / "web";

std::string chromium_path() {
  if (const char* env = std::getenv("BRAID_CHROMIUM")) return env;
  return "/usr/bin/chromium";
}

// Why the browser tests cannot run here, or "" when they can.
std::string missing_browser_parts() {
  if (::access(chromium_path().c_str(), X_OK) != 0) return "no chromium at " + chromium_path() + " (scripts/setup.sh installs it)";
  if (std::system("node --version > /dev/null 2>&1") != 0) return "no node (scripts/setup.sh installs nodejs)";
  if (!fs::exists(kWeb / "node_modules" / "playwright-core" / "package.json"))
    return "no web/node_modules/playwright-core (scripts/setup.sh runs npm ci in web/)";
  return "";
}

fs::path artifacts_dir() {
  auto dir = fs::current_path() / "artifacts" / "report";
  fs::create_directories(dir);
  return dir;
}

struct NodeOutcome {
  int code = -1;
  std::string output;
  json result;
};

NodeOutcome run_ui_script(const std::vector<std::pair<std::string, std::string>>& env) {
  std::string cmd = "cd '" + kWeb.string() + "' && env";
  for (const auto& [k, v] : env) cmd += " " + k + "='" + v + "'";
  cmd += " node e2e/ui_test.mjs 2>&1";
  NodeOutcome out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) out.output += buf;
  int status = ::pclose(p);
  out.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  auto at = out.output.rfind("RESULT ");
  if (at != std::string::npos) {
    auto end = out.output.find('\n', at);
    out.result = json::parse(out.output.substr(at + 7, end == std::string::npos ? std::string::npos : end - at - 7), nullptr, false);
  }
  return out;
}

// Starts `braid serve` on a free port; returns the process and its URL once it listens.
std::pair<test::Proc, std::string> start_serve(const std::vector<std::string>& folders, const fs::path& log) {
  std::vector<std::string> args = {"serve"};
  args.insert(args.end(), folders.begin(), folders.end());
  args.insert(args.end(), {"--port", "0"});
  fs::remove(log);
  auto proc = test::start_braid(args, log);
  std::regex url_re(R"(http://127\.0\.0\.1:(\d+)/)");
  for (int i = 0; i < 200; ++i) {
    auto text = try_read_file(log).value_or("");
    std::smatch m;
    if (std::regex_search(text, m, url_re)) return {proc, "http://127.0.0.1:" + m[1].str()};
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return {proc, ""};
}

int stop(test::Proc p) {
  ::kill(p.pid, SIGTERM);
  return test::wait_exit(p);
}

std::int64_t candidates_in(const fs::path& results) {
  if (!fs::exists(results / "evolution.db")) return 0;
  try {
    RunReader r(results);
    return r.count();
  } catch (const std::exception&) {
    return 0;  // the writer has not created its schema yet
  }
}

// A copy of the CPU example whose builds wait while `<copy>/go` is missing (at most 150 s), so
// the test decides when the run may go on: the browser must see it running and growing however
// fast or slow this machine is. The copy lives under the working folder, not /tmp, because a
// sandboxed build has a private /tmp.
fs::path paced_example() {
  auto dir = fs::current_path() / ("paced_matmul_cpu_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::copy(fs::path(BRAID_SOURCE_DIR) / "examples" / "matmul_cpu", dir, fs::copy_options::recursive);
  std::string yaml = read_file(dir / "workload.yaml");
  const std::string build = R"(build: "g++ -O2 -std=c++17 -I{workload_dir} -o {artifact} {program}")";
  auto at = yaml.find(build);
  if (at == std::string::npos) return {};
  yaml.replace(at, build.size(),
               "build: \"sh -c 'n=0; while [ ! -e $0/go ] && [ $n -lt 1500 ]; do sleep 0.1; n=$((n+1)); done; "
               "exec g++ -O2 -std=c++17 -I$0 -o $1 $2' {workload_dir} {artifact} {program}\"");
  at = yaml.find("build_timeout_s: 60");
  if (at == std::string::npos) return {};
  yaml.replace(at, 19, "build_timeout_s: 240");
  write_file_atomic(dir / "workload.yaml", yaml);
  return dir;
}

TEST(BrowserE2E, RealEvolveLiveTreeDiffCompareAndEscaping) {
  if (auto why = missing_browser_parts(); !why.empty()) GTEST_SKIP() << "browser test skipped: " << why;
  auto results = test::test_dir("e2e_evolve");
  auto hostile_dir = test::test_dir("e2e_hostile");
  fs::remove_all(results);
  auto hostile = test::make_synthetic_run(hostile_dir, 60, 2, 800, true);
  auto shots = artifacts_dir();
  auto evolve_log = shots / "evolve.log";
  fs::remove(evolve_log);
  // A real run of the CPU example, still in progress while the browser watches it: its builds
  // pause after the first candidate until the browser has looked (it creates `go` again).
  auto example = paced_example();
  ASSERT_FALSE(example.empty()) << "examples/matmul_cpu/workload.yaml no longer has the build line this test paces";
  write_file_atomic(example / "go", "");
  // 8 generations: enough for a tree, diffs and a live update; the run's length is most of this
  // test's time, and on a loaded machine it grows.
  auto evolve = test::start_braid({"evolve", example.string(), "--results", results.string(), "--generations", "8"}, evolve_log);
  // Up to 240 s (the paced build's own limit): the earlier 60 s bound is the likely cause of a
  // failure after 66 s in a full `ctest -j2` run, where the heaviest tests share the 2 cores.
  for (int i = 0; i < 4800 && candidates_in(results) < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  fs::remove(example / "go");
  ASSERT_GE(candidates_in(results), 1) << read_file(evolve_log);

  auto [serve, url] = start_serve({results.string(), hostile_dir.string()}, shots / "serve.log");
  ASSERT_FALSE(url.empty()) << try_read_file(shots / "serve.log").value_or("");
  write_file_atomic(hostile_dir / "hostile_code.txt", test::kHostileCode);
  auto outcome = run_ui_script({{"BRAID_URL", url},
                                {"BRAID_MODE", "full"},
                                {"BRAID_SHOTS", shots.string()},
                                {"BRAID_LIVE", "1"},
                                {"BRAID_LIVE_GATE", (example / "go").string()},
                                {"BRAID_CHROMIUM", chromium_path()},
                                {"BRAID_HOSTILE_ID", hostile.hostile_id},
                                {"BRAID_HOSTILE_CODE_FILE", (hostile_dir / "hostile_code.txt").string()}});
  write_file_atomic(example / "go", "");  // whatever the browser did, the run finishes
  int evolve_code = test::wait_exit(evolve);
  EXPECT_EQ(stop(serve), 0) << "serve should exit cleanly on SIGTERM";
  write_file_atomic(shots / "e2e_result.json", outcome.result.is_discarded() ? outcome.output : outcome.result.dump(2));
  // The script's error first: a CI log keeps only the head of a long failure message.
  std::string error = outcome.result.is_object() ? outcome.result.value("error", "") : "";
  EXPECT_EQ(outcome.code, 0) << error.substr(0, 600) << "\n" << outcome.output;
  ASSERT_TRUE(outcome.result.is_object()) << outcome.output;
  EXPECT_GE(outcome.result["checks"].size(), 35u) << outcome.output;
  EXPECT_TRUE(outcome.result.contains("live"));
  for (const char* png : {"overview.png", "overview_live.png", "every_candidate.png", "candidates_sorted.png", "knobs.png", "tree.png",
                          "candidate.png", "compare_mixed.png", "compare.png", "hostile_candidate.png"})
    EXPECT_TRUE(fs::exists(shots / png)) << png;
  EXPECT_GE(candidates_in(results), 8) << "evolve exit " << evolve_code << ": " << read_file(evolve_log);
  // Finished: the state the UI shows is "done" with every generation recorded.
  {
    RunReader finished(results);
    json st = finished.state();
    EXPECT_EQ(st["state"], "done") << st.dump();
    EXPECT_EQ(st["generations_done"], 8) << st.dump();
    EXPECT_EQ(st["generations_total"], 8) << st.dump();
  }
  std::printf("browser e2e: %s\n", outcome.result.dump().c_str());
  fs::remove_all(results);
  fs::remove_all(hostile_dir);
  fs::remove_all(example);
}

// Page load times (full page load until the view has rendered its data) over a synthetic run of
// BRAID_REPORT_SCALE_N candidates (default 1000; 100000 for the scale measurement).
TEST(BrowserE2E, PageLoadTimes) {
  if (auto why = missing_browser_parts(); !why.empty()) GTEST_SKIP() << "browser test skipped: " << why;
  int n = 1000;
  if (const char* env = std::getenv("BRAID_REPORT_SCALE_N")) n = std::max(10, std::atoi(env));
  auto dir = test::test_dir("scale_" + std::to_string(n));
  auto started = std::chrono::steady_clock::now();
  test::make_synthetic_run(dir, n, 4, 3000, false);
  double build_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  auto shots = artifacts_dir();
  started = std::chrono::steady_clock::now();
  auto [serve, url] = start_serve({dir.string()}, shots / ("serve_" + std::to_string(n) + ".log"));
  ASSERT_FALSE(url.empty());
  double serve_start_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  auto outcome = run_ui_script({{"BRAID_URL", url}, {"BRAID_MODE", "measure"}, {"BRAID_SHOTS", shots.string()},
                                {"BRAID_CHROMIUM", chromium_path()}});
  EXPECT_EQ(stop(serve), 0);
  ASSERT_EQ(outcome.code, 0) << outcome.output;
  json r = outcome.result;
  r["candidates"] = n;
  r["db_build_s"] = build_s;
  r["serve_start_s"] = serve_start_s;
  write_file_atomic(shots / ("page_load_" + std::to_string(n) + ".json"), r.dump(2));
  std::printf("page load times, %d candidates: %s\n", n, r.dump().c_str());
  EXPECT_EQ(r["count"], n);
  // Generous bounds for a shared 2-core machine; the measured figures are in the artifacts.
  for (auto& [page, ms] : r["loads_ms"].items()) EXPECT_LT(ms.get<double>(), n > 10000 ? 10000 : 5000) << page;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace braid::report
