// Tokens through the API (issue 12): metrics tokens read aggregates only, unknown, expired
// and revoked tokens are 401, last use is written at most once a minute, and creation
// checks names, kinds and expiry.
#include "controller/api_test.h"

namespace gpupool::controller::api_test {
namespace {

TEST_F(ApiAccessTest, MetricsTokenReadsAggregatesOnly) {
  const std::string m = Token(user_, "metrics");
  EXPECT_EQ(WithToken(m, "GET", "/v1/nodes", {}).status, 200);
  EXPECT_EQ(WithToken(m, "GET", "/v1/usage", {}).status, 200);
  net::HttpResponse r = WithToken(m, "GET", "/v1/jobs", {});
  EXPECT_EQ(r.status, 403);
  EXPECT_NE(Error(r).find("metrics token may only read aggregates"), std::string::npos);
  EXPECT_EQ(WithToken(m, "POST", "/v1/jobs", {}, R"({"command": ["id"]})").status, 403);
  EXPECT_EQ(WithToken(m, "GET", "/v1/whoami", {}).status, 403);
  EXPECT_EQ(WithToken(m, "GET", "/v1/agent/work", {{"node", "vm"}}).status, 403);
  EXPECT_EQ(WithToken(m, "GET", "/v1/tokens", {}).status, 403);
  EXPECT_TRUE(store_->ListJobs({})->empty());
}

// Issue 30: a metrics token is a service account. One for a name no account on this host
// has (a Prometheus) is made, reads /metrics and the aggregates, and can do nothing else.
TEST_F(ApiAccessTest, AMetricsTokenIsAServiceAccountWithoutAPosixUser) {
  const std::string name = "gpupool-prometheus-no-such-user";
  ASSERT_FALSE(HasPosixAccount(name));
  net::HttpResponse made =
      AsUid(0, "POST", "/v1/tokens", {}, R"({"user": ")" + name + R"(", "kind": "metrics"})");
  ASSERT_EQ(made.status, 201) << made.body;
  const std::string m = ParseJson(made.body, "answer").value()["token"].get<std::string>();
  // A user token still needs the account.
  net::HttpResponse refused =
      AsUid(0, "POST", "/v1/tokens", {}, R"({"user": ")" + name + R"(", "kind": "user"})");
  EXPECT_EQ(refused.status, 400);
  EXPECT_NE(Error(refused).find("no account"), std::string::npos) << refused.body;
  net::HttpResponse r = WithToken(m, "GET", "/metrics", {});
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find("gpupool_"), std::string::npos);
  EXPECT_EQ(WithToken(m, "GET", "/v1/nodes", {}).status, 200);
  EXPECT_EQ(WithToken(m, "GET", "/v1/usage", {}).status, 200);
  EXPECT_EQ(WithToken(m, "GET", "/v1/telemetry", {}).status, 200);
  for (const auto& [method, path] :
       std::vector<std::pair<std::string, std::string>>{{"GET", "/v1/jobs"},
                                                        {"POST", "/v1/jobs"},
                                                        {"GET", "/v1/whoami"},
                                                        {"GET", "/v1/tokens"},
                                                        {"POST", "/v1/tokens"},
                                                        {"GET", "/v1/agent/work"},
                                                        {"POST", "/v1/nodes/vm/drain"},
                                                        {"GET", "/v1/limits"}}) {
    r = WithToken(m, method, path, {}, R"({"command": ["id"]})");
    EXPECT_EQ(r.status, 403) << method << " " << path << ": " << r.body;
  }
  EXPECT_TRUE(store_->ListJobs({})->empty());
}

TEST_F(ApiAccessTest, UnknownExpiredAndRevokedTokensAre401) {
  net::HttpResponse r = WithToken("gpt_wrong", "GET", "/v1/jobs", {});
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(r.headers["WWW-Authenticate"], "Bearer");
  EXPECT_NE(Error(r).find("unknown or revoked token"), std::string::npos);

  const std::string soon = Token(user_, "user", clock_.NowMicros() + 1'000'000);
  EXPECT_EQ(WithToken(soon, "GET", "/v1/whoami", {}).status, 200);
  clock_.AdvanceMicros(1'000'000);
  r = WithToken(soon, "GET", "/v1/whoami", {});
  EXPECT_EQ(r.status, 401);
  EXPECT_NE(Error(r).find("has expired"), std::string::npos) << r.body;

  const std::string t = Token(user_, "user");
  ASSERT_EQ(WithToken(t, "GET", "/v1/whoami", {}).status, 200);
  auto tokens = store_->ListTokens().value();
  ASSERT_EQ(tokens.size(), 2u);
  const std::string id = TokenId(tokens[1]);
  EXPECT_EQ(AsUid(user_uid_, "DELETE", "/v1/tokens/" + id).status, 403);  // admins only
  EXPECT_EQ(WithToken(t, "GET", "/v1/whoami", {}).status, 200);
  r = AsUid(0, "DELETE", "/v1/tokens/" + id);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(WithToken(t, "GET", "/v1/whoami", {}).status, 401);
  EXPECT_EQ(AsUid(0, "DELETE", "/v1/tokens/" + id).status, 404);
  EXPECT_EQ(AsUid(0, "DELETE", "/v1/tokens/xyz").status, 400);
  EXPECT_EQ(store_->ListTokens()->size(), 1u);  // the expired one is listed until revoked
}

TEST_F(ApiAccessTest, LastUseIsWrittenAtMostOnceAMinute) {
  const std::string t = Token(user_, "user");
  const int64_t t0 = clock_.NowMicros();
  auto last_used = [&] { return store_->ListTokens().value().at(0).last_used_us; };
  EXPECT_EQ(last_used(), 0);
  ASSERT_EQ(WithToken(t, "GET", "/v1/whoami", {}).status, 200);
  EXPECT_EQ(last_used(), t0);
  clock_.AdvanceMicros(30'000'000);
  ASSERT_EQ(WithToken(t, "GET", "/v1/whoami", {}).status, 200);
  EXPECT_EQ(last_used(), t0);  // no write for a use within the minute
  clock_.AdvanceMicros(31'000'000);
  ASSERT_EQ(WithToken(t, "GET", "/v1/whoami", {}).status, 200);
  EXPECT_EQ(last_used(), t0 + 61'000'000);
}

TEST_F(ApiAccessTest, TokenCreationChecksNamesKindsAndExpiry) {
  auto create = [&](const std::string& body) { return AsUid(0, "POST", "/v1/tokens", {}, body); };
  net::HttpResponse r = create(R"({"user": "no-such-user-gpupool", "kind": "user"})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(Error(r).find("no account 'no-such-user-gpupool'"), std::string::npos) << r.body;
  r = create(R"({"user": "bad:name", "kind": "metrics"})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(Error(r).find("not a metrics token's name"), std::string::npos) << r.body;
  r = create(R"({"user": "bad:name", "kind": "user"})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(Error(r).find("not a valid user name"), std::string::npos) << r.body;
  r = create(R"({"user": "-vm", "kind": "node"})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(Error(r).find("not a node name"), std::string::npos) << r.body;
  EXPECT_EQ(create(R"({"user": "vm", "kind": "root"})").status, 400);
  EXPECT_EQ(create(R"({"user": "vm", "kind": "node", "expires_in_s": -1})").status, 400);
  EXPECT_TRUE(store_->ListTokens()->empty());

  EXPECT_EQ(AsUid(user_uid_, "POST", "/v1/tokens", {}, R"({"user": "root"})").status, 403);
  r = create(R"({"user": "gpu-07.rack_2", "kind": "node", "expires_in_s": 3600})");
  ASSERT_EQ(r.status, 201) << r.body;
  Json j = ParseJson(r.body, "answer").value();
  EXPECT_EQ(j["expires_us"].get<int64_t>(), clock_.NowMicros() + 3'600'000'000);
  EXPECT_EQ(j["id"].get<std::string>().size(), 12u);
  r = create(R"({"user": ")" + user_ + R"(", "kind": "metrics"})");
  ASSERT_EQ(r.status, 201) << r.body;
  EXPECT_EQ(ParseJson(r.body, "answer").value()["expires_us"].get<int64_t>(), 0);
  r = AsUid(0, "GET", "/v1/tokens");
  ASSERT_EQ(r.status, 200);
  j = ParseJson(r.body, "answer").value();
  ASSERT_EQ(j["tokens"].size(), 2u);
  EXPECT_EQ(j["tokens"][0]["kind"], "node");
  EXPECT_EQ(j["tokens"][0]["user"], "gpu-07.rack_2");
  EXPECT_TRUE(j["tokens"][0].contains("last_used_us"));
  EXPECT_EQ(j["tokens"][1]["kind"], "metrics");
}

}  // namespace
}  // namespace gpupool::controller::api_test
