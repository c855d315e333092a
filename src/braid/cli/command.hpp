// Subcommands register themselves from their own file (cli/cmd_*.cpp), so a module's
// command can be added without touching main.cpp:
//
//   static braid::cli::Registrar reg(30, [](CLI::App& app, braid::cli::Action& action) {
//     auto* cmd = app.add_subcommand("top", "Table of the best candidates");
//     ...options bound to static/shared state...
//     cmd->callback([&action, ...] { action = [...] { return run_top(...); }; });
//   });
//
// `order` sorts commands in --help. The action returns the process exit code; UserError
// thrown from it becomes "braid: <file>: <problem>" and exit code 2 (handled in main.cpp).
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

#include "braid/pipeline/user_flags.hpp"

namespace braid::cli {

using Action = std::function<int()>;
using CommandSetup = std::function<void(CLI::App& app, Action& action)>;

struct Registrar {
  Registrar(int order, CommandSetup setup);
};

// How the program is read and built, the same for `convert` and `run`: -I -D -L -l --nvcc-flags
// --keep-headers.
void add_user_flag_options(CLI::App& cmd, UserFlags& flags);

}  // namespace braid::cli
