#include "controller/tokens.h"

#include <gtest/gtest.h>

#include "store/sqlite_store.h"

namespace gpupool::controller {
namespace {

TEST(TokensTest, NodeAndUserNameGrammars) {
  for (const char* ok : {"vm", "gpu-07.rack_2", "7node"}) EXPECT_TRUE(IsNodeName(ok)) << ok;
  EXPECT_TRUE(IsNodeName(std::string(64, 'a')));
  for (const char* bad : {"", "-vm", ".vm", "_vm", "vm 2", "vm/2", "vm:2", "vm\n"}) {
    EXPECT_FALSE(IsNodeName(bad)) << bad;
  }
  EXPECT_FALSE(IsNodeName(std::string(65, 'a')));
  for (const char* ok : {"alice", "gpsec-alice", "_svc", "a.b", "A1"}) {
    EXPECT_TRUE(IsPosixUserName(ok)) << ok;
  }
  for (const char* bad : {"", "-alice", "al ice", "al:ice", "node:vm", "al/ice", "x\n"}) {
    EXPECT_FALSE(IsPosixUserName(bad)) << bad;
  }
  EXPECT_FALSE(IsPosixUserName(std::string(33, 'a')));
}

TEST(TokensTest, SubjectsAreCheckedPerKind) {
  EXPECT_TRUE(ValidateTokenSubject("user", "root").ok());
  EXPECT_TRUE(ValidateTokenSubject("metrics", "root").ok());
  // A metrics token is a service account: its name needs no account on this host.
  EXPECT_TRUE(ValidateTokenSubject("metrics", "gpupool-no-such-user").ok());
  EXPECT_TRUE(ValidateTokenSubject("metrics", "prometheus.site-2").ok());
  Status s = ValidateTokenSubject("metrics", "prom etheus");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("user: 'prom etheus' is not a metrics token's name", 0), 0u)
      << s.message();
  EXPECT_TRUE(ValidateTokenSubject("node", "vm2").ok());  // a node needs no account
  s = ValidateTokenSubject("user", "gpupool-no-such-user");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("user: there is no account 'gpupool-no-such-user'", 0), 0u)
      << s.message();
  s = ValidateTokenSubject("node", "vm 2");
  EXPECT_EQ(s.message().rfind("user: 'vm 2' is not a node name", 0), 0u) << s.message();
  EXPECT_EQ(ValidateTokenSubject("admin", "root").message(), "kind: use user, node or metrics");
}

TEST(TokensTest, IdsFindExactlyOneToken) {
  auto store = store::OpenSqliteStore(":memory:").value();
  const std::string a(64, 'a');
  const std::string b = std::string(12, 'a') + std::string(52, 'b');  // same 12-digit id
  const std::string c(64, 'c');
  for (const std::string& h : {a, b, c}) ASSERT_TRUE(store->PutToken({h, "x", "user", 1}).ok());
  EXPECT_EQ(FindTokenById(*store, "cccccccccccc")->token_hash, c);
  EXPECT_EQ(FindTokenById(*store, c)->token_hash, c);
  Result<store::TokenRecord> r = FindTokenById(*store, "aaaaaaaaaaaa");
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("matches 2 tokens"), std::string::npos);
  EXPECT_EQ(FindTokenById(*store, "aaaaaaaaaaaab")->token_hash, b);
  EXPECT_EQ(FindTokenById(*store, "dddddddddddd").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(FindTokenById(*store, "ccc").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FindTokenById(*store, "CCCCCCCCCCCC").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(TokenId({c, "x", "user", 1}), "cccccccccccc");
}

}  // namespace
}  // namespace gpupool::controller
