// braid: thin command-line front end over the library. Subcommands live in cmd_*.cpp.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "braid/cli/command.hpp"
#include "braid/util/error.hpp"

namespace braid::cli {
namespace {
std::vector<std::pair<int, CommandSetup>>& registry() {
  static std::vector<std::pair<int, CommandSetup>> r;
  return r;
}
}  // namespace

Registrar::Registrar(int order, CommandSetup setup) { registry().emplace_back(order, std::move(setup)); }

namespace {

// Exit codes (README, "Reliability"): 0 done, 1 braid's environment failed (disk full, database
// unwritable), 2 bad input or a refused start (locked folder, rejected API key), 130 interrupted.
constexpr int kEnvironmentFailure = 1;

std::string with_hint(std::string message) {
  if (message.find("No space left") != std::string::npos || message.find("disk is full") != std::string::npos ||
      message.find("File too large") != std::string::npos || message.find("disk I/O error") != std::string::npos)
    message += " (is the disk full? free space, then continue with `braid resume <results>`; stored candidates are kept)";
  return message;
}

// An exception that escapes a worker thread (a write failing on a full disk) ends braid with one
// line and exit code 1 instead of "terminate called ..." and a core dump. Committed database
// transactions stay: `braid resume` continues.
[[noreturn]] void on_terminate() {
  std::string what = "fatal error";
  if (auto ep = std::current_exception()) {
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
  }
  std::fprintf(stderr, "\nbraid: error: %s\n", with_hint(what).c_str());
  std::fflush(stderr);
  std::_Exit(kEnvironmentFailure);
}

}  // namespace
}  // namespace braid::cli

int main(int argc, char** argv) {
  using namespace braid::cli;
  std::set_terminate(on_terminate);
  CLI::App app{"braid: co-design of computation and communication in distributed CUDA programs"};
  app.set_version_flag("--version", std::string("braid ") + BRAID_VERSION);
  app.require_subcommand(1);
  auto& reg = registry();
  std::stable_sort(reg.begin(), reg.end(), [](auto& a, auto& b) { return a.first < b.first; });
  Action action;
  for (auto& [order, setup] : reg) setup(app, action);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  if (!action) return 0;
  try {
    return action();
  } catch (const braid::UserError& e) {
    std::fprintf(stderr, "braid: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "braid: error: %s\n", with_hint(e.what()).c_str());
    return kEnvironmentFailure;
  }
}
