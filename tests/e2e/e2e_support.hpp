// Helpers for tests that drive the real braid binary (BRAID_BIN) as a user would.
#pragma once
#include <cstdlib>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace braid::test {

struct Proc {
  pid_t pid = -1;
};

// Starts braid with `args`, stdout+stderr to `log`.
// The checkout's root: BRAID_TEST_SOURCE_DIR when the test binary was carried to another machine
// (a GPU host), else where it was built from.
inline std::filesystem::path test_source_dir() {
  const char* carried = std::getenv("BRAID_TEST_SOURCE_DIR");
  return carried && *carried ? std::filesystem::path(carried) : std::filesystem::path(BRAID_SOURCE_DIR);
}

inline Proc start_braid(const std::vector<std::string>& args, const std::filesystem::path& log,
                        const std::filesystem::path& cwd = test_source_dir()) {
  Proc p;
  p.pid = ::fork();
  if (p.pid == 0) {
    if (::chdir(cwd.c_str()) != 0) _exit(127);
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::vector<char*> argv;
    // A test binary carried to another machine (a GPU host) finds braid through BRAID_TEST_BIN.
    const char* carried = std::getenv("BRAID_TEST_BIN");
    std::string bin = carried && *carried ? carried : BRAID_BIN;
    argv.push_back(bin.data());
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(bin.c_str(), argv.data());
    _exit(127);
  }
  return p;
}

inline int wait_exit(Proc p) {
  int status = 0;
  ::waitpid(p.pid, &status, 0);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

struct Outcome {
  int code = -1;
  std::string output;
};

inline Outcome run_braid(const std::vector<std::string>& args, const std::filesystem::path& cwd = test_source_dir()) {
  auto log = std::filesystem::temp_directory_path() / ("braid_run_" + std::to_string(::getpid()) + ".log");
  std::filesystem::remove(log);
  Outcome o;
  o.code = wait_exit(start_braid(args, log, cwd));
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  o.output = ss.str();
  std::filesystem::remove(log);
  return o;
}

// Processes whose command line mentions `needle` (orphan detection).
inline std::vector<pid_t> processes_mentioning(const std::string& needle) {
  std::vector<pid_t> out;
  for (auto& e : std::filesystem::directory_iterator("/proc")) {
    std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "cmdline");
    std::string cmd((std::istreambuf_iterator<char>(in)), {});
    for (auto& c : cmd)
      if (c == '\0') c = ' ';
    std::ifstream st(e.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(st)), {});
    auto rp = stat.rfind(')');
    if (rp != std::string::npos && rp + 2 < stat.size() && stat[rp + 2] == 'Z') continue;  // zombie
    if (cmd.find(needle) != std::string::npos) out.push_back(pid_t(std::stol(name)));
  }
  return out;
}

inline std::filesystem::path fresh_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("braid_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  return d;
}

}  // namespace braid::test
