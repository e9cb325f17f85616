#include "net/http_status.h"

#include <gtest/gtest.h>

namespace gpupool::net {
namespace {

// What the server answers for each code, and what a client reads back from it: every code
// the server sends comes back as itself, except AlreadyExists (409, which clients read as
// FailedPrecondition) and Internal and OK (no error).
TEST(HttpStatusTest, EachCodeMapsToOneStatusAndBack) {
  const std::pair<StatusCode, int> kExpected[] = {
      {StatusCode::kInvalidArgument, 400},    {StatusCode::kPermissionDenied, 403},
      {StatusCode::kNotFound, 404},           {StatusCode::kAlreadyExists, 409},
      {StatusCode::kFailedPrecondition, 409}, {StatusCode::kResourceExhausted, 413},
      {StatusCode::kUnimplemented, 501},      {StatusCode::kUnavailable, 503},
      {StatusCode::kInternal, 500},
  };
  for (const auto& [code, http] : kExpected) {
    EXPECT_EQ(HttpStatusOf(code), http) << StatusCodeName(code);
    if (code != StatusCode::kAlreadyExists) {
      EXPECT_EQ(StatusCodeOfHttp(http), code) << http;
    }
  }
  EXPECT_EQ(StatusCodeOfHttp(409), StatusCode::kFailedPrecondition);
  EXPECT_EQ(StatusCodeOfHttp(401), StatusCode::kPermissionDenied);
  EXPECT_EQ(StatusCodeOfHttp(429), StatusCode::kResourceExhausted);
  EXPECT_EQ(StatusCodeOfHttp(502), StatusCode::kInternal);
  EXPECT_EQ(StatusCodeOfHttp(418), StatusCode::kInternal);
}

TEST(HttpStatusTest, OnlyTooManyAndServerErrorsAreWorthAskingAgain) {
  for (int s : {429, 500, 502, 503, 504}) EXPECT_TRUE(HttpStatusIsTransient(s)) << s;
  for (int s : {400, 401, 403, 404, 409, 413}) EXPECT_FALSE(HttpStatusIsTransient(s)) << s;
}

TEST(HttpStatusTest, TheErrorCarriesTheServersOwnMessage) {
  Status s = StatusFromHttp(404, R"({"error": "no job 17; see gpupool queue"})");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "no job 17; see gpupool queue");
  EXPECT_EQ(StatusFromHttp(400, "{}").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(StatusFromHttp(401, "").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(StatusFromHttp(409, "").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(StatusFromHttp(413, "").code(), StatusCode::kResourceExhausted);
  // Unavailable for now (a standby when no leader answered, a server shutting down).
  Status standby = StatusFromHttp(
      503, R"({"error": "this controller is a standby; the leader is ", "leader": ""})");
  EXPECT_EQ(standby.code(), StatusCode::kUnavailable);
  EXPECT_EQ(standby.message(), "this controller is a standby; the leader is ");
  // No error text: the status, and a short body as it came (valid UTF-8).
  EXPECT_EQ(StatusFromHttp(502, "Bad Gateway").message(),
            "the server answered HTTP 502: Bad Gateway");
  EXPECT_EQ(StatusFromHttp(500, R"({"error": 5})").message(),
            "the server answered HTTP 500: {\"error\": 5}");
  EXPECT_EQ(StatusFromHttp(500, std::string(400, 'x')).message(), "the server answered HTTP 500");
  EXPECT_EQ(StatusFromHttp(500, "\xff").message(), "the server answered HTTP 500: ?");
}

}  // namespace
}  // namespace gpupool::net
