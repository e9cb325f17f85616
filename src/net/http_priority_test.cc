// Request priority (HttpServerOptions::background) over a real Unix socket: background
// requests' handlers run on threads of their own at a lower OS priority, so a user's
// request is answered while every background thread is held, and background requests
// held back by busy threads are all answered, in the order they came, once threads free.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "net/http_server.h"
#include "net/http_test_util.h"

namespace gpupool::net {
namespace {

using testing::SendGet;

// The answer's body once the server closes; closes `fd`.
std::string AnswerBody(int fd) { return testing::BodyOf(testing::ReadAll(fd)); }

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
  const int a1 = SendGet(path_, "/agent?n=1");
  const int a2 = SendGet(path_, "/agent?n=2");
  ASSERT_GE(a1, 0);
  ASSERT_GE(a2, 0);
  ASSERT_TRUE(WaitEntered(2)) << "both background threads should be running a handler";
  const int user = SendGet(path_, "/user");
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
  std::vector<int> fds = {SendGet(path_, "/agent?n=0")};
  ASSERT_TRUE(WaitEntered(1));
  for (int i = 1; i <= 10; ++i) {
    fds.push_back(SendGet(path_, "/agent?n=" + std::to_string(i)));
    // In order: the pool thread has read request i before i+1 is sent.
    const int user = SendGet(path_, "/user");
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
  const int a0 = SendGet(path_, "/agent?n=0");
  ASSERT_TRUE(WaitEntered(1));
  const int a1 = SendGet(path_, "/agent?n=1");
  EXPECT_EQ(AnswerBody(SendGet(path_, "/user")), Nice());  // a1 was read before this
  std::thread stopper([this] { server_->Stop(); });
  Release();
  stopper.join();
  EXPECT_EQ(AnswerBody(a0), "agent 0");
  EXPECT_EQ(AnswerBody(a1), "agent 1");
}

}  // namespace
}  // namespace gpupool::net
