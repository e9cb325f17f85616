#include "cli/client/api_client.h"

#include <gtest/gtest.h>

namespace gpupool::cli {
namespace {

TEST(ResolveServerAddressTest, FlagThenEnvThenDefaultSocket) {
  auto a = ResolveServerAddress("unix:/flag.sock", "unix:/env.sock", 1000, "", "/home/a");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->path, "/flag.sock");
  a = ResolveServerAddress("", "http://127.0.0.1:8421", 1000, "", "/home/a");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->kind, net::ServerAddress::Kind::kTcp);
  EXPECT_EQ(a->port, 8421);
  EXPECT_EQ(ResolveServerAddress("", "", 0, "/x", "/root")->path, "/var/lib/gpupool/gpupool.sock");
  EXPECT_EQ(ResolveServerAddress("", "", 1000, "/xdg", "/home/a")->path,
            "/xdg/gpupool/gpupool.sock");
  EXPECT_EQ(ResolveServerAddress("", "", 1000, "", "/home/a")->path,
            "/home/a/.local/state/gpupool/gpupool.sock");
  // A relative XDG_STATE_HOME is invalid by the XDG spec and is ignored.
  EXPECT_EQ(ResolveServerAddress("", "", 1000, "rel", "/home/a")->path,
            "/home/a/.local/state/gpupool/gpupool.sock");
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

TEST(StatusFromHttpTest, CodesAndTheServersOwnMessage) {
  Status s = StatusFromHttp(404, R"({"error": "no job 17; see gpupool queue"})");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "no job 17; see gpupool queue");
  EXPECT_EQ(StatusFromHttp(400, "{}").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(StatusFromHttp(401, "").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(StatusFromHttp(403, "").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(StatusFromHttp(409, "").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(StatusFromHttp(413, "").code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(StatusFromHttp(500, "").code(), StatusCode::kInternal);
  EXPECT_EQ(StatusFromHttp(502, "Bad Gateway").message(),
            "the server answered HTTP 502: Bad Gateway");
  EXPECT_EQ(StatusFromHttp(500, R"({"error": 5})").message(),
            "the server answered HTTP 500: {\"error\": 5}");
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

}  // namespace
}  // namespace gpupool::cli
