// The HTTP server against connection exhaustion (docs/security.md, "Connection
// exhaustion"), over real sockets: deadlines that trickled bytes do not move, caps per uid
// that close a flood's oldest connections while other uids are answered, 503 past a
// uid's active cap, and the share kept for agents. The other uid is a child process that
// switches to nobody (65534) before it connects: those parts need root and are skipped
// otherwise.
#include <arpa/inet.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "net/http_client.h"
#include "net/http_server.h"
#include "net/local_peer.h"

// GCC 12 takes the copies of an HttpServerOptions whose reserved_uids was assigned for
// reads of an uninitialized vector (a false positive of -Wmaybe-uninitialized, seen
// once the options grew).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace gpupool::net {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uid_t kNobody = 65534;

struct Target {
  std::string unix_path;  // or
  int tcp_port = 0;
};

// A blocking connection to the server; -1 on failure.
int Connect(const Target& t) {
  if (!t.unix_path.empty()) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", t.unix_path.c_str());
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd);
      return -1;
    }
    return fd;
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(t.tcp_port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// What the server sends on `fd` until it closes it or `deadline`; *closed says which.
std::string ReadUntilClosed(int fd, Clock::time_point deadline, bool* closed) {
  std::string got;
  *closed = false;
  char buf[4096];
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) return got;
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) {
      *closed = true;
      return got;
    }
    got.append(buf, static_cast<size_t>(n));
  }
}

// Waits until the server has closed `want` of `fds` (or `deadline`), then a moment more
// to see that it closes no more; returns how many it closed, and the first one's answer.
size_t WaitForClosed(const std::vector<int>& fds, size_t want, Clock::time_point deadline,
                     std::string* first_answer) {
  std::vector<bool> closed(fds.size(), false);
  size_t n = 0;
  auto sweep = [&](Clock::time_point until) {
    while (Clock::now() < until) {
      std::vector<pollfd> p;
      std::vector<size_t> which;
      for (size_t i = 0; i < fds.size(); ++i) {
        if (!closed[i]) {
          p.push_back({fds[i], POLLIN, 0});
          which.push_back(i);
        }
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
      if (p.empty() || left <= 0 || ::poll(p.data(), p.size(), static_cast<int>(left)) <= 0) return;
      for (size_t k = 0; k < p.size(); ++k) {
        if (p[k].revents == 0) continue;
        bool eof = false;
        std::string got;
        char buf[4096];
        while (true) {
          const ssize_t r = ::recv(fds[which[k]], buf, sizeof buf, MSG_DONTWAIT);
          if (r > 0) got.append(buf, static_cast<size_t>(r));
          if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) eof = true;
          if (r <= 0) break;
        }
        if (first_answer->empty()) *first_answer = got;
        if (eof) {
          closed[which[k]] = true;
          ++n;
        }
      }
      if (n >= want && until == deadline) return;
    }
  };
  sweep(deadline);
  sweep(Clock::now() + std::chrono::milliseconds(100));
  return n;
}

// One whole request as `uid` (a child that switches to it, then only system calls), and
// the raw answer; "" when it could not connect.
std::string RequestAs(uid_t uid, const Target& t, const std::string& request) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return "";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(pipe_fds[0]);
    if (::setgroups(0, nullptr) != 0 || ::setgid(uid) != 0 || ::setuid(uid) != 0) ::_exit(2);
    const int fd = Connect(t);
    if (fd < 0) ::_exit(3);
    if (::write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
      ::_exit(4);
    }
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) {
      if (::write(pipe_fds[1], buf, static_cast<size_t>(n)) != n) ::_exit(5);
    }
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  std::string got;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(pipe_fds[0], buf, sizeof buf)) > 0) got.append(buf, static_cast<size_t>(n));
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return got;
}

const std::string kGet = "GET /quick HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

class ConnectionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("gpupool-netc-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    std::filesystem::permissions(dir_, std::filesystem::perms(0755));
  }
  void TearDown() override {
    Release();
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  // A server on both listeners; "/block" waits until Release(); the body names the uid.
  void Start(HttpServerOptions opts) {
    opts.unix_socket_path = (dir_ / "s.sock").string();
    opts.tcp_host = "127.0.0.1";
    opts.may_block = [](const HttpRequest& r) { return r.path == "/block"; };
    auto s = StartHttpServer(opts, [this](const HttpRequest& r) {
      if (r.path == "/block") {
        std::unique_lock lock(mu_);
        ++blocked_;
        cv_.notify_all();
        cv_.wait(lock, [this] { return released_; });
      }
      HttpResponse resp;
      resp.body = "ok peer=" + (r.peer ? std::to_string(r.peer->uid) : std::string("none")) +
                  " auth=" + r.Header("authorization");
      return resp;
    });
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
    unix_ = Target{(dir_ / "s.sock").string(), 0};
    tcp_ = Target{"", server_->tcp_port()};
  }
  void Release() {
    std::lock_guard lock(mu_);
    released_ = true;
    cv_.notify_all();
  }
  bool WaitBlocked(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return blocked_ >= n; });
  }

  std::filesystem::path dir_;
  std::unique_ptr<HttpServer> server_;
  Target unix_, tcp_;
  std::mutex mu_;
  std::condition_variable cv_;
  int blocked_ = 0;
  bool released_ = false;
};

// Slowloris: one byte of an endless head every 100 ms. libmicrohttpd's own timeout
// starts again with each byte (120 s); the head deadline does not.
TEST_F(ConnectionsTest, AHeadTrickledAByteEvery100msIsCutAtTheHeadDeadline) {
  HttpServerOptions opts;
  opts.head_timeout_ms = 600;
  Start(opts);
  for (const Target& t : {unix_, tcp_}) {
    const int fd = Connect(t);
    ASSERT_GE(fd, 0);
    const auto start = Clock::now();
    const std::string head = "GET /quick HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    std::string got;
    bool closed = false;
    size_t i = 0;
    while (!closed && Clock::now() - start < std::chrono::seconds(3)) {
      const char c = i < head.size() ? head[i] : 'a';
      ++i;
      if (::send(fd, &c, 1, MSG_NOSIGNAL) != 1) break;
      got += ReadUntilClosed(fd, Clock::now() + std::chrono::milliseconds(100), &closed);
    }
    if (!closed) got += ReadUntilClosed(fd, Clock::now() + std::chrono::milliseconds(200), &closed);
    const auto took = Clock::now() - start;
    ::close(fd);
    EXPECT_TRUE(closed) << (t.unix_path.empty() ? "tcp" : "unix") << ": still open after 3 s";
    EXPECT_GE(took, std::chrono::milliseconds(550));
    EXPECT_LT(took, std::chrono::milliseconds(1500));
    EXPECT_EQ(got.rfind("HTTP/1.1 408 Request Timeout", 0), 0U) << got;
    EXPECT_NE(got.find("the request head did not arrive in full within 600 ms"), std::string::npos)
        << got;
  }
  // A whole request sent at once is answered as before.
  HttpClient c(ParseServerAddress("unix:" + unix_.unix_path).value());
  auto r = c.Get("/quick");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
}

// A body trickled past its deadline (the floor, plus its size at the minimum rate).
TEST_F(ConnectionsTest, ABodyTrickledPastItsDeadlineIsCut) {
  HttpServerOptions opts;
  opts.transfer_timeout_ms = 500;
  opts.min_transfer_bytes_per_s = 1000;  // 100 bytes: 0.6 s in all
  Start(opts);
  const int fd = Connect(unix_);
  ASSERT_GE(fd, 0);
  const std::string head = "POST /quick HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n";
  ASSERT_EQ(::send(fd, head.data(), head.size(), MSG_NOSIGNAL), static_cast<ssize_t>(head.size()));
  const auto start = Clock::now();
  bool closed = false;
  std::string got;
  for (int i = 0; i < 30 && !closed; ++i) {
    if (::send(fd, "x", 1, MSG_NOSIGNAL) != 1) break;
    got += ReadUntilClosed(fd, Clock::now() + std::chrono::milliseconds(100), &closed);
  }
  const auto took = Clock::now() - start;
  ::close(fd);
  EXPECT_TRUE(closed);
  EXPECT_GE(took, std::chrono::milliseconds(500));
  EXPECT_LT(took, std::chrono::milliseconds(1500));
  EXPECT_EQ(got.rfind("HTTP/1.1 408", 0), 0U) << got;
}

// Between two requests on a kept-alive connection: the idle deadline.
TEST_F(ConnectionsTest, AnIdleKeptAliveConnectionIsClosedAtTheIdleDeadline) {
  HttpServerOptions opts;
  opts.idle_timeout_ms = 300;
  Start(opts);
  const int fd = Connect(tcp_);
  ASSERT_GE(fd, 0);
  const std::string req = "GET /quick HTTP/1.1\r\nHost: x\r\n\r\n";  // keep-alive
  ASSERT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  bool closed = false;
  const auto start = Clock::now();
  const std::string got = ReadUntilClosed(fd, Clock::now() + std::chrono::seconds(3), &closed);
  const auto took = Clock::now() - start;
  ::close(fd);
  EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0U) << got;
  EXPECT_TRUE(closed);
  EXPECT_GE(took, std::chrono::milliseconds(250));
  EXPECT_LT(took, std::chrono::milliseconds(1500));
}

// One uid holds 200 half-sent requests on each listener: all but its last few are closed
// (with a 503 naming why), and its own new request and another uid's are answered.
TEST_F(ConnectionsTest, HalfSentRequestsOfOneUidPastItsCapAreClosedAndOthersAreAnswered) {
  HttpServerOptions opts;
  opts.reserved_uids = std::vector<uid_t>{};  // this test's uid is an ordinary one
  opts.max_pending_per_peer = 8;
  Start(opts);
  for (const Target& t : {unix_, tcp_}) {
    const char* what = t.unix_path.empty() ? "tcp" : "unix";
    std::vector<int> fds;
    const std::string half = "GET /quick HTTP/1.1\r\nHost: x\r\n";
    for (int i = 0; i < 200; ++i) {
      const int fd = Connect(t);
      ASSERT_GE(fd, 0) << what;
      (void)!::send(fd, half.data(), half.size(), MSG_NOSIGNAL);
      fds.push_back(fd);
    }
    // Accepted by several threads at once, so not quite in the order of connecting: which
    // 8 stay open is the server's business, that only 8 do is the cap.
    std::string first_answer;
    const size_t closed_count =
        WaitForClosed(fds, 192, Clock::now() + std::chrono::seconds(5), &first_answer);
    EXPECT_EQ(closed_count, 192U) << what;
    EXPECT_EQ(first_answer.rfind("HTTP/1.1 503", 0), 0U) << what << ": " << first_answer;
    EXPECT_NE(first_answer.find("too many connections from uid " + std::to_string(getuid()) +
                                " were open without a request (8 at most)"),
              std::string::npos)
        << first_answer;
    // A new whole request of the same uid is answered (the oldest makes room)...
    const int fd = Connect(t);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::send(fd, kGet.data(), kGet.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(kGet.size()));
    bool closed = false;
    const std::string mine = ReadUntilClosed(fd, Clock::now() + std::chrono::seconds(5), &closed);
    ::close(fd);
    EXPECT_EQ(mine.rfind("HTTP/1.1 200", 0), 0U) << what << ": " << mine;
    // ...and so is another uid's.
    if (geteuid() == 0) {
      const std::string theirs = RequestAs(kNobody, t, kGet);
      EXPECT_EQ(theirs.rfind("HTTP/1.1 200", 0), 0U) << what << ": " << theirs;
      EXPECT_NE(theirs.find(t.unix_path.empty() ? "ok peer=none" : "ok peer=65534"),
                std::string::npos)
          << theirs;
    }
    for (int f : fds) ::close(f);
  }
}

// A uid with as many requests under way as its cap gets 503 for one more, naming the
// cap; another uid is served meanwhile.
TEST_F(ConnectionsTest, AUidPastItsActiveCapIsAnswered503WhileAnotherIsServed) {
  HttpServerOptions opts;
  opts.reserved_uids = std::vector<uid_t>{};
  opts.max_connections_per_uid = 2;
  Start(opts);
  HttpClient c(ParseServerAddress("unix:" + unix_.unix_path).value());
  std::vector<std::thread> held;
  for (int i = 0; i < 2; ++i) {
    held.emplace_back([&c] { (void)c.Get("/block", 20'000); });
  }
  ASSERT_TRUE(WaitBlocked(2));
  auto r = c.Get("/quick");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 503);
  EXPECT_NE(r->body.find("too many connections at once from uid " + std::to_string(getuid()) +
                         ": 2 with a request under way"),
            std::string::npos)
      << r->body;
  EXPECT_NE(r->body.find("max-connections-per-uid"), std::string::npos) << r->body;
  if (geteuid() == 0) {
    const std::string theirs = RequestAs(kNobody, unix_, kGet);
    EXPECT_EQ(theirs.rfind("HTTP/1.1 200", 0), 0U) << theirs;
  }
  Release();
  for (auto& t : held) t.join();
  r = c.Get("/quick");  // the two ended: room again
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
}

// Every connection for known callers taken (their requests under way): a user's next one
// is refused, an agent's still gets in, and so does a reserved uid's.
TEST_F(ConnectionsTest, AgentsAndReservedUidsFindTheirShareWhenEveryOtherConnectionIsTaken) {
  HttpServerOptions opts;
  opts.reserved_uids = std::vector<uid_t>{kNobody};  // nobody stands for the local agent
  opts.max_connections = 64;
  opts.reserved_connections = 16;
  opts.max_pending_connections = 24;  // 64 - 16 - 24 = 24 for requests under way
  opts.max_connections_per_uid = 1000;
  opts.classify = [](const HttpRequest& head) {
    const std::string auth = head.Header("authorization");
    if (auth == "Bearer agent") return ConnectionClass::kReserved;
    if (auth == "Bearer user") return ConnectionClass::kUser;
    return ConnectionClass::kAnonymous;
  };
  Start(opts);
  ServerAddress tcp;
  tcp.kind = ServerAddress::Kind::kTcp;
  tcp.host = "127.0.0.1";
  tcp.port = tcp_.tcp_port;
  HttpClient user(tcp, "user");
  std::vector<std::thread> held;
  for (int i = 0; i < 24; ++i) held.emplace_back([&user] { (void)user.Get("/block", 20'000); });
  ASSERT_TRUE(WaitBlocked(24));
  auto r = user.Get("/quick");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 503);
  EXPECT_NE(r->body.find("the server has too many connections with a request under way (24)"),
            std::string::npos)
      << r->body;
  HttpClient agent(tcp, "agent");
  r = agent.Get("/quick");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->body, "ok peer=none auth=Bearer agent");
  if (geteuid() == 0) {
    const std::string local_agent = RequestAs(kNobody, unix_, kGet);
    EXPECT_EQ(local_agent.rfind("HTTP/1.1 200", 0), 0U) << local_agent;
  }
  Release();
  for (auto& t : held) t.join();
}

// sock_diag names the uid at the other end of a TCP connection from this host.
TEST(LocalPeerTest, NamesTheUidOfALocalTcpClient) {
  const int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(lfd, 8), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const Target t{"", ntohs(a.sin_port)};
  auto uid_of_next = [&]() -> std::optional<uid_t> {
    const int c = ::accept(lfd, nullptr, nullptr);
    sockaddr_in peer{}, local{};
    socklen_t pl = sizeof peer, ll = sizeof local;
    ::getpeername(c, reinterpret_cast<sockaddr*>(&peer), &pl);
    ::getsockname(c, reinterpret_cast<sockaddr*>(&local), &ll);
    EXPECT_TRUE(MaybeLocalPeer(peer, local));
    std::optional<uid_t> uid = LocalTcpPeerUid(peer, local);
    ::close(c);
    return uid;
  };
  const int mine = Connect(t);
  ASSERT_GE(mine, 0);
  EXPECT_EQ(uid_of_next(), getuid());
  ::close(mine);
  if (geteuid() == 0) {
    std::thread child([&] { RequestAs(kNobody, t, kGet); });  // connects, then waits
    EXPECT_EQ(uid_of_next(), kNobody);
    child.join();
  }
  ::close(lfd);
  sockaddr_in remote{};
  remote.sin_addr.s_addr = htonl(0x0a000007);  // 10.0.0.7
  EXPECT_FALSE(MaybeLocalPeer(remote, a));
}

}  // namespace
}  // namespace gpupool::net

#pragma GCC diagnostic pop
