// Answers given later (HttpResponder) over real sockets: thousands of waiting requests
// hold no thread, each gets the answer it was completed with, a client that hangs up
// mid-wait abandons its responder, two completions racing give exactly one answer, and
// Stop() with waiters pending answers them all and returns.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "net/http_server.h"
#include "net/http_test_util.h"

namespace gpupool::net {
namespace {

// Threads of this process now.
int Threads() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

using testing::BodyOf;
using testing::ReadAll;
using testing::SendGet;

// A server whose "/poll?n=N" requests wait: the handler only files their responders,
// which the test completes. Anything else is answered at once.
class DeferredTest : public ::testing::Test {
 protected:
  void SetUp() override {
    (void)RaiseOpenFilesLimit();
    dir_ = std::filesystem::temp_directory_path() / ("gpupool-netd-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "s.sock").string();
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  // `on_file` runs on the pool thread with each filed responder (after it is filed).
  void Start(int pool_threads = 2,
             std::function<void(const std::shared_ptr<HttpResponder>&)> on_file = nullptr) {
    HttpServerOptions opts;
    opts.unix_socket_path = path_;
    opts.pool_threads = pool_threads;
    auto s = StartHttpServer(
        opts, [this, on_file](const HttpRequest& r, std::shared_ptr<HttpResponder> out) {
          if (r.path != "/poll") {
            out->Complete(HttpResponse{200, "text/plain", "quick", {}});
            return;
          }
          const int n = std::stoi(r.Query("n", "0"));
          out->OnAbandoned([this, n] {
            std::lock_guard lock(mu_);
            ++abandoned_;
            waiters_.erase(n);  // the owner forgets its waiter at once
            cv_.notify_all();
          });
          {
            std::lock_guard lock(mu_);
            waiters_[n] = out;
            ++filed_;
            cv_.notify_all();
          }
          if (on_file) on_file(out);
        });
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
  }
  bool WaitFor(const std::function<bool()>& done) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(30), done);
  }
  std::shared_ptr<HttpResponder> Take(int n) {
    std::lock_guard lock(mu_);
    auto it = waiters_.find(n);
    if (it == waiters_.end()) return nullptr;
    auto out = it->second;
    waiters_.erase(it);
    return out;
  }
  static HttpResponse Text(const std::string& body) { return {200, "text/plain", body, {}}; }

  std::filesystem::path dir_;
  std::string path_;
  std::unique_ptr<HttpServer> server_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int, std::shared_ptr<HttpResponder>> waiters_;
  int filed_ = 0;
  int abandoned_ = 0;
};

// 2,000 requests wait at once on a server of 2 pool threads: the process's threads stay
// what they were (no thread per waiter), other requests are answered meanwhile, and each
// waiter gets its own answer: half from a "notification" thread, half from one "deadline"
// thread with the empty answer.
TEST_F(DeferredTest, ThousandsWaitWithoutAThreadEach) {
  Start();
  // Each waiter takes two descriptors here (client and server ends).
  struct rlimit rl {};
  getrlimit(RLIMIT_NOFILE, &rl);
  const int n = static_cast<int>(std::min<rlim_t>(2000, (rl.rlim_cur - 200) / 2));
  ASSERT_GE(n, 300) << "too few open files allowed for the test";
  const int threads_before = Threads();
  std::vector<int> fds;
  for (int i = 0; i < n; ++i) {
    fds.push_back(SendGet(path_, "/poll?n=" + std::to_string(i)));
    ASSERT_GE(fds.back(), 0) << "connection " << i;
  }
  ASSERT_TRUE(WaitFor([&] { return filed_ == n; })) << filed_ << " of " << n << " filed";
  const int threads_waiting = Threads();
  EXPECT_LE(threads_waiting, threads_before + 2)
      << "threads grew from " << threads_before << " to " << threads_waiting << " for " << n
      << " waiting requests";
  // The pool is free meanwhile.
  EXPECT_EQ(BodyOf(ReadAll(SendGet(path_, "/quick"))), "quick");

  std::thread notify([&] {
    for (int i = 0; i < n; i += 2)
      ASSERT_TRUE(Take(i)->Complete(Text("work " + std::to_string(i))));
  });
  std::thread deadline([&] {
    for (int i = 1; i < n; i += 2) ASSERT_TRUE(Take(i)->Complete(Text("{}")));
  });
  notify.join();
  deadline.join();
  for (int i = 0; i < n; ++i) {
    const std::string answer = ReadAll(fds[i]);
    ASSERT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << i << ": " << answer;
    EXPECT_EQ(BodyOf(answer), i % 2 == 0 ? "work " + std::to_string(i) : "{}") << i;
  }
  EXPECT_EQ(abandoned_, 0);
}

// A client that hangs up mid-wait: its responder is abandoned at once (not at a
// deadline), its owner forgets it, and completing it afterwards does nothing.
TEST_F(DeferredTest, ClientHangingUpAbandonsItsWaiter) {
  Start();
  const int fd = SendGet(path_, "/poll?n=7");
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(WaitFor([&] { return filed_ == 1; }));
  std::shared_ptr<HttpResponder> kept;
  {
    std::lock_guard lock(mu_);
    kept = waiters_.at(7);
  }
  ::close(fd);
  ASSERT_TRUE(WaitFor([&] { return abandoned_ == 1 && waiters_.empty(); }));
  // The server lets go of it too once the connection is closed: only `kept` is left.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (kept.use_count() > 1 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(kept.use_count(), 1);
  EXPECT_FALSE(kept->Complete(Text("too late")));
  // An OnAbandoned given after the fact runs at once.
  bool ran = false;
  kept->OnAbandoned([&] { ran = true; });
  EXPECT_TRUE(ran);
  // The server serves on, and frees the connection (no suspended one is left: Stop
  // would otherwise wait 5 s and leak its daemon).
  EXPECT_EQ(BodyOf(ReadAll(SendGet(path_, "/quick"))), "quick");
  const auto t0 = std::chrono::steady_clock::now();
  server_->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(4));
}

// A notification and a deadline completing the same waiter at once: exactly one wins,
// and the client reads that one's answer, once.
TEST_F(DeferredTest, CompletionRacingTheDeadlineAnswersOnce) {
  Start();
  constexpr int kRounds = 200;
  for (int i = 0; i < kRounds; ++i) {
    const int fd = SendGet(path_, "/poll?n=" + std::to_string(i));
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(WaitFor([&] { return filed_ == i + 1; }));
    std::shared_ptr<HttpResponder> out = Take(i);
    std::atomic<int> go{0};
    bool won[2] = {false, false};
    auto racer = [&](int k) {
      go.fetch_add(1);
      while (go.load() < 2) {
      }
      won[k] = out->Complete(Text(k == 0 ? "work" : "{}"));
    };
    std::thread a(racer, 0), b(racer, 1);
    a.join();
    b.join();
    ASSERT_NE(won[0], won[1]) << "round " << i;
    const std::string answer = ReadAll(fd);
    EXPECT_EQ(BodyOf(answer), won[0] ? "work" : "{}") << "round " << i;
    EXPECT_EQ(answer.find("HTTP/1.1", 1), std::string::npos) << "two answers: " << answer;
  }
}

// Answers that come while the handler's connection is being suspended (from another
// thread, at once) or before the handler returns (on its own thread) go out all the same.
TEST_F(DeferredTest, AnswersRacingTheSuspendGoOut) {
  std::vector<std::thread> completers;
  std::mutex completers_mu;
  // Each completer starts at once and waits a little longer than the last (0-60 us,
  // busy), so that some answers land while the pool thread is suspending the connection.
  std::atomic<int> round{0};
  Start(2, [&](const std::shared_ptr<HttpResponder>& out) {
    std::lock_guard lock(completers_mu);
    const auto delay = std::chrono::microseconds(round.fetch_add(1) % 61);
    completers.emplace_back([out, delay] {
      const auto until = std::chrono::steady_clock::now() + delay;
      while (std::chrono::steady_clock::now() < until) {
      }
      out->Complete(Text("soon"));
    });
  });
  for (int i = 0; i < 300; ++i) {
    EXPECT_EQ(BodyOf(ReadAll(SendGet(path_, "/poll?n=" + std::to_string(i)))), "soon") << i;
  }
  std::lock_guard lock(completers_mu);
  for (auto& t : completers) t.join();
}

// Stop() with requests waiting: each is answered 503 (and its owner told), Stop returns
// promptly, and responders completed after the server is gone do nothing.
TEST_F(DeferredTest, StopAnswersWaitersAndReturns) {
  Start();
  constexpr int kWaiters = 50;
  std::vector<int> fds;
  for (int i = 0; i < kWaiters; ++i) fds.push_back(SendGet(path_, "/poll?n=" + std::to_string(i)));
  ASSERT_TRUE(WaitFor([&] { return filed_ == kWaiters; }));
  std::vector<std::shared_ptr<HttpResponder>> kept;
  {
    std::lock_guard lock(mu_);
    for (auto& [n, out] : waiters_) kept.push_back(out);
  }
  const auto t0 = std::chrono::steady_clock::now();
  server_->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(4));
  EXPECT_EQ(abandoned_, kWaiters);
  for (int fd : fds) {
    const std::string answer = ReadAll(fd);
    // Answered 503, or closed without an answer: never left hanging.
    if (!answer.empty()) {
      EXPECT_EQ(answer.rfind("HTTP/1.1 503", 0), 0u) << answer;
    }
  }
  server_.reset();
  for (auto& out : kept) EXPECT_FALSE(out->Complete(Text("after the server")));
}

// A connection to the socket at `path`, or the connect's errno (negated): -EAGAIN when
// the listener's backlog is full (a blocking connect would wait there, unwoken by the
// listener's shutdown, until the server closes it).
int Connect(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    const int err = errno;
    ::close(fd);
    return -err;
  }
  return fd;
}

// Drain() with requests still on the listener (the only pool thread is held by a
// handler, as a stopped process's are): it accepts them itself, then refuses new
// connections, and returns once every request under way was answered, the waiter
// included; their answers are in the clients' sockets by then.
TEST_F(DeferredTest, DrainAnswersTheRequestsOnTheListenerAndTakesNoMore) {
  std::mutex gate_mu;
  std::condition_variable gate_cv;
  bool open = false;
  Start(/*pool_threads=*/1, [&](const std::shared_ptr<HttpResponder>&) {
    std::unique_lock lock(gate_mu);
    gate_cv.wait(lock, [&] { return open; });
  });
  const int waiter = SendGet(path_, "/poll?n=0");
  ASSERT_GE(waiter, 0);
  ASSERT_TRUE(WaitFor([&] { return filed_ == 1; }));  // the pool thread is held from here
  constexpr int kQueued = 5;
  std::vector<int> queued;
  for (int i = 0; i < kQueued; ++i) queued.push_back(SendGet(path_, "/quick"));
  for (int fd : queued) ASSERT_GE(fd, 0);
  std::future<bool> drained =
      std::async(std::launch::async, [this] { return server_->Drain(10'000); });
  // The listener refuses connections once Drain took those waiting on it; each try that
  // is not refused is closed at once (no event tells of the refusal: the try is it).
  int refused = 0;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (refused == 0 && std::chrono::steady_clock::now() < give_up) {
    const int fd = Connect(path_);
    if (fd < 0 && fd != -EAGAIN) refused = -fd;
    if (fd >= 0) ::close(fd);
    std::this_thread::yield();
  }
  EXPECT_EQ(refused, ECONNREFUSED) << std::strerror(refused);
  EXPECT_EQ(drained.wait_for(std::chrono::seconds(0)), std::future_status::timeout)
      << "Drain returned with requests under way";
  {
    std::lock_guard lock(gate_mu);
    open = true;
    gate_cv.notify_all();
  }
  std::shared_ptr<HttpResponder> out = Take(0);
  ASSERT_NE(out, nullptr);
  EXPECT_TRUE(out->Complete(Text("zero")));
  ASSERT_EQ(drained.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_TRUE(drained.get());
  for (int fd : queued) {
    char buf[256] = {};
    const ssize_t n = ::recv(fd, buf, sizeof buf - 1, MSG_DONTWAIT);
    EXPECT_GT(n, 0) << "a queued request was not answered before Drain returned";
    EXPECT_EQ(std::string(buf).rfind("HTTP/1.1 200", 0), 0u) << buf;
    ::close(fd);
  }
  EXPECT_EQ(BodyOf(ReadAll(waiter)), "zero");
}

// Drain() while clients connect over and over (a flood, or clients retrying): it takes
// what waited on the listener and then refuses the rest, rather than accepting for as
// long as connections keep coming (it once did, until the process ran out of
// descriptors or Drain's time ran out).
TEST_F(DeferredTest, DrainEndsTakingWhileClientsKeepConnecting) {
  std::mutex gate_mu;
  std::condition_variable gate_cv;
  bool open = false;
  Start(/*pool_threads=*/1, [&](const std::shared_ptr<HttpResponder>&) {
    std::unique_lock lock(gate_mu);
    gate_cv.wait(lock, [&] { return open; });
  });
  const int waiter = SendGet(path_, "/poll?n=0");
  ASSERT_GE(waiter, 0);
  ASSERT_TRUE(WaitFor([&] { return filed_ == 1; }));  // the pool thread is held from here
  const int queued = SendGet(path_, "/quick");
  ASSERT_GE(queued, 0);
  // Each connecting thread tries until it is refused, closing each connection it gets.
  constexpr int kConnectors = 3;
  std::atomic<bool> go{false};
  std::vector<std::future<int>> connectors;
  for (int i = 0; i < kConnectors; ++i) {
    connectors.push_back(std::async(std::launch::async, [&] {
      while (!go.load()) std::this_thread::yield();
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (std::chrono::steady_clock::now() < give_up) {
        const int fd = Connect(path_);
        if (fd == -EAGAIN) continue;  // the backlog is full: as a client would, try again
        if (fd < 0) return -fd;
        ::close(fd);
      }
      return 0;  // never refused
    }));
  }
  go = true;
  std::future<bool> drained =
      std::async(std::launch::async, [this] { return server_->Drain(30'000); });
  for (auto& c : connectors) {
    ASSERT_EQ(c.wait_for(std::chrono::seconds(25)), std::future_status::ready);
    const int err = c.get();
    EXPECT_EQ(err, ECONNREFUSED) << (err == 0 ? "never refused" : std::strerror(err));
  }
  {
    std::lock_guard lock(gate_mu);
    open = true;
    gate_cv.notify_all();
  }
  std::shared_ptr<HttpResponder> out = Take(0);
  ASSERT_NE(out, nullptr);
  EXPECT_TRUE(out->Complete(Text("zero")));
  ASSERT_EQ(drained.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_TRUE(drained.get());
  EXPECT_EQ(BodyOf(ReadAll(queued)), "quick");
  EXPECT_EQ(BodyOf(ReadAll(waiter)), "zero");
}

}  // namespace
}  // namespace gpupool::net
