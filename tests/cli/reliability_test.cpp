// Reliability of the braid binary against a hostile user (issue #18): seeds over the whole
// uint64 range, a lock on the results folder, ranges of every number, read commands on a
// read-only folder, damaged databases, a start killed in its first milliseconds, a full disk.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <fstream>
#include <map>
#include <sstream>

#include "../e2e/e2e_support.hpp"
#include "braid/db/database.hpp"

namespace braid::test {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// The line of braid's own error ("braid: ..."); empty when there is none.
std::string error_line(const std::string& output) {
  std::istringstream in(output);
  std::string found;
  for (std::string line; std::getline(in, line);)
    if (line.rfind("braid: ", 0) == 0) found = line;
  return found;
}

std::int64_t count_programs(const fs::path& db_file) {
  sqlite3* db = nullptr;
  std::int64_t n = -1;
  if (sqlite3_open_v2(db_file.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM programs", -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
      n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return n;
}

// Every file of a folder with its size and modification time: what a read-only command must
// leave exactly as it found it.
std::map<std::string, std::pair<std::uintmax_t, fs::file_time_type>> snapshot(const fs::path& dir) {
  std::map<std::string, std::pair<std::uintmax_t, fs::file_time_type>> out;
  for (auto& e : fs::recursive_directory_iterator(dir))
    out[e.path().string()] = {e.is_regular_file() ? e.file_size() : 0, e.last_write_time()};
  return out;
}

class Reliability : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fresh_dir("reliability");
    fs::create_directories(root_);
    results_ = root_ / "results";
  }
  void TearDown() override {
    if (fs::exists(root_)) {
      for (auto& e : fs::recursive_directory_iterator(root_)) fs::permissions(e.path(), fs::perms::owner_all, fs::perm_options::add);
      fs::remove_all(root_);
    }
  }
  std::vector<std::string> evolve_args(int generations, const std::string& seed = "3") {
    return {"evolve", "examples/matmul_cpu", "--results", results_.string(), "--generations", std::to_string(generations),
            "--seed", seed, "-c", "tests/e2e/fast_config.yaml"};
  }
  // A finished small run to read from.
  void make_run(int generations = 2, const std::string& seed = "3") {
    auto o = run_braid(evolve_args(generations, seed));
    ASSERT_EQ(o.code, 0) << o.output;
  }
  void expect_refused(const Outcome& o, const std::string& what, const std::string& what2 = "") {
    EXPECT_EQ(o.code, 2) << o.output;
    std::string line = error_line(o.output);
    EXPECT_NE(line.find(what), std::string::npos) << o.output;
    if (!what2.empty()) EXPECT_NE(line.find(what2), std::string::npos) << o.output;
    EXPECT_EQ(o.output.find("terminate called"), std::string::npos) << o.output;
  }
  fs::path root_, results_;
  std::string first_id_;
};

// ---- 1. seeds ----

TEST_F(Reliability, SeedsOutsideUint64AreRefused) {
  for (const char* bad : {"-1", "18446744073709551616", "1e3", "0x10", ""}) {
    auto args = evolve_args(2, bad);
    auto o = run_braid(args);
    expect_refused(o, "--seed", "18446744073709551615");
    EXPECT_FALSE(fs::exists(results_)) << bad;
  }
}

TEST_F(Reliability, RunWithASeedAbove2To63Resumes) {
  make_run(2, "18446744073709551615");
  auto o = run_braid({"resume", results_.string(), "--generations", "3"});
  ASSERT_EQ(o.code, 0) << o.output;
  auto top = run_braid({"top", results_.string()});
  EXPECT_EQ(top.code, 0) << top.output;
  EXPECT_NE(slurp(results_ / "config.json").find("18446744073709551615"), std::string::npos);
}

// ---- 6. ranges ----

TEST_F(Reliability, NumbersOutOfRangeAreRefused) {
  expect_refused(run_braid({"evolve", "examples/matmul_cpu", "--results", results_.string(), "-g", "-1"}), "--generations");
  expect_refused(run_braid({"evolve", "examples/matmul_cpu", "--results", results_.string(), "-g", "2000000000"}), "--generations");
  expect_refused(run_braid({"evolve", "examples/matmul_cpu", "--results", results_.string(), "-j", "0"}), "--parallel");
  expect_refused(run_braid({"evolve", "examples/matmul_cpu", "--results", results_.string(), "-j", "99999999999"}), "--parallel");
  std::ofstream(root_ / "islands.yaml") << "num_islands: 100000\n";
  expect_refused(run_braid({"evolve", "examples/matmul_cpu", "--results", results_.string(), "-c", (root_ / "islands.yaml").string()}),
                 "islands.yaml", "num_islands");
  std::ofstream(root_ / "timeout.yaml") << "request_timeout_s: 1e10\nllm_models: local:m@http://127.0.0.1:9/v1\n";
  expect_refused(run_braid({"evolve", "examples/matmul_cpu", "--results", results_.string(), "-c", (root_ / "timeout.yaml").string()}),
                 "timeout.yaml", "request_timeout_s");
  // A workload timeout of 1e10 s would overflow the evaluators' millisecond clocks.
  fs::copy(fs::path(BRAID_SOURCE_DIR) / "examples" / "matmul_cpu", root_ / "wl", fs::copy_options::recursive);
  std::string yaml = slurp(root_ / "wl" / "workload.yaml");
  yaml.replace(yaml.find("build_timeout_s: 60"), 19, "build_timeout_s: 1e10");
  std::ofstream(root_ / "wl" / "workload.yaml") << yaml;
  expect_refused(run_braid({"evolve", (root_ / "wl").string(), "--results", results_.string()}), "workload.yaml", "build_timeout_s");
  EXPECT_FALSE(fs::exists(results_));
}

TEST_F(Reliability, MalformedLlmUrlsAreRefusedAtStart) {
  for (const char* url : {"http://", "http://127.0.0.1:99999/v1", "http://[::1/v1"}) {
    auto o = run_braid({"evolve", "examples/matmul_cpu", "--results", results_.string(), "-g", "2", "--llm",
                        std::string("local:m@") + url});
    expect_refused(o, "not a valid URL");
    EXPECT_FALSE(fs::exists(results_)) << url;
  }
}

// ---- 2. one braid per results folder ----

TEST_F(Reliability, SecondBraidOnALiveRunIsRefusedAndADeadOnesLockIsTakenOver) {
  auto log = root_ / "first.log";
  Proc first = start_braid(evolve_args(400), log);
  // Wait until the first braid holds the folder and has begun its run.
  for (int i = 0; i < 600 && count_programs(results_ / "evolution.db") < 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_GE(count_programs(results_ / "evolution.db"), 1) << slurp(log);
  const std::string holder = slurp(results_ / "braid.lock");
  EXPECT_EQ(holder.rfind(std::to_string(first.pid) + " ", 0), 0u) << holder;

  auto resume = run_braid({"resume", results_.string()});
  expect_refused(resume, "pid " + std::to_string(first.pid), "braid.lock");
  auto again = run_braid(evolve_args(400));
  expect_refused(again, "pid " + std::to_string(first.pid));
  // The live run was not disturbed: it is still running and none of its evaluations was ended.
  EXPECT_EQ(::kill(first.pid, 0), 0);
  EXPECT_EQ(resume.output.find("ended"), std::string::npos) << resume.output;

  ::kill(first.pid, SIGKILL);
  wait_exit(first);
  // The lock file names a dead process now; resume takes the folder over.
  auto taken = run_braid({"resume", results_.string(), "--generations", "3"});
  EXPECT_EQ(taken.code, 0) << taken.output;
  EXPECT_EQ(taken.output.find("duplicate"), std::string::npos) << taken.output;
}

// ---- 8. a start killed at once, damaged databases ----

TEST_F(Reliability, StartKilledInItsFirstMillisecondsLeavesAFolderThatIsAccepted) {
  // One generation: what is checked is the start the kill left behind, not the search after it.
  for (int delay_ms : {3, 8, 20, 40}) {
    fs::remove_all(results_);
    Proc p = start_braid(evolve_args(1), root_ / "killed.log");
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    ::kill(p.pid, SIGKILL);
    wait_exit(p);
    auto o = run_braid(evolve_args(1));
    if (o.code == 2 && o.output.find("already holds a run") != std::string::npos) o = run_braid({"resume", results_.string()});
    EXPECT_EQ(o.code, 0) << "killed after " << delay_ms << " ms:\n" << o.output;
  }
}

// The states such a kill leaves, made on purpose (the kills above hit them only by timing):
// a 0-byte database (killed as SQLite created it) and one with the schema but no run.
TEST_F(Reliability, InterruptedSetUpStatesAreTakenOverByEvolve) {
  fs::create_directories(results_);
  std::ofstream(results_ / "evolution.db").flush();
  auto o = run_braid(evolve_args(1));
  EXPECT_EQ(o.code, 0) << o.output;
  fs::remove_all(results_);
  fs::create_directories(results_);
  { ProgramDatabase schema_only(results_ / "evolution.db"); }
  auto r = run_braid({"resume", results_.string()});
  expect_refused(r, "set-up was interrupted", "braid evolve");
  o = run_braid(evolve_args(1));
  EXPECT_EQ(o.code, 0) << o.output;
  EXPECT_NE(o.output.find("starting the run afresh"), std::string::npos) << o.output;
  EXPECT_EQ(run_braid({"resume", results_.string()}).code, 0);
}

TEST_F(Reliability, DamagedDatabasesAreNamedInOneLine) {
  make_run();
  const auto db = results_ / "evolution.db";
  const std::string good = slurp(db);
  ASSERT_GT(good.size(), 8192u);
  // Garbage.
  std::ofstream(db, std::ios::binary | std::ios::trunc) << std::string(good.size(), 'x');
  for (auto cmd : {"top", "resume"}) expect_refused(run_braid({cmd, results_.string()}), db.string(), "not a braid database");
  // Truncated to one page: the header survives, the tables do not.
  std::ofstream(db, std::ios::binary | std::ios::trunc) << good.substr(0, 4096);
  auto t = run_braid({"top", results_.string()});
  EXPECT_NE(t.code, 0);
  EXPECT_NE(error_line(t.output).find(db.string()), std::string::npos) << t.output;
  EXPECT_EQ(t.output.find("terminate called"), std::string::npos) << t.output;
  // 0 bytes: never taken as an empty run, never written into.
  std::ofstream(db, std::ios::binary | std::ios::trunc);
  for (auto cmd : {"top", "resume"}) expect_refused(run_braid({cmd, results_.string()}), db.string(), "0 bytes");
  EXPECT_EQ(fs::file_size(db), 0u);
  EXPECT_FALSE(fs::exists(db.string() + "-wal"));
}

TEST_F(Reliability, ExportIntoAFolderIsAClearError) {
  make_run();
  fs::create_directories(root_ / "out");
  expect_refused(run_braid({"export", results_.string(), "-o", (root_ / "out").string()}), "is a folder");
  expect_refused(run_braid({"export", results_.string(), "-o", (root_ / "nowhere" / "best.cpp").string()}), "does not exist");
  auto o = run_braid({"export", results_.string(), "-o", (root_ / "out" / "best.cpp").string()});
  EXPECT_EQ(o.code, 0) << o.output;
  EXPECT_GT(fs::file_size(root_ / "out" / "best.cpp"), 100u);
}

// ---- 7. read commands on a read-only folder ----

// Runs braid where writes to the read-only folder really fail: as an unprivileged user when
// the tests run as root (where chmod does not stop writes), through a user namespace.
Proc start_braid_unprivileged(const std::vector<std::string>& args, const fs::path& log) {
  if (::geteuid() != 0) return start_braid(args, log);
  std::vector<std::string> wrapped = {"-U", "--", BRAID_BIN};
  wrapped.insert(wrapped.end(), args.begin(), args.end());
  Proc p;
  p.pid = ::fork();
  if (p.pid == 0) {
    if (::chdir(BRAID_SOURCE_DIR) != 0) _exit(127);
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0666);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::vector<char*> argv = {const_cast<char*>("unshare")};
    for (auto& a : wrapped) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execvp("unshare", argv.data());
    _exit(127);
  }
  return p;
}

Outcome run_braid_unprivileged(const std::vector<std::string>& args) {
  auto log = fs::temp_directory_path() / ("braid_unpriv_" + std::to_string(::getpid()) + ".log");
  fs::remove(log);
  Outcome o;
  o.code = wait_exit(start_braid_unprivileged(args, log));
  o.output = slurp(log);
  fs::remove(log);
  return o;
}

// GET `path` from 127.0.0.1:`port`; the whole HTTP answer, "" when nothing answered.
std::string http_get(int port, const std::string& path) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  std::string answer;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    std::string request = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) > 0) {
      char buf[4096];
      for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) answer.append(buf, std::size_t(n));
    }
  }
  ::close(fd);
  return answer;
}

bool writes_are_refused(const fs::path& dir) {
  auto o = run_braid_unprivileged({"init", (dir / "probe").string()});
  return o.code != 0 && !fs::exists(dir / "probe");
}

TEST_F(Reliability, ReadCommandsWorkOnAReadOnlyFolder) {
  make_run(3);
  // Readable by anyone (the unprivileged user of the namespace reads as "other").
  fs::permissions(root_, fs::perms::others_read | fs::perms::others_exec, fs::perm_options::add);
  for (auto& e : fs::recursive_directory_iterator(results_)) {
    fs::permissions(e.path(), fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write, fs::perm_options::remove);
    fs::permissions(e.path(), fs::perms::others_read | (e.is_directory() ? fs::perms::others_exec : fs::perms::none), fs::perm_options::add);
  }
  fs::permissions(results_, fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write, fs::perm_options::remove);
  const auto before = snapshot(results_);
  {
    sqlite3* db = nullptr;
    sqlite3_stmt* st = nullptr;
    // immutable: a plain read-only connection would itself create -wal/-shm beside the file.
    const std::string uri = "file:" + (results_ / "evolution.db").string() + "?immutable=1";
    sqlite3_open_v2(uri.c_str(), &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, nullptr);
    if (sqlite3_prepare_v2(db, "SELECT id FROM programs ORDER BY generation LIMIT 1", -1, &st, nullptr) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
      first_id_ = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(db);
  }
  ASSERT_FALSE(first_id_.empty());
  EXPECT_EQ(snapshot(results_), before) << "reading the id changed the folder";
  const bool enforced = writes_are_refused(results_);
  if (!enforced) std::printf("note: writes to the read-only folder are not refused here (no user namespace); checking that nothing changes\n");
  auto top = run_braid_unprivileged({"top", results_.string()});
  EXPECT_EQ(top.code, 0) << top.output;
  auto exp = run_braid_unprivileged({"export", results_.string()});
  EXPECT_EQ(exp.code, 0) << exp.output;
  EXPECT_NE(exp.output.find("EVOLVE-BLOCK"), std::string::npos);
  auto report = run_braid_unprivileged({"report", results_.string(), "-o", "/tmp/braid_ro_report_" + std::to_string(::getpid()) + ".html"});
  EXPECT_EQ(report.code, 0) << report.output;
  fs::remove("/tmp/braid_ro_report_" + std::to_string(::getpid()) + ".html");
  auto show = run_braid_unprivileged({"show", results_.string(), first_id_});
  EXPECT_EQ(show.code, 0) << show.output;
  // serve: the live web UI reads the same folder.
  auto serve_log = root_ / "serve.log";
  Proc serve = start_braid_unprivileged({"serve", results_.string(), "--port", "0"}, serve_log);
  int port = 0;
  for (int i = 0; i < 200 && port == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::string text = slurp(serve_log);
    if (auto at = text.find("http://127.0.0.1:"); at != std::string::npos) port = std::atoi(text.c_str() + at + 17);
  }
  EXPECT_GT(port, 0) << slurp(serve_log);
  if (port > 0) {
    std::string answer = http_get(port, "/api/runs");
    EXPECT_NE(answer.find("200 OK"), std::string::npos) << answer;
    EXPECT_NE(answer.find("results"), std::string::npos) << answer;
  }
  ::kill(serve.pid, SIGTERM);
  wait_exit(serve);
  EXPECT_EQ(snapshot(results_), before) << "a read command changed the results folder";
  EXPECT_FALSE(fs::exists(results_ / "evolution.db-wal"));
  EXPECT_FALSE(fs::exists(results_ / "evolution.db-shm"));
}

// ---- 8. a full disk ----

TEST_F(Reliability, FullDiskEndsWithOneLineNotACrash) {
  // RLIMIT_FSIZE makes every write beyond 256 KiB fail with EFBIG, as a full disk fails with
  // ENOSPC (SIGXFSZ ignored, so the write returns the error instead of killing braid).
  auto log = root_ / "full.log";
  // RLIMIT_FSIZE also caps the shared memory (a memfd) between matmul_cpu's driver and worker,
  // which a full disk does not: evolve a copy that runs the example's single-binary harness.
  fs::copy(fs::path(BRAID_SOURCE_DIR) / "examples" / "matmul_cpu", root_ / "single", fs::copy_options::recursive);
  std::istringstream yaml(slurp(root_ / "single" / "workload.yaml"));
  std::string single, line;
  while (std::getline(yaml, line)) {
    if (line.find("driver_build:") != std::string::npos || line.find("worker:") != std::string::npos || line.rfind("  #", 0) == 0)
      continue;
    if (auto at = line.find("{driver}"); at != std::string::npos) line.replace(at, 8, "{artifact}");
    single += line + "\n";
  }
  std::ofstream(root_ / "single" / "workload.yaml") << single;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit lim{256 << 10, 256 << 10};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    if (::chdir(BRAID_SOURCE_DIR) != 0) _exit(127);
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    auto args = evolve_args(400);
    args[1] = (root_ / "single").string();
    std::vector<char*> argv = {const_cast<char*>(BRAID_BIN)};
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(BRAID_BIN, argv.data());
    _exit(127);
  }
  int code = wait_exit(Proc{pid});
  std::string out = slurp(log);
  EXPECT_EQ(code, 1) << out;
  EXPECT_EQ(out.find("terminate called"), std::string::npos) << out;
  EXPECT_NE(error_line(out).find("braid: error:"), std::string::npos) << out;
  // What was stored before the disk filled is intact and resumable once space is back.
  EXPECT_GE(count_programs(results_ / "evolution.db"), 0);
}

}  // namespace
}  // namespace braid::test
