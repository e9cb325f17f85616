#include "controller/api.h"

#include <gtest/gtest.h>

namespace gpupool::controller {
namespace {

net::HttpRequest Req(const std::string& method, const std::string& path,
                     std::map<std::string, std::string> query = {}, std::string body = "") {
  net::HttpRequest r;
  r.method = method;
  r.path = path;
  r.query = std::move(query);
  r.body = std::move(body);
  return r;
}

// Which requests get a thread of their own (net::HttpServerOptions::may_block): those
// that wait (long polls, log reads, image inspections), and no others, so the pool
// threads stay few and quick.
TEST(ApiTest, MayBlockPicksTheRequestsThatWait) {
  EXPECT_TRUE(Api::MayBlock(Req("GET", "/v1/agent/work", {{"node", "n"}, {"wait_ms", "10000"}})));
  EXPECT_FALSE(Api::MayBlock(Req("GET", "/v1/agent/work", {{"node", "n"}, {"wait_ms", "0"}})));
  EXPECT_TRUE(Api::MayBlock(Req("GET", "/v1/jobs/12/logs")));  // relayed from the node
  EXPECT_TRUE(Api::MayBlock(Req("GET", "/v1/jobs/12/logs", {{"wait_ms", "500"}})));
  EXPECT_TRUE(Api::MayBlock(Req("POST", "/v1/environments", {}, "{}")));
  EXPECT_TRUE(Api::MayBlock(Req("POST", "/v1/environments/x:1/check")));
  EXPECT_TRUE(Api::MayBlock(Req("POST", "/v1/jobs", {}, R"({"image": "ubuntu", "command": []})")));

  EXPECT_FALSE(Api::MayBlock(Req("POST", "/v1/jobs", {}, R"({"command": ["true"]})")));
  EXPECT_FALSE(Api::MayBlock(Req("GET", "/v1/jobs")));
  EXPECT_FALSE(Api::MayBlock(Req("GET", "/v1/jobs/12")));
  EXPECT_FALSE(Api::MayBlock(Req("POST", "/v1/jobs/12/cancel")));
  EXPECT_FALSE(Api::MayBlock(Req("POST", "/v1/agent/logs", {{"id", "1"}}, "bytes")));
  EXPECT_FALSE(Api::MayBlock(Req("POST", "/v1/agent/events", {}, "{}")));
  EXPECT_FALSE(Api::MayBlock(Req("GET", "/v1/nodes")));
  EXPECT_FALSE(Api::MayBlock(Req("GET", "/v1/environments")));
}

}  // namespace
}  // namespace gpupool::controller
