#include "controller/endpoint_access.h"

#include <gtest/gtest.h>

namespace gpupool::controller {
namespace {

Identity Of(CallerKind kind, bool local_root = false) {
  Identity id;
  id.kind = kind;
  id.any_local_agent = local_root;
  if (kind == CallerKind::kNode) id.node = "vm2";
  return id;
}

bool May(const Identity& who, const char* method, const char* path) {
  return MayCall(who, method, path).ok();
}

TEST(EndpointAccessTest, EachKindReachesOnlyItsEndpoints) {
  const Identity user = Of(CallerKind::kUser);
  const Identity admin = Of(CallerKind::kAdmin);
  const Identity root = Of(CallerKind::kAdmin, /*local_root=*/true);
  const Identity node = Of(CallerKind::kNode);
  const Identity metrics = Of(CallerKind::kMetrics);

  for (const char* p : {"/v1/agent/register", "/v1/agent/work", "/v1/agent/events"}) {
    EXPECT_TRUE(May(node, "POST", p));
    EXPECT_TRUE(May(root, "POST", p));
    EXPECT_FALSE(May(user, "POST", p));
    EXPECT_FALSE(May(admin, "POST", p));
    EXPECT_FALSE(May(metrics, "POST", p));
  }
  for (const char* p : {"/v1/jobs", "/v1/jobs/3", "/v1/jobs/3/logs", "/v1/whoami",
                        "/v1/environments", "/v1/nope"}) {
    EXPECT_TRUE(May(user, "GET", p)) << p;
    EXPECT_TRUE(May(admin, "GET", p)) << p;
    EXPECT_FALSE(May(node, "GET", p)) << p;
    EXPECT_FALSE(May(metrics, "GET", p)) << p;
  }
  EXPECT_FALSE(May(node, "POST", "/v1/jobs"));
  for (const char* p : {"/v1/nodes", "/v1/usage"}) {
    EXPECT_TRUE(May(metrics, "GET", p));
    EXPECT_TRUE(May(user, "GET", p));
    EXPECT_FALSE(May(metrics, "POST", p));
    EXPECT_FALSE(May(node, "GET", p));
  }
  EXPECT_TRUE(May(metrics, "GET", "/metrics"));
  EXPECT_FALSE(May(user, "GET", "/metrics"));
  for (const char* p : {"/v1/tokens", "/v1/tokens/0123456789ab"}) {
    EXPECT_TRUE(May(admin, "DELETE", p));
    EXPECT_FALSE(May(user, "DELETE", p));
    EXPECT_FALSE(May(node, "DELETE", p));
    EXPECT_FALSE(May(metrics, "GET", p));
  }
  // A prefix rule matches whole segments only: "/v1/agentx" is no agent endpoint.
  EXPECT_FALSE(May(node, "GET", "/v1/agentx"));
  EXPECT_FALSE(May(node, "GET", "/v1/tokensx"));
}

TEST(EndpointAccessTest, RefusalsSayWhoAndWhatInstead) {
  Status s = MayCall(Of(CallerKind::kNode), "POST", "/v1/jobs");
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(),
            "a node token (node vm2) may only call the agent endpoints /v1/agent/*, not POST "
            "/v1/jobs: use a user token, or the Unix socket");
  s = MayCall(Of(CallerKind::kUser), "GET", "/v1/agent/work");
  EXPECT_NE(s.message().find("use a node token"), std::string::npos) << s.message();
  s = MayCall(Of(CallerKind::kUser), "POST", "/v1/tokens");
  EXPECT_EQ(s.message(), "only admins manage tokens");
}

TEST(EndpointAccessTest, NodeTokensActOnlyForTheirNode) {
  const Identity node = Of(CallerKind::kNode);
  std::string n;
  ASSERT_TRUE(ActAsNode(node, &n).ok());
  EXPECT_EQ(n, "vm2");  // absent means its own
  n = "vm2";
  EXPECT_TRUE(ActAsNode(node, &n).ok());
  n = "vm";
  Status s = ActAsNode(node, &n);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("this token belongs to node vm2; it cannot act for node vm"),
            std::string::npos)
      << s.message();
  n = "anything";
  EXPECT_TRUE(ActAsNode(Of(CallerKind::kAdmin, /*local_root=*/true), &n).ok());
  EXPECT_EQ(n, "anything");
  EXPECT_FALSE(ActAsNode(Of(CallerKind::kAdmin), &n).ok());
  EXPECT_FALSE(ActAsNode(Of(CallerKind::kMetrics), &n).ok());
}

}  // namespace
}  // namespace gpupool::controller
