#include "braid/report/web_server.hpp"

#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "braid/util/error.hpp"
#include "braid/util/json.hpp"
#include "report_support.hpp"

namespace braid::report {
namespace {

class WebServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    a_ = new test::SyntheticRun(test::make_synthetic_run(test::test_dir("serve_a"), 300));
    b_ = new test::SyntheticRun(test::make_synthetic_run(test::test_dir("serve_b"), 100, 2, 1000, false));
    server_ = new WebServer({a_->dir, b_->dir}, {"127.0.0.1", 0});
    port_ = server_->bind();
    thread_ = new std::thread([] { server_->listen(); });
  }
  static void TearDownTestSuite() {
    server_->stop();
    thread_->join();
    delete thread_;
    delete server_;
    std::filesystem::remove_all(a_->dir);
    std::filesystem::remove_all(b_->dir);
    delete a_;
    delete b_;
  }
  static httplib::Result get(const std::string& path) {
    httplib::Client c("127.0.0.1", port_);
    return c.Get(path.c_str());
  }
  static json get_json(const std::string& path, int expect = 200) {
    auto res = get(path);
    EXPECT_TRUE(res) << path;
    if (!res) return nullptr;
    EXPECT_EQ(res->status, expect) << path << ": " << res->body;
    EXPECT_EQ(res->get_header_value("Content-Type"), "application/json; charset=utf-8");
    return json::parse(res->body);
  }
  static test::SyntheticRun* a_;
  static test::SyntheticRun* b_;
  static WebServer* server_;
  static std::thread* thread_;
  static int port_;
};
test::SyntheticRun* WebServerTest::a_ = nullptr;
test::SyntheticRun* WebServerTest::b_ = nullptr;
WebServer* WebServerTest::server_ = nullptr;
std::thread* WebServerTest::thread_ = nullptr;
int WebServerTest::port_ = 0;

TEST_F(WebServerTest, ServesTheEmbeddedUiWithAStrictPolicy) {
  auto res = get("/");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_NE(res->body.find("<script type=\"module\" src=\"/app.js\">"), std::string::npos);
  EXPECT_NE(res->get_header_value("Content-Security-Policy").find("script-src 'self'"), std::string::npos);
  EXPECT_EQ(res->get_header_value("X-Content-Type-Options"), "nosniff");
  auto js = get("/app.js");
  ASSERT_TRUE(js);
  EXPECT_EQ(js->get_header_value("Content-Type"), "text/javascript; charset=utf-8");
  EXPECT_NE(js->body.find("replaceChildren"), std::string::npos);
  EXPECT_EQ(js->body.find("innerHTML"), std::string::npos);
  auto css = get("/app.css");
  ASSERT_TRUE(css);
  EXPECT_EQ(css->status, 200);
}

TEST_F(WebServerTest, JsonEndpointsAnswer) {
  json runs = get_json("/api/runs");
  ASSERT_EQ(runs["runs"].size(), 2u);
  EXPECT_EQ(runs["runs"][0]["count"], 300);
  EXPECT_EQ(runs["runs"][1]["count"], 100);
  EXPECT_EQ(get_json("/api/runs/0/overview")["best"]["id"], a_->best_id);
  json page = get_json("/api/runs/0/candidates?order=generation&offset=10&limit=5&island=1");
  EXPECT_EQ(page["items"].size(), 5u);
  for (auto& c : page["items"]) EXPECT_EQ(c["island"], 1);
  json cand = get_json("/api/runs/0/candidates/" + a_->hostile_id);
  EXPECT_EQ(cand["record"]["code"], test::kHostileCode);  // JSON carries the exact text; the UI escapes
  EXPECT_EQ(cand["record"]["text_feedback"], test::kHostileFeedback);
  json tree = get_json("/api/runs/0/tree?focus=" + a_->best_id + "&up=3&down=1&max_children=4");
  EXPECT_EQ(tree["focus"], a_->best_id);
  EXPECT_GT(get_json("/api/runs/0/children/" + a_->seed_id)["total"].get<int>(), 0);
  EXPECT_EQ(get_json("/api/runs/1/islands")["islands"].size(), 2u);
  EXPECT_GT(get_json("/api/runs/0/archive?limit=3")["total"].get<int>(), 0);
  EXPECT_EQ(get_json("/api/runs/0/meta")["total"], 2);
  EXPECT_EQ(get_json("/api/runs/0/knobs")["knobs"].size(), 2u);
  json knobs = get_json("/api/compare/knobs");
  EXPECT_EQ(knobs["runs"].size(), 2u);
  EXPECT_EQ(knobs["knobs"][0]["values"].size(), 2u);
  EXPECT_TRUE(get_json("/api")["endpoints"].is_array());
}

TEST_F(WebServerTest, PlotsAreSvg) {
  // The two synthetic runs start from different seed programs: their overlay is asked for knowingly.
  for (std::string p : {"/api/runs/0/plots/best_by_eval.svg", "/api/runs/1/plots/failures.svg", "/api/compare/plots/best_by_time.svg?mixed=1"}) {
    auto res = get(p);
    ASSERT_TRUE(res) << p;
    EXPECT_EQ(res->status, 200) << p;
    EXPECT_EQ(res->get_header_value("Content-Type"), "image/svg+xml");
    EXPECT_EQ(res->body.rfind("<svg", 0), 0u);
  }
}

TEST_F(WebServerTest, BadRequestsAreJsonErrors) {
  EXPECT_TRUE(get_json("/api/runs/7/overview", 404).contains("error"));
  EXPECT_TRUE(get_json("/api/runs/0/candidates/ffffffffffffffff", 404).contains("error"));
  EXPECT_TRUE(get_json("/api/runs/0/candidates?order=drop", 400).contains("error"));
  EXPECT_TRUE(get_json("/api/runs/0/tree?focus=nothere", 404).contains("error"));
  EXPECT_TRUE(get_json("/api/runs/0/plots/nothing.svg", 404).contains("error"));
  EXPECT_TRUE(get_json("/api/compare/plots/best_by_time.svg", 409).contains("error"));  // different seed programs
  EXPECT_TRUE(get_json("/etc/passwd", 404).contains("error"));
  EXPECT_TRUE(get_json("/api/runs/0/candidates/..%2F..%2Fetc", 404).contains("error"));
}

TEST_F(WebServerTest, ServesManyRequestsAtOnce) {
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int t = 0; t < 6; ++t)
    clients.emplace_back([&] {
      httplib::Client c("127.0.0.1", port_);
      for (int i = 0; i < 10; ++i) {
        auto res = c.Get("/api/runs/0/status");
        if (res && res->status == 200) ++ok;
      }
    });
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok.load(), 60);
}

// A port another braid serve (or anything) listens on is refused with a clear error, even when
// the other listener allows port sharing (SO_REUSEPORT): two runs must not answer in turn.
TEST_F(WebServerTest, RefusesAPortInUse) {
  WebServer second({a_->dir}, {"127.0.0.1", port_});
  try {
    second.bind();
    ADD_FAILURE() << "bound port " << port_ << " a second time";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("in use"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::to_string(port_)), std::string::npos) << e.what();
  }
  int sharing = ::socket(AF_INET, SOCK_STREAM, 0);
  int yes = 1;
  ::setsockopt(sharing, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  ::setsockopt(sharing, SOL_SOCKET, SO_REUSEPORT, &yes, sizeof yes);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(sharing, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(sharing, 4), 0);
  socklen_t len = sizeof addr;
  ::getsockname(sharing, reinterpret_cast<sockaddr*>(&addr), &len);
  WebServer third({a_->dir}, {"127.0.0.1", ntohs(addr.sin_port)});
  EXPECT_THROW(third.bind(), UserError);
  ::close(sharing);
}

// Clients that open a connection and never finish their request headers do not stop the
// server from answering others.
TEST_F(WebServerTest, SlowHeaderClientsDoNotBlockOthers) {
  std::vector<int> slow;
  for (int i = 0; i < 16; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<std::uint16_t>(port_));
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    const char partial[] = "GET /api/runs HTTP/1.1\r\nHost: x\r\n";  // no blank line: never ends
    ASSERT_GT(::send(fd, partial, sizeof partial - 1, 0), 0);
    slow.push_back(fd);
  }
  // One more header line every 0.5 s keeps each slow request alive past any read timeout.
  std::atomic<bool> done{false};
  std::thread dribble([&] {
    while (!done) {
      for (int fd : slow) ::send(fd, "X-Slow: 1\r\n", 11, MSG_NOSIGNAL);
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  });
  httplib::Client c("127.0.0.1", port_);
  c.set_read_timeout(std::chrono::seconds(20));
  auto res = c.Get("/api/runs");
  done = true;
  dribble.join();
  for (int fd : slow) ::close(fd);
  ASSERT_TRUE(res) << "no answer with 16 slow clients connected";
  EXPECT_EQ(res->status, 200);
}

TEST(WebServer, RefusesAFolderThatIsNotARun) {
  auto dir = test::test_dir("serve_bad");
  std::filesystem::create_directories(dir);
  EXPECT_THROW((WebServer{{dir}, {}}), UserError);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace braid::report
