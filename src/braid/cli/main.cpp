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

void add_user_flag_options(CLI::App& cmd, UserFlags& flags) {
  cmd.add_option("sources", flags.sources,
                 "The program's other source or object files (.cu, .cpp, .o, .a), compiled and linked with it as "
                 "they are (only the first file is converted)");
  cmd.add_option("-I", flags.includes, "Include folder for the program's headers (as nvcc -I)");
  cmd.add_option("-D", flags.defines, "Macro definition NAME[=VALUE] (as nvcc -D)");
  cmd.add_option("-L", flags.lib_dirs, "Library folder (as nvcc -L)");
  cmd.add_option("-l", flags.lib_names, "Library to link (as nvcc -l)");
  cmd.add_option("--nvcc-flags", flags.nvcc_flags, "Other nvcc flags, one quoted string (\"-Xcompiler -fopenmp\")");
  cmd.add_flag("--keep-headers", flags.keep_headers,
               "Leave the program's own headers as files: NCCL calls written in them stay host NCCL (by default "
               "a header whose code calls NCCL is written into the converted file, so that its calls convert too)");
}

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

// One line for a command line braid cannot parse: an unknown command is named, with the known ones.
std::string parse_error_line(const CLI::App& app, int argc, char** argv, const CLI::ParseError& e) {
  if (argc >= 2 && argv[1][0] != '-') {
    bool known = false;
    std::string names;
    for (const CLI::App* sub : app.get_subcommands({})) {
      known = known || sub->get_name() == argv[1];
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) return "unknown command '" + std::string(argv[1]) + "' (commands: " + names + ")";
  }
  std::string what = e.what();
  if (argc >= 2 && argv[1][0] != '-') what += " (see `braid " + std::string(argv[1]) + " --help`)";
  else what += " (see `braid --help`)";
  return what;
}

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
  app.footer(
      "Exit codes: 0 done; 1 braid's own error (or the environment's); 2 bad input (a file, key, flag or id,\n"
      "named in one line) or a seed program that fails; 130 interrupted (resume with `braid resume DIR`).\n"
      "Reference: docs/reference.md\n");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::fprintf(stderr, "braid: %s\n", parse_error_line(app, argc, argv, e).c_str());
    return 2;
  }
  if (!action) return 0;
  try {
    return action();
  } catch (const braid::UserError& e) {
    std::fflush(stdout);  // what the command printed comes first when both go to one pipe
    std::fprintf(stderr, "braid: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "braid: error: %s\n", with_hint(e.what()).c_str());
    return kEnvironmentFailure;
  }
}
