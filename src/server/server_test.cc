// Server::Wait wakes at its events, with nothing to poll: a stop requested (SQLite, a
// controller alone) and, on a real PostgreSQL (the test binary's server; skipped without
// postgresql-15), a standby that won the lease but could not load the state.
#include "server/server.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <stop_token>
#include <string>

#include "store/postgres_test_server.h"

namespace gpupool::server {
namespace {

class ServerWaitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("gpupool-srvwait-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  ServerOptions Options() const {
    ServerOptions o;
    o.state_dir = dir_.string();
    o.port = 0;  // the Unix socket only
    return o;
  }

  std::filesystem::path dir_;
};

// Ten seconds is no timing of the wake-up: a wait that ended on its event returns at
// once, one that does not wake would hang the test (Wait has no deadline).
constexpr auto kEnds = std::chrono::seconds(10);

TEST_F(ServerWaitTest, AStopRequestEndsTheWaitAtOnce) {
  Server srv(Options());
  ASSERT_TRUE(srv.Start().ok());
  std::stop_source stop;
  std::future<Status> waited =
      std::async(std::launch::async, [&] { return srv.Wait(stop.get_token()); });
  EXPECT_EQ(waited.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  stop.request_stop();
  ASSERT_EQ(waited.wait_for(kEnds), std::future_status::ready);
  EXPECT_TRUE(waited.get().ok());
  srv.Stop();
}

// The standby takes the lease at once (no other controller) and its state cannot load
// (a controller option the controller refuses): Wait returns that error, with no stop.
TEST_F(ServerWaitTest, AStandbyThatCannotLoadEndsTheWaitWithItsError) {
  auto pg = store::SharedPostgresTestServer();
  if (!pg.ok() && pg.status().code() == StatusCode::kUnavailable) {
    GTEST_SKIP() << pg.status().message();
  }
  ASSERT_TRUE(pg.ok()) << pg.status().ToString();
  Result<std::string> db = (*pg)->CreateDatabase();
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  ServerOptions o = Options();
  o.store_spec = *db;
  o.lease = ServerOptions::Lease::kStandBy;
  o.controller.health_breaker_fraction = 0;  // refused by Controller::Create
  Server srv(o);
  ASSERT_TRUE(srv.Start().ok());
  std::stop_source never;
  std::future<Status> waited =
      std::async(std::launch::async, [&] { return srv.Wait(never.get_token()); });
  ASSERT_EQ(waited.wait_for(kEnds), std::future_status::ready);
  const Status why = waited.get();
  EXPECT_EQ(why.code(), StatusCode::kInvalidArgument) << why.ToString();
  EXPECT_NE(why.message().find("--health-breaker"), std::string::npos) << why.message();
  srv.Stop();
}

// The red team's operator removed the "stale" socket of a running `gpupool up` and
// started another on the same state directory: the second must refuse, naming the
// directory, the first one's pid and what to do, and never touch the store or socket.
TEST_F(ServerWaitTest, ASecondServerOnTheStateDirectoryIsRefused) {
  Server first(Options());
  ASSERT_TRUE(first.Start().ok());
  std::filesystem::remove(first.socket_path());
  Server second(Options());
  const Status s = second.Start();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists);
  EXPECT_NE(s.message().find("another gpupool server (pid " + std::to_string(::getpid()) +
                             ") uses the state directory '" + dir_.string() + "'"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("stop it first"), std::string::npos) << s.message();
  EXPECT_FALSE(std::filesystem::exists(first.socket_path()));  // the second bound nothing
  first.Stop();
  second.Stop();
}

// An SQLite file outside the state directory is locked too: two state directories, one
// store.
TEST_F(ServerWaitTest, ASecondServerOnTheSqliteFileIsRefused) {
  ServerOptions a = Options();
  a.state_dir = (dir_ / "a").string();
  a.store_spec = "sqlite:" + (dir_ / "shared.db").string();
  ServerOptions b = a;
  b.state_dir = (dir_ / "b").string();
  Server first(a);
  ASSERT_TRUE(first.Start().ok());
  Server second(b);
  const Status s = second.Start();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("uses the store '" + (dir_ / "shared.db").string() + "'"),
            std::string::npos)
      << s.message();
  first.Stop();
}

// The lock goes with the server: the next one on the directory starts.
TEST_F(ServerWaitTest, TheNextServerStartsOnceTheFirstIsGone) {
  {
    Server first(Options());
    ASSERT_TRUE(first.Start().ok());
  }
  Server next(Options());
  EXPECT_TRUE(next.Start().ok());
  next.Stop();
}

}  // namespace
}  // namespace gpupool::server
