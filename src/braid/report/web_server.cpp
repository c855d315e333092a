#include "braid/report/web_server.hpp"

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
               "GET /api/runs/{r}/candidates?order=score|generation|generation_asc|knob:NAME|metric:NAME&dir=asc|desc&island=&failure=&offset=&limit=",
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

}  // namespace

WebServer::WebServer(const std::vector<std::filesystem::path>& results, ServeOptions options) : options_(std::move(options)) {
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
      throw UserError("--port", "port " + std::to_string(options_.port) + " on " + options_.host +
                                    " is in use (another braid serve?): pick another with --port, or --port 0 for a free one");
    throw UserError("--host", "cannot listen on " + where + ": " + (e ? std::strerror(e) : "address not usable"));
  }
  return port;
}

void WebServer::listen() { server_->listen_after_bind(); }

void WebServer::stop() { server_->stop(); }

void WebServer::install_routes() {
  auto& s = *server_;
  // Every handler runs under one guard: a failing query answers 500 with its message instead
  // of dropping the connection.
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

  auto run_at = [this](const httplib::Request& req, httplib::Response& res) -> RunReader* {
    std::size_t r = 0;
    const std::string m = req.matches[1];
    auto [p, ec] = std::from_chars(m.data(), m.data() + m.size(), r);
    if (ec != std::errc() || r >= runs_.size()) {
      send_error(res, 404, "no run " + m);
      return nullptr;
    }
    return runs_[r].get();
  };

  for (const char* path : {"/", "/index.html", "/app.js", "/dom.js", "/charts.js", "/app.css"}) {
    s.Get(path, [](const httplib::Request& req, httplib::Response& res) {
      auto asset = web_asset(req.path);
      res.set_content(std::string(asset->body), std::string(asset->content_type).c_str());
    });
  }
  // Browsers ask for it on every page; an empty answer keeps their consoles clean.
  s.Get("/favicon.ico", [](const httplib::Request&, httplib::Response& res) { res.status = 204; });
  s.Get("/api", [](const httplib::Request&, httplib::Response& res) { send_json(res, endpoint_index()); });
  s.Get("/api/runs", [this](const httplib::Request&, httplib::Response& res) {
    json out = json::array();
    for (std::size_t i = 0; i < runs_.size(); ++i) {
      json st = runs_[i]->status();
      st["index"] = i;
      st["path"] = std::filesystem::absolute(runs_[i]->dir()).lexically_normal().string();
      out.push_back(st);
    }
    send_json(res, {{"runs", out}});
  });
  s.Get(R"(/api/runs/(\d+)/status)", [run_at](const httplib::Request& req, httplib::Response& res) {
    if (auto* run = run_at(req, res)) send_json(res, run->status());
  });
  s.Get(R"(/api/runs/(\d+)/overview)", [run_at](const httplib::Request& req, httplib::Response& res) {
    if (auto* run = run_at(req, res)) send_json(res, run->overview());
  });
  s.Get(R"(/api/runs/(\d+)/candidates)", [run_at](const httplib::Request& req, httplib::Response& res) {
    auto* run = run_at(req, res);
    if (!run) return;
    CandidatePageQuery q;
    if (req.has_param("order")) q.order = req.get_param_value("order");
    const bool by_column = q.order.rfind("knob:", 0) == 0 || q.order.rfind("metric:", 0) == 0;
    if (q.order != "score" && q.order != "generation" && q.order != "generation_asc" && !by_column)
      return send_error(res, 400, "order must be score, generation, generation_asc, knob:NAME or metric:NAME");
    if (req.has_param("dir")) {
      const std::string dir = req.get_param_value("dir");
      if (dir != "asc" && dir != "desc") return send_error(res, 400, "dir must be asc or desc");
      q.ascending = dir == "asc";
    }
    q.island = int_param(req, "island");
    if (req.has_param("failure") && !req.get_param_value("failure").empty()) q.failure = req.get_param_value("failure");
    q.offset = int_param(req, "offset").value_or(0);
    q.limit = int_param(req, "limit").value_or(50);
    send_json(res, run->candidates(q));
  });
  s.Get(R"(/api/runs/(\d+)/candidates/([0-9A-Za-z_.-]{1,128}))", [run_at](const httplib::Request& req, httplib::Response& res) {
    auto* run = run_at(req, res);
    if (!run) return;
    auto c = run->candidate(req.matches[2]);
    if (!c) return send_error(res, 404, "no candidate " + std::string(req.matches[2]));
    send_json(res, *c);
  });
  s.Get(R"(/api/runs/(\d+)/tree)", [run_at](const httplib::Request& req, httplib::Response& res) {
    auto* run = run_at(req, res);
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
  s.Get(R"(/api/runs/(\d+)/children/([0-9A-Za-z_.-]{1,128}))", [run_at](const httplib::Request& req, httplib::Response& res) {
    if (auto* run = run_at(req, res))
      send_json(res, run->children(req.matches[2], int_param(req, "offset").value_or(0), int_param(req, "limit").value_or(50)));
  });
  s.Get(R"(/api/runs/(\d+)/islands)", [run_at](const httplib::Request& req, httplib::Response& res) {
    if (auto* run = run_at(req, res)) send_json(res, run->islands());
  });
  s.Get(R"(/api/runs/(\d+)/archive)", [run_at](const httplib::Request& req, httplib::Response& res) {
    if (auto* run = run_at(req, res))
      send_json(res, run->archive(int_param(req, "offset").value_or(0), int_param(req, "limit").value_or(50)));
  });
  s.Get(R"(/api/runs/(\d+)/meta)", [run_at](const httplib::Request& req, httplib::Response& res) {
    if (auto* run = run_at(req, res)) send_json(res, run->meta());
  });
  s.Get(R"(/api/runs/(\d+)/knobs)", [run_at](const httplib::Request& req, httplib::Response& res) {
    if (auto* run = run_at(req, res)) send_json(res, run->best_knobs());
  });
  s.Get(R"(/api/runs/(\d+)/points)", [run_at](const httplib::Request& req, httplib::Response& res) {
    if (auto* run = run_at(req, res)) send_json(res, run->points());
  });
  s.Get(R"(/api/runs/(\d+)/state)", [run_at](const httplib::Request& req, httplib::Response& res) {
    if (auto* run = run_at(req, res)) send_json(res, run->state());
  });
  s.Get(R"(/api/runs/(\d+)/export\.(csv|json))", [run_at](const httplib::Request& req, httplib::Response& res) {
    auto* run = run_at(req, res);
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
  s.Get(R"(/api/runs/(\d+)/plots/([a-z_]+)\.svg)", [run_at](const httplib::Request& req, httplib::Response& res) {
    auto* run = run_at(req, res);
    if (!run) return;
    auto svg = run_plot_svg(*run, std::string(req.matches[2]));
    if (!svg) return send_error(res, 404, "no plot " + std::string(req.matches[2]));
    res.set_content(*svg, "image/svg+xml");
  });
  auto all_runs = [this] {
    std::vector<RunReader*> v;
    for (auto& r : runs_) v.push_back(r.get());
    return v;
  };
  s.Get("/api/compare/knobs", [all_runs](const httplib::Request&, httplib::Response& res) { send_json(res, compare_knobs(all_runs())); });
  s.Get("/api/compare/workloads", [all_runs](const httplib::Request&, httplib::Response& res) { send_json(res, compare_workloads(all_runs())); });
  s.Get(R"(/api/compare/plots/([a-z_]+)\.svg)", [all_runs](const httplib::Request& req, httplib::Response& res) {
    // Scores of different workloads are not comparable: overlaid only when asked for knowingly.
    const json w = compare_workloads(all_runs());
    if (!w.at("same").get<bool>() && req.get_param_value("mixed") != "1")
      return send_error(res, 409, w.at("why").get<std::string>() + "; add ?mixed=1 to overlay them anyway");
    auto svg = compare_plot_svg(all_runs(), std::string(req.matches[1]));
    if (!svg) return send_error(res, 404, "no plot " + std::string(req.matches[1]));
    res.set_content(*svg, "image/svg+xml");
  });
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (res.body.empty()) send_error(res, res.status, "not found: " + req.path);
  });
}

}  // namespace braid::report
