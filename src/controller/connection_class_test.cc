#include "controller/connection_class.h"

#include <gtest/gtest.h>

#include "controller/auth.h"
#include "store/sqlite_store.h"

namespace gpupool::controller {
namespace {

using net::ConnectionClass;

net::HttpRequest Head(const std::string& authorization, bool on_socket = false) {
  net::HttpRequest r;
  r.method = "GET";
  r.path = "/v1/agent/work";
  if (!authorization.empty()) r.headers["authorization"] = authorization;
  if (on_socket) r.peer = net::PeerCredentials{1, 1000, 1000};
  return r;
}

TEST(ConnectionClassifierTest, NodeTokensAreAgentsValidTokensAndSocketUidsUsersTheRestAnonymous) {
  auto store = store::OpenSqliteStore(":memory:").value();
  ManualClock clock(1'000'000'000);
  ASSERT_TRUE(store->PutToken({HashToken("gpt_node"), "vm", "node", 1}).ok());
  ASSERT_TRUE(store->PutToken({HashToken("gpt_user"), "alice", "user", 1}).ok());
  ASSERT_TRUE(store->PutToken({HashToken("gpt_metrics"), "prom", "metrics", 1}).ok());
  store::TokenRecord old{HashToken("gpt_expired"), "vm2", "node", 1};
  old.expires_us = 999'000'000;
  ASSERT_TRUE(store->PutToken(old).ok());
  ConnectionClassifier c(store.get(), &clock);
  EXPECT_EQ(c.Classify(Head("Bearer gpt_node")), ConnectionClass::kReserved);
  EXPECT_EQ(c.Classify(Head("Bearer gpt_node", /*on_socket=*/true)), ConnectionClass::kReserved);
  EXPECT_EQ(c.Classify(Head("Bearer gpt_user")), ConnectionClass::kUser);
  EXPECT_EQ(c.Classify(Head("Bearer gpt_metrics")), ConnectionClass::kUser);
  EXPECT_EQ(c.Classify(Head("", /*on_socket=*/true)), ConnectionClass::kUser);
  EXPECT_EQ(c.Classify(Head("")), ConnectionClass::kAnonymous);
  EXPECT_EQ(c.Classify(Head("Bearer gpt_unknown")), ConnectionClass::kAnonymous);
  EXPECT_EQ(c.Classify(Head("Bearer gpt_expired")), ConnectionClass::kAnonymous);
  EXPECT_EQ(c.Classify(Head("Bearer ")), ConnectionClass::kAnonymous);
  EXPECT_EQ(c.Classify(Head("Basic gpt_node")), ConnectionClass::kAnonymous);
}

TEST(ConnectionClassifierTest, ATokenIsAskedForAgainAfterAMinute) {
  auto store = store::OpenSqliteStore(":memory:").value();
  ManualClock clock(1'000'000'000);
  ASSERT_TRUE(store->PutToken({HashToken("gpt_node"), "vm", "node", 1}).ok());
  ConnectionClassifier c(store.get(), &clock);
  EXPECT_EQ(c.Classify(Head("Bearer gpt_node")), ConnectionClass::kReserved);
  ASSERT_TRUE(store->DeleteToken(HashToken("gpt_node")).ok());
  // Remembered for a minute: capacity only, the API authenticates each request itself.
  EXPECT_EQ(c.Classify(Head("Bearer gpt_node")), ConnectionClass::kReserved);
  clock.AdvanceMicros(ConnectionClassifier::kRememberUs);
  EXPECT_EQ(c.Classify(Head("Bearer gpt_node")), ConnectionClass::kAnonymous);
}

}  // namespace
}  // namespace gpupool::controller
