// braid: thin command-line front end over the library. Subcommands live in cmd_*.cpp.
#include <algorithm>
#include <cstdio>
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

}  // namespace braid::cli

int main(int argc, char** argv) {
  using namespace braid::cli;
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
    std::fprintf(stderr, "braid: error: %s\n", e.what());
    return 1;
  }
}
