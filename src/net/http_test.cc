#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/json.h"
#include "net/http_client.h"
#include "net/http_server.h"
#include "net/http_test_util.h"
#include "net/url_unescape.h"

namespace gpupool::net {
namespace {

// Found by fuzz/http_response_fuzzer.cc (regressions/http_response/four-digit-status-read-as-200):
// the status code was the first three characters after the space, so "2000" read as 200.
TEST(ParseHttpResponseTest, TheStatusCodeIsThreeDigitsWhole) {
  EXPECT_EQ(ParseHttpResponse("HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\n{}")->status,
            404);
  EXPECT_EQ(ParseHttpResponse("HTTP/1.1 204\r\n\r\n")->status, 204);
  for (const char* bad :
       {"HTTP/1.1 2000 OK\r\n\r\n", "HTTP/1.1 200OK\r\n\r\n", "HTTP/1.1 2001\r\n\r\n"}) {
    Result<HttpResponse> r = ParseHttpResponse(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(r.status().message().find("no status code"), std::string::npos)
        << r.status().ToString();
  }
}

TEST(ServerAddressTest, Parses) {
  auto u = ParseServerAddress("unix:/run/gpupool.sock");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->kind, ServerAddress::Kind::kUnix);
  EXPECT_EQ(u->path, "/run/gpupool.sock");
  EXPECT_EQ(ParseServerAddress("unix:///run/x.sock")->path, "/run/x.sock");
  auto t = ParseServerAddress("http://127.0.0.1:8421/");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->host, "127.0.0.1");
  EXPECT_EQ(t->port, 8421);
  EXPECT_EQ(ParseServerAddress("localhost:80")->port, 80);
  EXPECT_FALSE(ParseServerAddress("unix:relative.sock").ok());
  EXPECT_FALSE(ParseServerAddress("http://host:99999").ok());
  EXPECT_FALSE(ParseServerAddress("https://host:1").ok());
  EXPECT_NE(ParseServerAddress("nonsense").status().message().find("use unix:"), std::string::npos);
}

class HttpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("gpupool-net-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    HttpServerOptions opts;
    opts.unix_socket_path = (dir_ / "s.sock").string();
    opts.tcp_host = "127.0.0.1";
    opts.tcp_port = 0;
    opts.max_body_bytes = 1000;
    opts.max_body_hint = " (see max-body)";
    auto s = StartHttpServer(opts, [this](const HttpRequest& r) {
      ++calls_;
      HttpResponse resp;
      resp.headers["X-Gpupool-Next-Offset"] = "42";
      resp.body = r.method + " " + r.path + " q=" + r.Query("q") +
                  " auth=" + r.Header("authorization") + " body=" + r.body +
                  " peer=" + (r.peer ? std::to_string(r.peer->uid) : std::string("none"));
      return resp;
    });
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }
  std::filesystem::path dir_;
  std::unique_ptr<HttpServer> server_;
  std::atomic<int> calls_{0};
};

TEST_F(HttpTest, UnixSocketCarriesPeerCredentials) {
  HttpClient c(ParseServerAddress("unix:" + (dir_ / "s.sock").string()).value());
  auto r = c.Post("/v1/x?q=a%20b", "hello");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "POST /v1/x q=a b auth= body=hello peer=" + std::to_string(getuid()));
  EXPECT_EQ(r->headers["x-gpupool-next-offset"], "42");  // names come back lower-cased
}

TEST_F(HttpTest, TcpCarriesBearerTokenAndNoPeer) {
  ServerAddress a;
  a.kind = ServerAddress::Kind::kTcp;
  a.host = "127.0.0.1";
  a.port = server_->tcp_port();
  HttpClient c(a, "sekrit");
  auto r = c.Get("/v1/y");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->body, "GET /v1/y q= auth=Bearer sekrit body= peer=none");
}

TEST_F(HttpTest, OversizedBodyIs413AndNeverReachesTheHandler) {
  HttpClient c(ParseServerAddress("unix:" + (dir_ / "s.sock").string()).value());
  auto r = c.Post("/v1/x", std::string(5000, 'x'));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 413);
  EXPECT_NE(r->body.find("request body is larger than 1000 bytes (see max-body)"),
            std::string::npos)
      << r->body;
  EXPECT_EQ(calls_.load(), 0);
}

TEST_F(HttpTest, ABodyFramedTwoWaysIs400AndNeverReachesTheHandler) {
  // libmicrohttpd frames by the first Content-Length, a handler sees the last of each
  // header: the fuzzer's handler got 1 byte for a Content-Length of 2 (RFC 9112 6.3).
  const std::string sock = (dir_ / "s.sock").string();
  const std::string head = "POST /v1/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n";
  for (const char* framing :
       {"Content-Length: 1\r\nContent-Length: 2\r\n\r\nxy",
        "Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nxy\r\n0\r\n\r\n",
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "Transfer-Encoding: gzip\r\n\r\nxy"}) {
    const int fd = testing::SendRaw(sock, head + framing);
    ASSERT_GE(fd, 0);
    const std::string answer = testing::ReadAll(fd);
    EXPECT_EQ(answer.rfind("HTTP/1.1 400", 0), 0u) << framing << "\n" << answer;
    EXPECT_NE(answer.find("{\"error\":\"the request"), std::string::npos) << answer;
  }
  EXPECT_EQ(calls_.load(), 0);
  // Either framing alone reaches the handler.
  for (const char* framing :
       {"Content-Length: 2\r\n\r\nxy", "Transfer-Encoding: Chunked\r\n\r\n2\r\nxy\r\n0\r\n\r\n"}) {
    const std::string answer = testing::ReadAll(testing::SendRaw(sock, head + framing));
    EXPECT_NE(answer.find("body=xy"), std::string::npos) << framing << "\n" << answer;
  }
  EXPECT_EQ(calls_.load(), 2);
}

TEST(UnescapeUrlPartTest, DecodesButKeepsControlBytesAsSent) {
  auto decode = [](std::string s, bool* control) {
    *control = false;
    s.resize(UnescapeUrlPart(s.data(), control));
    return s;
  };
  bool control = false;
  EXPECT_EQ(decode("/v1/a%20b%2Fc%zz%4", &control), "/v1/a b/c%zz%4");
  EXPECT_FALSE(control);
  EXPECT_EQ(decode("/v1/jobs/1%00abc", &control), "/v1/jobs/1%00abc");
  EXPECT_TRUE(control);
  EXPECT_EQ(decode("x%0a%7Fy%41", &control), "x%0a%7FyA");
  EXPECT_TRUE(control);
}

TEST_F(HttpTest, AnEscapedControlByteInThePathOrQueryIs400NamingIt) {
  // GET /v1/jobs/1%00abc was served as /v1/jobs/1: the decoded NUL ended the C string.
  const std::string sock = (dir_ / "s.sock").string();
  std::string answer = testing::ReadAll(testing::SendGet(sock, "/v1/jobs/1%00abc"));
  EXPECT_EQ(answer.rfind("HTTP/1.1 400", 0), 0u) << answer;
  EXPECT_NE(answer.find("request path '/v1/jobs/1%00abc': a percent-encoded control byte"),
            std::string::npos)
      << answer;
  answer = testing::ReadAll(testing::SendGet(sock, "/v1/x?q=a%0Ab"));
  EXPECT_EQ(answer.rfind("HTTP/1.1 400", 0), 0u) << answer;
  EXPECT_NE(answer.find("request path '/v1/x', its query part 'a%0Ab'"), std::string::npos)
      << answer;
  EXPECT_EQ(calls_.load(), 0);
  // Other escapes are decoded as before.
  answer = testing::ReadAll(testing::SendGet(sock, "/v1/a%2Db?q=c%20d"));
  EXPECT_NE(answer.find("GET /v1/a-b q=c d"), std::string::npos) << answer;
}

TEST_F(HttpTest, SecondServerOnTheSameSocketIsRefused) {
  HttpServerOptions opts;
  opts.unix_socket_path = (dir_ / "s.sock").string();
  auto s = StartHttpServer(opts, [](const HttpRequest&) { return HttpResponse{}; });
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kAlreadyExists);
}

// A server that answers every connection with `answer` as raw bytes, to check how the
// client reads what other servers may send: chunked bodies, short or broken answers.
class RawServer {
 public:
  RawServer(const std::string& path, std::string answer, int delay_ms = 0)
      : path_(path), answer_(std::move(answer)), delay_ms_(delay_ms) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", path.c_str());
    ::unlink(path.c_str());
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(::listen(fd_, 8), 0);
    thread_ = std::thread([this] {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      char buf[4096];
      std::string got;
      while (got.find("\r\n\r\n") == std::string::npos) {
        const ssize_t n = ::read(c, buf, sizeof buf);
        if (n <= 0) break;
        got.append(buf, static_cast<size_t>(n));
      }
      request_ = got;
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
      (void)!::send(c, answer_.data(), answer_.size(), MSG_NOSIGNAL);
      ::close(c);
    });
  }
  ~RawServer() {
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  const std::string& request() const { return request_; }

 private:
  std::string path_;
  std::string answer_;
  int delay_ms_;
  int fd_ = -1;
  std::thread thread_;
  std::string request_;
};

TEST(HttpClientTest, ReadsChunkedAndSizedAnswersAndNamesBrokenOnes) {
  const std::string sock = ::testing::TempDir() + "/raw-" + std::to_string(::getpid()) + ".sock";
  HttpClient c(ParseServerAddress("unix:" + sock).value(), "tok");
  {
    RawServer s(sock,
                "HTTP/1.1 201 Created\r\nContent-Type: text/plain\r\nTransfer-Encoding: "
                "chunked\r\nX-Gpupool-Eof: 1\r\n\r\n5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\n\r\n");
    Result<HttpResponse> r = c.Post("/v1/x?a=1", "{}");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->status, 201);
    EXPECT_EQ(r->body, "hello, world");
    EXPECT_EQ(r->content_type, "text/plain");
    EXPECT_EQ(r->headers["x-gpupool-eof"], "1");  // names lower-cased
    EXPECT_EQ(s.request().rfind("POST /v1/x?a=1 HTTP/1.1\r\n", 0), 0u) << s.request();
    EXPECT_NE(s.request().find("Authorization: Bearer tok\r\n"), std::string::npos);
    EXPECT_NE(s.request().find("Content-Length: 2\r\n"), std::string::npos);
  }
  {
    RawServer s(sock, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcdef");
    Result<HttpResponse> r = c.Get("/");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->body, "abc");
  }
  for (const std::string& bad :
       {std::string("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"),  // cut short
        std::string("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"),
        std::string("SSH-2.0-OpenSSH\r\n\r\n"), std::string("HTTP/1.1 2x0\r\n\r\n"),
        std::string()}) {
    RawServer s(sock, bad);
    Result<HttpResponse> r = c.Get("/");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(r.status().message().find("cannot reach the gpupool server"), std::string::npos);
  }
  {
    RawServer s(sock, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", /*delay_ms=*/1500);
    Result<HttpResponse> r = c.Get("/", /*timeout_ms=*/200);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("no answer in time"), std::string::npos);
  }
  // Nothing of the caller's can add a header or a second request.
  EXPECT_EQ(c.Get("/x\r\nX-Evil: 1").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(
      HttpClient(ParseServerAddress("unix:" + sock).value(), "t\r\nX: 1").Get("/").status().code(),
      StatusCode::kInvalidArgument);
}

// A full listen backlog on a Unix socket (a server busy accepting, or a flood of others'
// connections) makes connect() fail with EAGAIN at once, where a blocking connect would
// wait for room: the client waits for room too, within its connect deadline.
TEST(HttpClientTest, AFullUnixListenBacklogIsWaitedForNotAnError) {
  const std::string sock =
      ::testing::TempDir() + "/backlog-" + std::to_string(::getpid()) + ".sock";
  const int lfd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock.c_str());
  ::unlink(sock.c_str());
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(lfd, 0), 0);
  std::vector<int> fillers;
  while (fillers.size() < 64) {
    const int f = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (::connect(f, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      ASSERT_EQ(errno, EAGAIN);
      ::close(f);
      break;
    }
    fillers.push_back(f);
  }
  ASSERT_FALSE(fillers.empty());
  const auto start = std::chrono::steady_clock::now();
  Result<HttpResponse> r = Status::Internal("not called");
  std::thread client(
      [&] { r = HttpClient(ParseServerAddress("unix:" + sock).value()).Get("/x", 5000); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the client meets a full backlog
  auto accept_one = [&] {
    pollfd p{lfd, POLLIN, 0};
    if (::poll(&p, 1, 5000) <= 0) return -1;
    return ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
  };
  for (size_t i = 0; i < fillers.size(); ++i) ::close(accept_one());  // room again
  const int c = accept_one();
  if (c < 0) {
    client.join();
    for (int f : fillers) ::close(f);
    ::close(lfd);
    FAIL() << "the client never connected: " << r.status().ToString();
  }
  std::string got;
  char buf[4096];
  while (got.find("\r\n\r\n") == std::string::npos) {
    const ssize_t n = ::read(c, buf, sizeof buf);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  const std::string answer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
  (void)!::send(c, answer.data(), answer.size(), MSG_NOSIGNAL);
  ::close(c);
  client.join();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->body, "ok");
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(200));
  EXPECT_EQ(got.rfind("GET /x HTTP/1.1", 0), 0U) << got;
  for (int f : fillers) ::close(f);
  ::close(lfd);
  ::unlink(sock.c_str());
}

TEST(HttpClientTest, NoServerIsUnavailable) {
  HttpClient c(ParseServerAddress("unix:/nonexistent/gpupool.sock").value());
  auto r = c.Get("/v1/jobs");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  // A socket that does not exist: no pool runs there, and how to start one.
  EXPECT_NE(r.status().message().find("the socket does not exist, so no gpupool server runs "
                                      "there: start a pool with `gpupool up`"),
            std::string::npos)
      << r.status().message();
}

// A daemon stopping cuts its long poll short: a signalled cancel fd ends the wait for an
// answer that would take 30 s, and every later call fails at once.
TEST(HttpClientTest, ACancelFdEndsAWaitInFlightAndLaterCalls) {
  const std::string sock = (std::filesystem::temp_directory_path() /
                            ("gpupool-cancel-" + std::to_string(::getpid()) + ".sock"))
                               .string();
  ::unlink(sock.c_str());
  // A server that takes connections and never answers (the kernel accepts them).
  const int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_un sun{};
  sun.sun_family = AF_UNIX;
  std::snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", sock.c_str());
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&sun), sizeof(sun)), 0);
  ASSERT_EQ(::listen(listener, 8), 0);
  int pipefd[2];
  ASSERT_EQ(::pipe2(pipefd, O_CLOEXEC), 0);
  HttpClient c(ParseServerAddress("unix:" + sock).value());
  c.set_cancel_fd(pipefd[0]);
  std::thread cancel([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    (void)!::write(pipefd[1], "x", 1);
  });
  const auto start = std::chrono::steady_clock::now();
  auto r = c.Get("/v1/agent/work", /*timeout_ms=*/30'000);
  const auto took = std::chrono::steady_clock::now() - start;
  cancel.join();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("cancelled"), std::string::npos) << r.status().message();
  EXPECT_LT(took, std::chrono::seconds(5));
  // Later calls, and copies of the client, end at once too.
  HttpClient copy = c;
  const auto again = std::chrono::steady_clock::now();
  EXPECT_FALSE(copy.Get("/", 30'000).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - again, std::chrono::seconds(5));
  ::close(pipefd[0]);
  ::close(pipefd[1]);
  ::close(listener);
  ::unlink(sock.c_str());
}

TEST_F(HttpTest, ConcurrentClients) {
  HttpClient c(ParseServerAddress("unix:" + (dir_ / "s.sock").string()).value());
  std::atomic<int> ok{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < 8; ++i) {
    ts.emplace_back([&] {
      for (int k = 0; k < 20; ++k) {
        if (auto r = c.Get("/v1/z"); r.ok() && r->status == 200) ++ok;
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(ok.load(), 160);
}

// Hundreds of agents each hold a long poll: more connections at once than libmicrohttpd's
// default limit (FD_SETSIZE - 4 per pool thread) must all be served, up to what the
// open-files limit allows.
TEST(HttpLimitsTest, MoreConnectionsAtOnceThanTheLibraryDefault) {
  constexpr int kThreads = 2;
  constexpr int kConnections = 2500;  // above 2 x 1,020
  struct rlimit rl {};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < 2 * kConnections + 300) {
    GTEST_SKIP() << "the open-files limit (" << rl.rlim_cur << ") is below "
                 << 2 * kConnections + 300 << ": raise it (ulimit -n) to run this test";
  }
  const auto dir =
      std::filesystem::temp_directory_path() / ("gpupool-netl-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "s.sock").string();
  HttpServerOptions opts;
  opts.unix_socket_path = path;
  opts.pool_threads = kThreads;
  // This test is about how many connections are held, not how soon a request must come:
  // on a loaded machine serving 2,500 of them took 10 s once, the default head timeout,
  // and the server rightly dropped the connections whose request it had not read by then.
  opts.head_timeout_ms = 120'000;
  opts.transfer_timeout_ms = 120'000;
  auto server = StartHttpServer(opts, [](const HttpRequest& r) {
    HttpResponse resp;
    resp.body = r.method + " " + r.path;
    return resp;
  });
  ASSERT_TRUE(server.ok()) << server.status().ToString();

  std::vector<int> fds;
  int refused = 0;
  const auto connect_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (int i = 0; i < kConnections; ++i) {
    // Non-blocking: a server that stopped accepting fills the listen backlog, and a
    // blocking connect would then wait forever.
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    ASSERT_GE(fd, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
    // EAGAIN: the backlog is full for now; a server that still accepts drains it soon.
    int rc = -1;
    while ((rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr))) != 0 &&
           errno == EAGAIN && std::chrono::steady_clock::now() < connect_deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (rc != 0) {
      ++refused;
      close(fd);
      continue;
    }
    fds.push_back(fd);
  }
  EXPECT_EQ(refused, 0);
  // Every connection is open before any request is sent: the server holds them all.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const std::string req = "GET /many HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  for (int fd : fds) {
    // A connection the server dropped may refuse the write; that is counted below.
    (void)!write(fd, req.data(), req.size());
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  int answered = 0;
  for (int fd : fds) {
    std::string got;
    char buf[4096];
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd p{fd, POLLIN, 0};
      if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      ssize_t n = read(fd, buf, sizeof(buf));
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
    if (got.rfind("HTTP/1.1 200", 0) == 0 && got.find("GET /many") != std::string::npos) {
      ++answered;
    }
    close(fd);
  }
  EXPECT_EQ(answered, kConnections);
  server->reset();
  std::filesystem::remove_all(dir);
}

// A server with one pool thread whose "/block" requests wait until released: they must
// run on threads of their own (may_block), or the one pool thread would be stuck.
class BlockingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("gpupool-netb-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    HttpServerOptions opts;
    opts.unix_socket_path = (dir_ / "s.sock").string();
    opts.pool_threads = 1;
    opts.may_block = [](const HttpRequest& r) { return r.path == "/block"; };
    auto s = StartHttpServer(opts, [this](const HttpRequest& r) {
      HttpResponse resp;
      if (r.path == "/block") {
        std::unique_lock lock(mu_);
        ++waiting_;
        cv_.notify_all();
        cv_.wait(lock, [this] { return released_; });
        lock.unlock();
        if (r.Query("n") == "poll") std::this_thread::sleep_for(std::chrono::milliseconds(10));
        resp.body = "unblocked " + r.Query("n");
      } else {
        resp.body = "quick";
      }
      return resp;
    });
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
  }
  void TearDown() override {
    Release();
    server_.reset();
    std::filesystem::remove_all(dir_);
  }
  void Release() {
    std::lock_guard lock(mu_);
    released_ = true;
    cv_.notify_all();
  }
  bool WaitForWaiting(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return waiting_ >= n; });
  }
  HttpClient Client() {
    return HttpClient(ParseServerAddress("unix:" + (dir_ / "s.sock").string()).value());
  }

  std::filesystem::path dir_;
  std::unique_ptr<HttpServer> server_;
  std::mutex mu_;
  std::condition_variable cv_;
  int waiting_ = 0;
  bool released_ = false;
};

TEST_F(BlockingTest, BlockingRequestsHoldNoPoolThread) {
  std::vector<std::thread> ts;
  std::vector<std::string> bodies(3);
  for (int i = 0; i < 3; ++i) {
    ts.emplace_back([&, i] {
      auto r = Client().Get("/block?n=" + std::to_string(i));
      if (r.ok() && r->status == 200) bodies[static_cast<size_t>(i)] = r->body;
    });
  }
  ASSERT_TRUE(WaitForWaiting(3));
  // Three handlers are blocked; the single pool thread still answers.
  for (int k = 0; k < 5; ++k) {
    auto q = Client().Get("/quick");
    ASSERT_TRUE(q.ok()) << q.status().ToString();
    EXPECT_EQ(q->body, "quick");
  }
  Release();
  for (auto& t : ts) t.join();
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(bodies[static_cast<size_t>(i)], "unblocked " + std::to_string(i));
}

// A client that sends blocking requests back to back while the server stops (an agent's
// long polls): those that arrive during the stop are answered 503 at once instead of
// being suspended, which would make libmicrohttpd abort the process when stopped.
TEST_F(BlockingTest, BlockingRequestsArrivingDuringStopAreRefusedNotSuspended) {
  Release();  // every /block answers at once
  std::atomic<bool> done{false};
  std::atomic<int> answered{0};
  std::atomic<int> refused{0};
  std::vector<std::thread> pollers;
  for (int i = 0; i < 4; ++i) {
    pollers.emplace_back([&] {
      while (!done) {
        auto r = Client().Get("/block?n=poll");  // 10 ms each: some are always suspended
        if (!r.ok()) continue;                   // the socket is gone
        if (r->status == 200) ++answered;
        if (r->status == 503) ++refused;
      }
    });
  }
  while (answered < 20) std::this_thread::yield();
  server_->Stop();  // aborted here before the fix, when a poll came in during the wait
  done = true;
  for (auto& t : pollers) t.join();
  EXPECT_GE(answered.load(), 20);
}

TEST_F(BlockingTest, StopWaitsForABlockingHandlerAndItsAnswerGoesOut) {
  std::string body;
  std::thread client([&] {
    auto r = Client().Get("/block?n=7");
    if (r.ok()) body = r->body;
  });
  ASSERT_TRUE(WaitForWaiting(1));
  std::thread releaser([this] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    Release();
  });
  const auto t0 = std::chrono::steady_clock::now();
  server_->Stop();
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(150));
  client.join();
  releaser.join();
  EXPECT_EQ(body, "unblocked 7");
}

TEST(ServerAddressListTest, ParsesListsAndNamesTheBadElement) {
  auto l = ParseServerAddressList("unix:/run/a.sock,http://c2:8421");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  ASSERT_EQ(l->size(), 2u);
  EXPECT_EQ((*l)[0].path, "/run/a.sock");
  EXPECT_EQ((*l)[1].host, "c2");
  EXPECT_EQ(ServerAddressListToString(*l), "unix:/run/a.sock,http://c2:8421");
  l = ParseServerAddressList(" http://c1:1 ,  c2:2,http://c3:3/ ");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(ServerAddressListToString(*l), "http://c1:1,http://c2:2,http://c3:3");
  EXPECT_EQ(ParseServerAddressList("unix:/one.sock")->size(), 1u);
  // Empty elements, an empty list, a bad element: each named, with the accepted forms.
  for (const char* text : {"http://c1:1,,http://c3:3", "http://c1:1,", "", " "}) {
    auto bad = ParseServerAddressList(text);
    ASSERT_FALSE(bad.ok()) << text;
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(bad.status().message().find("is empty"), std::string::npos) << bad.status().message();
    EXPECT_NE(bad.status().message().find("http://HOST:PORT"), std::string::npos);
  }
  auto bad = ParseServerAddressList("http://c1:1, nonsense ,http://c3:3");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("server address 'nonsense'"), std::string::npos)
      << bad.status().message();
  EXPECT_NE(bad.status().message().find("use unix:"), std::string::npos);
}

// Controllers of one pool, one leading: each test server answers with what `answer`
// says and counts its requests.
class FailoverTest : public ::testing::Test {
 protected:
  struct Controller {
    std::unique_ptr<HttpServer> server;
    ServerAddress address;
    std::atomic<int> requests{0};
    std::function<HttpResponse()> answer;
  };

  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("gpupool-netf-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    Release();
    for (auto& c : controllers_) c->server.reset();
    std::filesystem::remove_all(dir_);
  }

  // A server on DIR/NAME.sock answering `answer()`; tcp: on 127.0.0.1 instead.
  Controller* Start(const std::string& name, std::function<HttpResponse()> answer,
                    bool tcp = false) {
    auto c = std::make_unique<Controller>();
    c->answer = std::move(answer);
    HttpServerOptions opts;
    if (tcp) {
      opts.tcp_host = "127.0.0.1";
    } else {
      opts.unix_socket_path = Path(name);
    }
    Controller* raw = c.get();
    auto s = StartHttpServer(opts, [raw](const HttpRequest&) {
      ++raw->requests;
      return raw->answer();
    });
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (!s.ok()) return nullptr;
    c->server = std::move(s).value();
    c->address =
        tcp ? ParseServerAddress("http://127.0.0.1:" + std::to_string(c->server->tcp_port()))
                  .value()
            : ParseServerAddress("unix:" + Path(name)).value();
    controllers_.push_back(std::move(c));
    return raw;
  }
  std::string Path(const std::string& name) const { return (dir_ / (name + ".sock")).string(); }
  ServerAddress Dead(const std::string& name) const {
    return ParseServerAddress("unix:" + Path(name)).value();
  }

  static HttpResponse Ok(const std::string& body) {
    HttpResponse r;
    r.body = body;
    return r;
  }
  // What a standby answers: 503 naming the leader ("" while none is known).
  static HttpResponse Standby(const std::string& leader) {
    HttpResponse r;
    r.status = 503;
    r.body = DumpJson(Json{{"error", "this controller is a standby; the leader is " + leader},
                           {"leader", leader}});
    return r;
  }

  // Handlers that wait in Block() until Release().
  HttpResponse Block() {
    std::unique_lock lock(mu_);
    ++blocked_;
    cv_.notify_all();
    cv_.wait(lock, [this] { return released_; });
    return Ok("late");
  }
  void Release() {
    std::lock_guard lock(mu_);
    released_ = true;
    cv_.notify_all();
  }
  bool WaitForBlocked(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return blocked_ >= n; });
  }

  std::filesystem::path dir_;
  std::vector<std::unique_ptr<Controller>> controllers_;
  std::mutex mu_;
  std::condition_variable cv_;
  int blocked_ = 0;
  bool released_ = false;
};

TEST_F(FailoverTest, DeadFirstAddressMovesToTheNextAndStartsThereNextTime) {
  Controller* b = Start("b", [] { return Ok("from b"); });
  ASSERT_NE(b, nullptr);
  HttpClient c(std::vector<ServerAddress>{Dead("a"), b->address});
  EXPECT_EQ(c.address().ToString(), Dead("a").ToString());
  auto r = c.Get("/v1/x");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->body, "from b");
  EXPECT_EQ(c.address().ToString(), b->address.ToString());
  ASSERT_EQ(c.addresses().size(), 2u);
  // A server appears at the first address: the next call still starts at b.
  Controller* a = Start("a", [] { return Ok("from a"); });
  ASSERT_NE(a, nullptr);
  r = c.Get("/v1/x");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->body, "from b");
  EXPECT_EQ(a->requests.load(), 0);
  EXPECT_EQ(b->requests.load(), 2);
  // A copy starts where the original is.
  HttpClient copy = c;
  EXPECT_EQ(copy.address().ToString(), b->address.ToString());
}

TEST_F(FailoverTest, StandbyNamingTheLeaderIsFollowedEvenOutsideTheList) {
  Controller* leader = Start(
      "leader", [] { return Ok("from the leader"); }, /*tcp=*/true);
  ASSERT_NE(leader, nullptr);
  const std::string leader_text = leader->address.ToString();
  Controller* standby = Start("standby", [leader_text] { return Standby(leader_text); });
  ASSERT_NE(standby, nullptr);
  HttpClient c(std::vector<ServerAddress>{standby->address}, "tok");
  auto r = c.Post("/v1/jobs", "{}");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "from the leader");
  EXPECT_EQ(c.address().ToString(), leader_text);
  // The next call goes to the leader straight away.
  ASSERT_TRUE(c.Get("/v1/jobs").ok());
  EXPECT_EQ(standby->requests.load(), 1);
  EXPECT_EQ(leader->requests.load(), 2);
}

TEST_F(FailoverTest, StandbyThatKnowsNoLeaderMovesToTheNextListAddress) {
  Controller* a = Start("a", [] { return Standby(""); });
  Controller* b = Start("b", [] { return Ok("from b"); });
  ASSERT_TRUE(a != nullptr && b != nullptr);
  HttpClient c(std::vector<ServerAddress>{a->address, b->address});
  auto r = c.Get("/v1/x");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->body, "from b");
  EXPECT_EQ(a->requests.load(), 1);
  EXPECT_EQ(c.address().ToString(), b->address.ToString());
}

TEST_F(FailoverTest, StandbysNamingEachOtherEndInAnErrorAfterTheHopLimit) {
  std::string a_text;
  std::string b_text;
  Controller* a = Start("a", [&b_text] { return Standby(b_text); });
  Controller* b = Start("b", [&a_text] { return Standby(a_text); });
  ASSERT_TRUE(a != nullptr && b != nullptr);
  a_text = a->address.ToString();
  b_text = b->address.ToString();
  HttpClient c(std::vector<ServerAddress>{a->address, b->address});
  auto r = c.Get("/v1/x");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("after 3 leaders were followed"), std::string::npos)
      << r.status().message();
  EXPECT_LE(a->requests.load() + b->requests.load(), 5);
  // Nothing answered as a leader: the next call starts where this one did.
  EXPECT_EQ(c.address().ToString(), a_text);
}

TEST_F(FailoverTest, AllDeadIsUnavailableNamingEachAddress) {
  const ServerAddress tcp = ParseServerAddress("http://127.0.0.1:1").value();  // refused
  HttpClient c(std::vector<ServerAddress>{Dead("a"), Dead("b"), tcp});
  auto r = c.Get("/v1/x");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  const std::string& m = r.status().message();
  EXPECT_EQ(m.rfind("cannot reach the gpupool server: tried ", 0), 0u) << m;
  for (const ServerAddress& a : {Dead("a"), Dead("b"), tcp}) {
    EXPECT_NE(m.find(a.ToString() + " (cannot connect: "), std::string::npos) << m;
  }
  EXPECT_NE(m.find("is `gpupool up` running?"), std::string::npos) << m;
}

TEST_F(FailoverTest, LeadersOwn503IsAnAnswerNotAFailover) {
  Controller* a = Start("a", [] {
    HttpResponse r;
    r.status = 503;
    r.body = R"({"error": "node n1 of task 0 is down"})";
    return r;
  });
  Controller* b = Start("b", [] { return Ok("from b"); });
  ASSERT_TRUE(a != nullptr && b != nullptr);
  HttpClient c(std::vector<ServerAddress>{a->address, b->address});
  auto r = c.Post("/v1/jobs/1/exec", "{}");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(b->requests.load(), 0);
}

// The request may have been processed: a failure after sending is never re-sent.
TEST_F(FailoverTest, NoAnswerInTimeAfterSendingIsNotRetriedElsewhereButTheNextCallMovesOn) {
  Controller* a = Start("a", [this] { return Block(); });
  Controller* b = Start("b", [] { return Ok("from b"); });
  ASSERT_TRUE(a != nullptr && b != nullptr);
  HttpClient c(std::vector<ServerAddress>{a->address, b->address});
  auto r = c.Post("/v1/jobs", "{}", /*timeout_ms=*/300);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("no answer in time"), std::string::npos)
      << r.status().message();
  ASSERT_TRUE(WaitForBlocked(1));  // a has the request
  EXPECT_EQ(b->requests.load(), 0);
  // The caller's retry goes to b: a controller that takes requests and answers none (a
  // frozen leader) must not hold the client.
  EXPECT_EQ(c.address().ToString(), b->address.ToString());
  auto again = c.Post("/v1/jobs", "{}", /*timeout_ms=*/3000);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->body, "from b");
  EXPECT_EQ(b->requests.load(), 1);
}

}  // namespace
}  // namespace gpupool::net
