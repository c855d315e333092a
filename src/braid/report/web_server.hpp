// `braid serve`: a read-only local web server over one or more results folders, reading their
// databases live while runs write them. Serves the embedded UI (web/ui/) and the JSON/SVG
// endpoints documented in web/API.md. Binds to loopback unless told otherwise.
#pragma once
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace httplib {
class Server;
}

namespace braid::report {

class RunReader;

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8765;  // 0 picks a free port
};

class WebServer {
 public:
  // Opens every results folder read-only; throws UserError for a folder that is not a run.
  WebServer(const std::vector<std::filesystem::path>& results, ServeOptions options);
  ~WebServer();
  WebServer(const WebServer&) = delete;
  WebServer& operator=(const WebServer&) = delete;

  // Binds the socket; returns the port (the chosen one when options.port was 0). Throws
  // SystemError when the address cannot be bound.
  int bind();
  // Serves until stop() (from another thread or a signal handler's thread). A stop() that comes
  // first, even before the listening thread has started, makes listen() return at once.
  void listen();
  void stop();

 private:
  void install_routes();

  std::vector<std::unique_ptr<RunReader>> runs_;
  ServeOptions options_;
  std::unique_ptr<httplib::Server> server_;
  std::mutex state_;  // orders listen() and stop(): httplib's stop() is lost on a server not yet running
  bool listening_ = false, stopped_ = false;
};

}  // namespace braid::report
