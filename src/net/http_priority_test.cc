// Request priority (HttpServerOptions::background) over a real Unix socket: background
// requests' handlers run on threads of their own at a lower OS priority, so a user's
// request is answered while every background thread is held, and background requests
// held back by busy threads are all answered, in the order they came, once threads free.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "net/http_server.h"

namespace gpupool::net {
namespace {

// A connection that sent `GET path`; -1 on failure.
int SendPriorityGet(const std::string& socket_path, const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", socket_path.c_str());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  timeval tv{20, 0};  // no test waits this long for an answer that comes
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// The answer's body (everything after the head) once the server closes; closes `fd`.
std::string AnswerBody(int fd) {
  std::string got;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) got.append(buf, static_cast<size_t>(n));
  ::close(fd);
  const size_t at = got.find("\r\n\r\n");
  return at == std::string::npos ? "" : got.substr(at + 4);
}

int HandlerNice() { return getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid))); }

// "/agent?n=N" is background: its handler notes its thread's nice value and N, then waits
// for the test's latch. Anything else is a user's, answered at once with its nice value.
class PriorityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("gpupool-netp-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "s.sock").string();
  }
  void TearDown() override {
    Release();
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  void Start(int background_threads) {
    HttpServerOptions opts;
    opts.unix_socket_path = path_;
    opts.pool_threads = 1;  // one thread reads every connection and runs users' handlers
    opts.background = [](const HttpRequest& r) { return r.path == "/agent"; };
    opts.background_threads = background_threads;
    opts.background_nice = 5;
    auto s = StartHttpServer(opts, [this](const HttpRequest& r) {
      if (r.path != "/agent") return HttpResponse{200, "text/plain", Nice(), {}};
      std::unique_lock lock(mu_);
      entered_.push_back(r.Query("n", ""));
      agent_nice_ = HandlerNice();
      cv_.notify_all();
      cv_.wait(lock, [this] { return released_; });
      return HttpResponse{200, "text/plain", "agent " + r.Query("n", ""), {}};
    });
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
  }
  static std::string Nice() { return std::to_string(HandlerNice()); }
  bool WaitEntered(size_t n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(20), [&] { return entered_.size() >= n; });
  }
  void Release() {
    std::lock_guard lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

  std::filesystem::path dir_;
  std::string path_;
  std::unique_ptr<HttpServer> server_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> entered_;  // background handlers that began, by n
  int agent_nice_ = 0;
  bool released_ = false;
};

// Both background threads are held by agents' requests; a user's request is read and
// answered by the one pool thread meanwhile, at the process's priority, while the agents'
// handlers ran 5 nice levels lower. Without the background threads, the first agent's
// handler holds the only pool thread and nothing else is answered.
TEST_F(PriorityTest, UserRequestIsServedWhileEveryBackgroundThreadIsBusy) {
  Start(/*background_threads=*/2);
  const int a1 = SendPriorityGet(path_, "/agent?n=1");
  const int a2 = SendPriorityGet(path_, "/agent?n=2");
  ASSERT_GE(a1, 0);
  ASSERT_GE(a2, 0);
  ASSERT_TRUE(WaitEntered(2)) << "both background threads should be running a handler";
  const int user = SendPriorityGet(path_, "/user");
  ASSERT_GE(user, 0);
  EXPECT_EQ(AnswerBody(user), Nice());  // answered while both agents still wait
  {
    std::lock_guard lock(mu_);
    EXPECT_EQ(agent_nice_, std::min(HandlerNice() + 5, 19));
  }
  Release();
  std::vector<std::string> agents = {AnswerBody(a1), AnswerBody(a2)};
  EXPECT_EQ(agents, (std::vector<std::string>{"agent 1", "agent 2"}));
}

// One background thread, held; ten more agents' requests wait for it (none is refused or
// lost), and once it is free each is answered, in the order they arrived.
TEST_F(PriorityTest, BackgroundRequestsWaitingForAThreadAreAllAnsweredInOrder) {
  Start(/*background_threads=*/1);
  std::vector<int> fds = {SendPriorityGet(path_, "/agent?n=0")};
  ASSERT_TRUE(WaitEntered(1));
  for (int i = 1; i <= 10; ++i) {
    fds.push_back(SendPriorityGet(path_, "/agent?n=" + std::to_string(i)));
    // In order: the pool thread has read request i before i+1 is sent.
    const int user = SendPriorityGet(path_, "/user");
    EXPECT_EQ(AnswerBody(user), Nice());
  }
  Release();
  for (size_t i = 0; i < fds.size(); ++i) {
    ASSERT_GE(fds[i], 0);
    EXPECT_EQ(AnswerBody(fds[i]), "agent " + std::to_string(i));
  }
  std::lock_guard lock(mu_);
  ASSERT_EQ(entered_.size(), fds.size());
  for (size_t i = 0; i < entered_.size(); ++i) EXPECT_EQ(entered_[i], std::to_string(i));
}

// Stop() with background requests running and waiting: the running handler finishes (as a
// blocking one does), the waiting ones run too, and every client gets an answer.
TEST_F(PriorityTest, StopRunsWaitingBackgroundRequestsAndReturns) {
  Start(/*background_threads=*/1);
  const int a0 = SendPriorityGet(path_, "/agent?n=0");
  ASSERT_TRUE(WaitEntered(1));
  const int a1 = SendPriorityGet(path_, "/agent?n=1");
  EXPECT_EQ(AnswerBody(SendPriorityGet(path_, "/user")), Nice());  // a1 was read before this
  std::thread stopper([this] { server_->Stop(); });
  Release();
  stopper.join();
  EXPECT_EQ(AnswerBody(a0), "agent 0");
  EXPECT_EQ(AnswerBody(a1), "agent 1");
}

}  // namespace
}  // namespace gpupool::net
