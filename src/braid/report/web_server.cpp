#include "braid/report/web_server.hpp"

#include <chrono>
#include <thread>

#include <httplib.h>

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>

#include "braid/report/plots.hpp"
#include "braid/report/run_reader.hpp"
#include "braid/report/web_assets.hpp"
#include "braid/util/error.hpp"
#include "braid/util/log.hpp"

namespace braid::report {
namespace {

// The UI loads only its own files; candidate text can never become script even if a view
// forgot to escape it.
constexpr const char* kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

void common_headers(httplib::Response& res) {
  res.set_header("Content-Security-Policy", kContentSecurityPolicy);
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Referrer-Policy", "no-referrer");
  res.set_header("Cache-Control", "no-store");
}

void send_json(httplib::Response& res, const json& j, int status = 200) {
  res.status = status;
  // Invalid UTF-8 in candidate text is replaced rather than failing the whole answer.
  res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), "application/json; charset=utf-8");
}

void send_error(httplib::Response& res, int status, const std::string& message) {
  send_json(res, {{"error", message}}, status);
}

std::optional<int> int_param(const httplib::Request& req, const char* name) {
  if (!req.has_param(name)) return std::nullopt;
  std::string v = req.get_param_value(name);
  int out = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || p != v.data() + v.size()) return std::nullopt;
  return out;
}

json endpoint_index() {
  return {{"endpoints",
           json::array({
               "GET /api/runs",
               "GET /api/runs/{r}/status",
               "GET /api/runs/{r}/overview",
               // One endpoint a line, however long.
               // clang-format off
               "GET /api/runs/{r}/candidates?order=score|generation|generation_asc|knob:NAME|metric:NAME&dir=asc|desc&island=&failure=&offset=&limit=",
               // clang-format on
               "GET /api/runs/{r}/candidates/{id}",
               "GET /api/runs/{r}/tree?focus=&up=&down=&max_children=&max_nodes=",
               "GET /api/runs/{r}/children/{id}?offset=&limit=",
               "GET /api/runs/{r}/islands",
               "GET /api/runs/{r}/archive?offset=&limit=",
               "GET /api/runs/{r}/meta",
               "GET /api/runs/{r}/knobs",
               "GET /api/runs/{r}/plots/{best_by_eval|best_by_time|ratio_by_eval|failures|every_candidate}.svg",
               "GET /api/runs/{r}/points",
               "GET /api/runs/{r}/state",
               "GET /api/runs/{r}/export.csv",
               "GET /api/runs/{r}/export.json",
               "GET /api/compare/knobs",
               "GET /api/compare/workloads",
               "GET /api/compare/plots/{best_by_eval|best_by_time}.svg",
           })},
          {"doc", "web/API.md"}};
}

constexpr std::size_t kWorkers = 64;

// Why `host:port` cannot be bound (httplib does not keep errno): the same bind, done again.
int bind_error(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* list = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &list) != 0) return EADDRNOTAVAIL;
  int error = 0;
  for (addrinfo* a = list; a != nullptr; a = a->ai_next) {
    int sock = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (sock < 0) continue;
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    error = ::bind(sock, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
    ::close(sock);
    if (error == EADDRINUSE) break;
  }
  ::freeaddrinfo(list);
  return error;
}

using Runs = std::vector<std::unique_ptr<RunReader>>;

// Every handler runs under one guard: a failing query answers 500 with its message instead of
// dropping the connection. Every answer gets the common headers; an unrouted one a JSON error.
void install_guards(httplib::Server& s) {
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    common_headers(res);
    send_error(res, 500, what);
  });
  s.set_post_routing_handler([](const httplib::Request&, httplib::Response& res) { common_headers(res); });
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (res.body.empty()) send_error(res, res.status, "not found: " + req.path);
  });
}

// The embedded UI's files and the index of the API.
void install_ui(httplib::Server& s) {
  for (const char* path : {"/", "/index.html", "/app.js", "/dom.js", "/charts.js", "/app.css"}) {
    s.Get(path, [](const httplib::Request& req, httplib::Response& res) {
      auto asset = web_asset(req.path);
      res.set_content(std::string(asset->body), std::string(asset->content_type).c_str());
    });
  }
  // Browsers ask for it on every page; an empty answer keeps their consoles clean.
  s.Get("/favicon.ico", [](const httplib::Request&, httplib::Response& res) { res.status = 204; });
  s.Get("/api", [](const httplib::Request&, httplib::Response& res) { send_json(res, endpoint_index()); });
}

// The run of the path's first number; nullptr (after answering 404) when there is none.
RunReader* run_at(const Runs& runs, const httplib::Request& req, httplib::Response& res) {
  std::size_t r = 0;
  const std::string m = req.matches[1];
  auto [p, ec] = std::from_chars(m.data(), m.data() + m.size(), r);
  if (ec != std::errc() || r >= runs.size()) {
    send_error(res, 404, "no run " + m);
    return nullptr;
  }
  return runs[r].get();
}

// GET `pattern` answers `view(run, request)` as JSON for the run it names.
template <typename View>
void get_run_json(httplib::Server& s, const Runs& runs, const char* pattern, View view) {
  s.Get(pattern, [&runs, view](const httplib::Request& req, httplib::Response& res) {
    if (auto* run = run_at(runs, req, res)) send_json(res, view(*run, req));
  });
}

// The list of runs and each run's views that take no more than paging.
void install_run_views(httplib::Server& s, const Runs& runs) {
  s.Get("/api/runs", [&runs](const httplib::Request&, httplib::Response& res) {
    json out = json::array();
    for (std::size_t i = 0; i < runs.size(); ++i) {
      json st = runs[i]->status();
      st["index"] = i;
      st["path"] = std::filesystem::absolute(runs[i]->dir()).lexically_normal().string();
      out.push_back(st);
    }
    send_json(res, {{"runs", out}});
  });
  using Req = const httplib::Request&;
  get_run_json(s, runs, R"(/api/runs/(\d+)/status)", [](RunReader& run, Req) { return run.status(); });
  get_run_json(s, runs, R"(/api/runs/(\d+)/overview)", [](RunReader& run, Req) { return run.overview(); });
  get_run_json(s, runs, R"(/api/runs/(\d+)/children/([0-9A-Za-z_.-]{1,128}))", [](RunReader& run, Req req) {
    return run.children(req.matches[2], int_param(req, "offset").value_or(0), int_param(req, "limit").value_or(50));
  });
  get_run_json(s, runs, R"(/api/runs/(\d+)/islands)", [](RunReader& run, Req) { return run.islands(); });
  get_run_json(s, runs, R"(/api/runs/(\d+)/archive)", [](RunReader& run, Req req) {
    return run.archive(int_param(req, "offset").value_or(0), int_param(req, "limit").value_or(50));
  });
  get_run_json(s, runs, R"(/api/runs/(\d+)/meta)", [](RunReader& run, Req) { return run.meta(); });
  get_run_json(s, runs, R"(/api/runs/(\d+)/knobs)", [](RunReader& run, Req) { return run.best_knobs(); });
  get_run_json(s, runs, R"(/api/runs/(\d+)/points)", [](RunReader& run, Req) { return run.points(); });
  get_run_json(s, runs, R"(/api/runs/(\d+)/state)", [](RunReader& run, Req) { return run.state(); });
}

// The query of a candidate listing; nullopt (after answering 400) when it is malformed.
std::optional<CandidatePageQuery> candidate_query(const httplib::Request& req, httplib::Response& res) {
  CandidatePageQuery q;
  if (req.has_param("order")) q.order = req.get_param_value("order");
  const bool by_column = q.order.rfind("knob:", 0) == 0 || q.order.rfind("metric:", 0) == 0;
  if (q.order != "score" && q.order != "generation" && q.order != "generation_asc" && !by_column) {
    send_error(res, 400, "order must be score, generation, generation_asc, knob:NAME or metric:NAME");
    return std::nullopt;
  }
  if (req.has_param("dir")) {
    const std::string dir = req.get_param_value("dir");
    if (dir != "asc" && dir != "desc") {
      send_error(res, 400, "dir must be asc or desc");
      return std::nullopt;
    }
    q.ascending = dir == "asc";
  }
  q.island = int_param(req, "island");
  if (req.has_param("failure") && !req.get_param_value("failure").empty()) q.failure = req.get_param_value("failure");
  q.offset = int_param(req, "offset").value_or(0);
  q.limit = int_param(req, "limit").value_or(50);
  return q;
}

// A run's candidate listing, one candidate, and the tree around one.
void install_candidate_routes(httplib::Server& s, const Runs& runs) {
  s.Get(R"(/api/runs/(\d+)/candidates)", [&runs](const httplib::Request& req, httplib::Response& res) {
    auto* run = run_at(runs, req, res);
    if (!run) return;
    if (auto q = candidate_query(req, res)) send_json(res, run->candidates(*q));
  });
  s.Get(R"(/api/runs/(\d+)/candidates/([0-9A-Za-z_.-]{1,128}))",
        [&runs](const httplib::Request& req, httplib::Response& res) {
          auto* run = run_at(runs, req, res);
          if (!run) return;
          auto c = run->candidate(req.matches[2]);
          if (!c) return send_error(res, 404, "no candidate " + std::string(req.matches[2]));
          send_json(res, *c);
        });
  s.Get(R"(/api/runs/(\d+)/tree)", [&runs](const httplib::Request& req, httplib::Response& res) {
    auto* run = run_at(runs, req, res);
    if (!run) return;
    TreeQuery q;
    if (req.has_param("focus")) q.focus = req.get_param_value("focus");
    q.up = int_param(req, "up").value_or(q.up);
    q.down = int_param(req, "down").value_or(q.down);
    q.max_children = int_param(req, "max_children").value_or(q.max_children);
    q.max_nodes = int_param(req, "max_nodes").value_or(q.max_nodes);
    json t = run->tree(q);
    if (!q.focus.empty() && t.at("focus").is_null()) return send_error(res, 404, "no candidate " + q.focus);
    send_json(res, t);
  });
}

// A run's exports (CSV, JSON) and plots (SVG).
void install_downloads(httplib::Server& s, const Runs& runs) {
  s.Get(R"(/api/runs/(\d+)/export\.(csv|json))", [&runs](const httplib::Request& req, httplib::Response& res) {
    auto* run = run_at(runs, req, res);
    if (!run) return;
    const std::string ext = req.matches[2];
    // The file is named after the run; the name is run text, so only safe characters are kept.
    std::string file = run->name();
    for (char& ch : file)
      if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_' && ch != '.') ch = '_';
    res.set_header("Content-Disposition", "attachment; filename=\"" + file + "_candidates." + ext + "\"");
    if (ext == "csv") return res.set_content(run->export_csv(), "text/csv; charset=utf-8");
    send_json(res, run->export_json());
  });
  s.Get(R"(/api/runs/(\d+)/plots/([a-z_]+)\.svg)", [&runs](const httplib::Request& req, httplib::Response& res) {
    auto* run = run_at(runs, req, res);
    if (!run) return;
    auto svg = run_plot_svg(*run, std::string(req.matches[2]));
    if (!svg) return send_error(res, 404, "no plot " + std::string(req.matches[2]));
    res.set_content(*svg, "image/svg+xml");
  });
}

// Views across every run: knobs, workloads, overlaid plots.
void install_compare_routes(httplib::Server& s, const Runs& runs) {
  auto all_runs = [&runs] {
    std::vector<RunReader*> v;
    for (auto& r : runs) v.push_back(r.get());
    return v;
  };
  s.Get("/api/compare/knobs",
        [all_runs](const httplib::Request&, httplib::Response& res) { send_json(res, compare_knobs(all_runs())); });
  s.Get("/api/compare/workloads",
        [all_runs](const httplib::Request&, httplib::Response& res) { send_json(res, compare_workloads(all_runs())); });
  s.Get(R"(/api/compare/plots/([a-z_]+)\.svg)", [all_runs](const httplib::Request& req, httplib::Response& res) {
    // Scores of different workloads are not comparable: overlaid only when asked for knowingly.
    const json w = compare_workloads(all_runs());
    if (!w.at("same").get<bool>() && req.get_param_value("mixed") != "1")
      return send_error(res, 409, w.at("why").get<std::string>() + "; add ?mixed=1 to overlay them anyway");
    auto svg = compare_plot_svg(all_runs(), std::string(req.matches[1]));
    if (!svg) return send_error(res, 404, "no plot " + std::string(req.matches[1]));
    res.set_content(*svg, "image/svg+xml");
  });
}

}  // namespace

WebServer::WebServer(const std::vector<std::filesystem::path>& results, ServeOptions options)
    : options_(std::move(options)) {
  if (results.empty()) throw UserError("", "serve: give at least one results folder");
  for (const auto& r : results) runs_.push_back(std::make_unique<RunReader>(r));
  server_ = std::make_unique<httplib::Server>();
  // SO_REUSEADDR only: httplib's default also sets SO_REUSEPORT, which lets a second braid serve
  // share a port with the first (requests then alternate between the two runs).
  server_->set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, reinterpret_cast<const void*>(&yes), sizeof yes);
  });
  // Connections that never finish their request each hold a worker until the read timeout:
  // many workers and short timeouts keep the UI answering with a few such clients connected.
  server_->new_task_queue = [] { return new httplib::ThreadPool(kWorkers); };
  server_->set_read_timeout(std::chrono::seconds(5));
  server_->set_write_timeout(std::chrono::seconds(5));
  server_->set_keep_alive_timeout(2);
  server_->set_keep_alive_max_count(100);
  server_->set_payload_max_length(64 * 1024);  // the API takes no request bodies
  install_routes();
}

WebServer::~WebServer() = default;

int WebServer::bind() {
  int port = options_.port;
  if (port == 0) {
    port = server_->bind_to_any_port(options_.host);
  } else if (!server_->bind_to_port(options_.host, port)) {
    port = -1;
  }
  if (port < 0) {
    const int e = bind_error(options_.host, options_.port);
    const std::string where = options_.host + ":" + std::to_string(options_.port);
    if (e == EADDRINUSE)
      throw UserError("--port",
                      "port " + std::to_string(options_.port) + " on " + options_.host +
                          " is in use (another braid serve?): pick another with --port, or --port 0 for a free one");
    throw UserError("--host", "cannot listen on " + where + ": " + (e ? std::strerror(e) : "address not usable"));
  }
  return port;
}

void WebServer::listen() {
  {
    std::lock_guard<std::mutex> lock(state_);
    if (stopped_) return;
    listening_ = true;
  }
  server_->listen_after_bind();
}

void WebServer::stop() {
  {
    std::lock_guard<std::mutex> lock(state_);
    stopped_ = true;
    if (!listening_) return;  // listen() will not start
  }
  // listen() is starting: httplib stops only a running server, so wait for it to run (briefly:
  // a listen that failed never does).
  for (int i = 0; i < 500 && !server_->is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  server_->stop();
}

void WebServer::install_routes() {
  auto& s = *server_;
  install_guards(s);
  install_ui(s);
  install_run_views(s, runs_);
  install_candidate_routes(s, runs_);
  install_downloads(s, runs_);
  install_compare_routes(s, runs_);
}

}  // namespace braid::report
