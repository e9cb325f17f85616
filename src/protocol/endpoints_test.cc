#include "protocol/endpoints.h"

#include <gtest/gtest.h>

#include <map>

namespace gpupool::protocol {
namespace {

// The answer as the controller reads it back from the query and body the agent sends.
Result<LogAnswer> RoundTrip(const LogAnswer& a) {
  std::map<std::string, std::string> q;
  for (const auto& [k, v] : LogAnswerQuery(a)) q[k] = v;
  return DecodeLogAnswer([&](const std::string& k) { return q.count(k) ? q.at(k) : ""; },
                         LogAnswerBody(a));
}

Result<LogAnswer> Decode(std::map<std::string, std::string> q, std::string body = "") {
  return DecodeLogAnswer([&](const std::string& k) { return q.count(k) ? q.at(k) : ""; },
                         std::move(body));
}

TEST(LogAnswerTest, BytesAndEachErrorSurviveTheTrip) {
  LogAnswer bytes{"n1", 7, Status::Ok(), std::string("a\0b\n", 4), 99};
  Result<LogAnswer> got = RoundTrip(bytes);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->node, "n1");
  EXPECT_EQ(got->id, 7);
  EXPECT_TRUE(got->status.ok());
  EXPECT_EQ(got->data, bytes.data);
  EXPECT_EQ(got->size, 99);
  for (const Status& s : {Status::NotFound("no file"), Status::PermissionDenied("not a log"),
                          Status::Unavailable("EIO"), Status::Internal("odd")}) {
    SCOPED_TRACE(s.ToString());
    Result<LogAnswer> e = RoundTrip({"n1", 8, s, "ignored", 0});
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    // What the controller cannot tell apart is an I/O error.
    EXPECT_EQ(e->status.code(),
              s.code() == StatusCode::kInternal ? StatusCode::kUnavailable : s.code());
    EXPECT_EQ(e->status.message(), s.message());
  }
}

TEST(LogAnswerTest, BadParametersAreNamed) {
  EXPECT_EQ(Decode({{"node", "n"}}).status().message(), "id: the request's id");
  EXPECT_EQ(Decode({{"id", "0"}}).status().message(),
            "query parameter id='0' must be an integer in 1..9223372036854775807");
  EXPECT_EQ(Decode({{"id", "1"}, {"size", "-1"}}).status().message(),
            "query parameter size='-1' must be an integer in 0..9223372036854775807");
  EXPECT_EQ(Decode({{"id", "1"}, {"error", "gone"}}).status().message(),
            "error: use not_found, refused or io");
  EXPECT_TRUE(Decode({{"id", "1"}}).ok());  // no size: 0
}

TEST(EndpointsTest, ExecPathsFillTheRoutePatterns) {
  EXPECT_EQ(ExecInputPath(42), "/v1/agent/exec/42/input");
  EXPECT_EQ(ExecOutputPath(42), "/v1/agent/exec/42/output");
  std::string in = kExecInputPattern;
  in.replace(in.find("{id}"), 4, "42");
  EXPECT_EQ(in, ExecInputPath(42));
  std::string out = kExecOutputPattern;
  out.replace(out.find("{id}"), 4, "42");
  EXPECT_EQ(out, ExecOutputPath(42));
}

}  // namespace
}  // namespace gpupool::protocol
