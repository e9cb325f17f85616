#include "cli/client/api_client.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "net/http_status.h"

namespace gpupool::cli {
namespace {

// The one address of a resolved list ("" unless there is exactly one).
std::string OnePath(const Result<std::vector<net::ServerAddress>>& r) {
  return r.ok() && r->size() == 1 ? (*r)[0].path : std::string();
}

TEST(ResolveServerAddressTest, FlagThenEnvThenDefaultSocket) {
  auto a = ResolveServerAddress("unix:/flag.sock", "unix:/env.sock", 1000, "", "/home/a");
  EXPECT_EQ(OnePath(a), "/flag.sock");
  a = ResolveServerAddress("", "http://127.0.0.1:8421", 1000, "", "/home/a");
  ASSERT_TRUE(a.ok());
  ASSERT_EQ(a->size(), 1u);
  EXPECT_EQ((*a)[0].kind, net::ServerAddress::Kind::kTcp);
  EXPECT_EQ((*a)[0].port, 8421);
  EXPECT_EQ(OnePath(ResolveServerAddress("", "", 0, "/x", "/root")),
            "/var/lib/gpupool/gpupool.sock");
  EXPECT_EQ(OnePath(ResolveServerAddress("", "", 1000, "/xdg", "/home/a")),
            "/xdg/gpupool/gpupool.sock");
  EXPECT_EQ(OnePath(ResolveServerAddress("", "", 1000, "", "/home/a")),
            "/home/a/.local/state/gpupool/gpupool.sock");
  // A relative XDG_STATE_HOME is invalid by the XDG spec and is ignored.
  EXPECT_EQ(OnePath(ResolveServerAddress("", "", 1000, "rel", "/home/a")),
            "/home/a/.local/state/gpupool/gpupool.sock");
}

// A user with no pool of their own on a host that runs the packaged server reaches that
// one; with their own `gpupool up` socket present, their own.
TEST(ResolveServerAddressTest, AUserWithoutAPoolOfTheirOwnGetsTheHostsServer) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("gpupool-resolve-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "home/.local/state/gpupool");
  const std::string home = (dir / "home").string();
  const std::string own = home + "/.local/state/gpupool/gpupool.sock";
  const std::string system = (dir / "system.sock").string();
  // Neither exists: the user's own path, for the error message.
  EXPECT_EQ(OnePath(ResolveServerAddress("", "", 1000, "", home, system)), own);
  std::ofstream(system).put('x');
  EXPECT_EQ(OnePath(ResolveServerAddress("", "", 1000, "", home, system)), system);
  std::ofstream(own).put('x');
  EXPECT_EQ(OnePath(ResolveServerAddress("", "", 1000, "", home, system)), own);
  std::filesystem::remove_all(dir);
}

TEST(ResolveServerAddressTest, ListsOfControllersInFlagAndEnv) {
  auto a = ResolveServerAddress("http://c1:8421, http://c2:8421,unix:/run/c3.sock",
                                "unix:/env.sock", 1000, "", "/home/a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(net::ServerAddressListToString(*a), "http://c1:8421,http://c2:8421,unix:/run/c3.sock");
  a = ResolveServerAddress("", "http://c1:8421,http://c2:8421", 1000, "", "/home/a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_EQ(a->size(), 2u);
  EXPECT_EQ((*a)[1].host, "c2");
  a = ResolveServerAddress("", "http://c1:8421,,http://c2:8421", 1000, "", "/home/a");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().message().rfind("GPUPOOL_SERVER=http://c1:8421,,http://c2:8421: ", 0), 0u)
      << a.status().message();
  a = ResolveServerAddress("http://c1:8421,bad", "", 1000, "", "/home/a");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("server address 'bad'"), std::string::npos)
      << a.status().message();
}

TEST(ResolveServerAddressTest, BadValuesNameTheirSource) {
  auto a = ResolveServerAddress("nonsense", "", 1000, "", "/h");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a.status().message().rfind("--server nonsense: ", 0), 0u) << a.status().message();
  a = ResolveServerAddress("", "ftp://x", 1000, "", "/h");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().message().rfind("GPUPOOL_SERVER=ftp://x: ", 0), 0u);
  a = ResolveServerAddress("", "", 1000, "", "");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("HOME is not set"), std::string::npos);
}

// A standby's or a stopping server's 503 (net::StatusFromHttp, net/http_status_test.cc)
// is exit code 5, "unreachable": the CLI's retries cover it.
TEST(ExitCodeForTest, AnAnswerTheServerCannotGiveNowIsUnreachable) {
  EXPECT_EQ(ExitCodeFor(net::StatusFromHttp(503, "")), kExitUnreachable);
  EXPECT_EQ(ExitCodeFor(net::StatusFromHttp(404, "")), kExitNotFound);
}

TEST(ExitCodeForTest, DocumentedCodes) {
  EXPECT_EQ(ExitCodeFor(Status::Ok()), 0);
  EXPECT_EQ(ExitCodeFor(Status::Internal("x")), 1);
  EXPECT_EQ(ExitCodeFor(Status::FailedPrecondition("x")), 1);
  EXPECT_EQ(ExitCodeFor(Status::InvalidArgument("x")), 2);
  EXPECT_EQ(ExitCodeFor(Status::NotFound("x")), 3);
  EXPECT_EQ(ExitCodeFor(Status::PermissionDenied("x")), 4);
  EXPECT_EQ(ExitCodeFor(Status::Unavailable("x")), 5);
}

// A client of a TCP address (never a missing socket) and short pauses for the retry tests.
ApiClient TcpClient() {
  net::ServerAddress a;
  a.kind = net::ServerAddress::Kind::kTcp;
  a.host = "127.0.0.1";
  a.port = 1;
  return ApiClient({a}, "");
}
constexpr RetryTiming kQuick{std::chrono::milliseconds(5'000), std::chrono::milliseconds(1),
                             std::chrono::milliseconds(2)};

// A takeover: no controller answers twice, then the new leader does. The request is sent
// again, the first failure is said once, and the answer is marked as a later try's.
TEST(RetryDuringTakeoverTest, SendsAgainUntilALeaderAnswers) {
  int calls = 0;
  std::ostringstream err;
  bool retried = false;
  auto r = RetryDuringTakeover(
      TcpClient(),
      [&]() -> Result<ApiAnswer> {
        if (++calls < 3) return Status::Unavailable("no controller leads the pool now");
        return ApiAnswer{Json::object(), "{}"};
      },
      err, &retried, kQuick);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(calls, 3);
  EXPECT_TRUE(retried);
  EXPECT_NE(err.str().find("no controller leads the pool now"), std::string::npos);
  EXPECT_NE(err.str().find("trying again for up to 5 s"), std::string::npos);
  EXPECT_EQ(err.str().find("trying again", err.str().find("trying again") + 1), std::string::npos)
      << err.str();
}

// Answers that are not about a missing leader come back at once, from the first try.
TEST(RetryDuringTakeoverTest, OtherAnswersAreNotSentAgain) {
  for (const Status& s : {Status::NotFound("no job 7"), Status::FailedPrecondition("ended"),
                          Status::ResourceExhausted("too many jobs queued")}) {
    int calls = 0;
    std::ostringstream err;
    bool retried = true;
    auto r = RetryDuringTakeover(
        TcpClient(),
        [&]() -> Result<ApiAnswer> {
          ++calls;
          return s;
        },
        err, &retried, kQuick);
    EXPECT_EQ(r.status().code(), s.code());
    EXPECT_EQ(calls, 1) << s.ToString();
    EXPECT_FALSE(retried);
    EXPECT_EQ(err.str(), "");
  }
}

// No leader for the whole window: the last failure is the answer.
TEST(RetryDuringTakeoverTest, GivesUpAfterTheWindow) {
  int calls = 0;
  std::ostringstream err;
  const RetryTiming brief{std::chrono::milliseconds(30), std::chrono::milliseconds(1),
                          std::chrono::milliseconds(2)};
  auto r = RetryDuringTakeover(
      TcpClient(),
      [&]() -> Result<ApiAnswer> {
        ++calls;
        return Status::Unavailable("down " + std::to_string(calls));
      },
      err, nullptr, brief);
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_GT(calls, 2);
  EXPECT_EQ(r.status().message(), "down " + std::to_string(calls));
}

// Every address a socket that does not exist: a pool that is not running, said at once.
TEST(RetryDuringTakeoverTest, AMissingSocketIsNotATakeover) {
  net::ServerAddress a;
  a.kind = net::ServerAddress::Kind::kUnix;
  a.path = "/nonexistent-gpupool-test/gpupool.sock";
  int calls = 0;
  std::ostringstream err;
  auto r = RetryDuringTakeover(
      ApiClient({a}, ""),
      [&]() -> Result<ApiAnswer> {
        ++calls;
        return Status::Unavailable("cannot connect");
      },
      err, nullptr, kQuick);
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(err.str(), "");
}

}  // namespace
}  // namespace gpupool::cli
