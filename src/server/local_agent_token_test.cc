#include "server/local_agent_token.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "controller/auth.h"
#include "store/sqlite_store.h"

namespace gpupool::server {
namespace {

class LocalAgentTokenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("gpupool-agent-token-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    path_ = (dir_ / "agent" / "node-token").string();
    store_ = store::OpenSqliteStore(":memory:").value();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::vector<store::TokenRecord> Tokens() { return store_->ListTokens().value(); }

  std::filesystem::path dir_;
  std::string path_;
  std::unique_ptr<store::Store> store_;
};

// Regression: every `gpupool up` added a node token (12 after 6 starts).
TEST_F(LocalAgentTokenTest, RestartsReuseOneTokenKeptPrivate) {
  const std::string first = LocalAgentToken(*store_, path_, "host1", 100).value();
  struct stat st {};
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  for (int start = 0; start < 5; ++start) {
    EXPECT_EQ(LocalAgentToken(*store_, path_, "host1", 200 + start).value(), first);
  }
  ASSERT_EQ(Tokens().size(), 1u);
  EXPECT_EQ(Tokens()[0].token_hash, controller::HashToken(first));
  EXPECT_EQ(Tokens()[0].kind, "node");
  EXPECT_EQ(Tokens()[0].user, "host1");
}

TEST_F(LocalAgentTokenTest, RevokedExpiredOrRenamedTokensAreReplaced) {
  const std::string first = LocalAgentToken(*store_, path_, "host1", 100).value();
  ASSERT_TRUE(store_->DeleteToken(controller::HashToken(first)).ok());  // revoked
  const std::string second = LocalAgentToken(*store_, path_, "host1", 200).value();
  EXPECT_NE(second, first);
  ASSERT_EQ(Tokens().size(), 1u);

  // Expired: replaced, and its record deleted.
  store::TokenRecord rec = Tokens()[0];
  ASSERT_TRUE(store_->DeleteToken(rec.token_hash).ok());
  rec.expires_us = 300;
  ASSERT_TRUE(store_->PutToken(rec).ok());
  const std::string third = LocalAgentToken(*store_, path_, "host1", 300).value();
  EXPECT_NE(third, second);
  ASSERT_EQ(Tokens().size(), 1u);
  EXPECT_EQ(Tokens()[0].token_hash, controller::HashToken(third));

  // The host was renamed: the old name's token goes.
  const std::string fourth = LocalAgentToken(*store_, path_, "host2", 400).value();
  EXPECT_NE(fourth, third);
  ASSERT_EQ(Tokens().size(), 1u);
  EXPECT_EQ(Tokens()[0].user, "host2");
}

TEST_F(LocalAgentTokenTest, AFileOthersCouldReadIsRevokedAndReplaced) {
  const std::string first = LocalAgentToken(*store_, path_, "host1", 100).value();
  ASSERT_EQ(::chmod(path_.c_str(), 0644), 0);
  const std::string second = LocalAgentToken(*store_, path_, "host1", 200).value();
  EXPECT_NE(second, first);
  struct stat st {};
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(Tokens().size(), 1u);  // the token others could read is revoked
  EXPECT_EQ(Tokens()[0].token_hash, controller::HashToken(second));
}

}  // namespace
}  // namespace gpupool::server
