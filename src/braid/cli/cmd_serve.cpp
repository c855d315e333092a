// braid serve <results>... : live, read-only web UI over one or more runs.
#include <csignal>
#include <cstdio>
#include <thread>

#include "braid/cli/command.hpp"
#include "braid/report/web_server.hpp"

namespace {

int run_serve(const std::vector<std::string>& results, const std::string& host, int port) {
  std::vector<std::filesystem::path> dirs(results.begin(), results.end());
  braid::report::WebServer server(dirs, {host, port});
  // SIGINT/SIGTERM are taken by a waiting thread (blocked everywhere else, inherited by the
  // server's worker threads), which stops the server cleanly.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  int bound = server.bind();
  std::printf("braid serve: http://%s:%d/ (%zu run%s, read-only)\n", host.find(':') != std::string::npos ? ("[" + host + "]").c_str() : host.c_str(),
              bound, dirs.size(), dirs.size() == 1 ? "" : "s");
  std::fflush(stdout);
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    server.stop();
  });
  server.listen();
  // listen() also returns when the server fails; wake the waiter so it can be joined.
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  return 0;
}

braid::cli::Registrar reg(80, [](CLI::App& app, braid::cli::Action& action) {
  struct Options {
    std::vector<std::string> results;
    std::string host = "127.0.0.1";
    int port = 8765;
  };
  static Options o;
  auto* cmd = app.add_subcommand("serve", "Live web UI over results folders (read-only; compare when several)");
  cmd->add_option("results", o.results, "results folder(s) of braid evolve")->required()->check(CLI::ExistingDirectory);
  cmd->add_option("--port", o.port, "TCP port (0 picks a free one)")->capture_default_str()->check(CLI::Range(0, 65535));
  cmd->add_option("--host", o.host, "address to bind (loopback unless told otherwise)")->capture_default_str();
  cmd->callback([&action] { action = [] { return run_serve(o.results, o.host, o.port); }; });
});

}  // namespace
