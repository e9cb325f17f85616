// Conformance tests for Store implementations; each implementation is a test parameter.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "store/store.h"

namespace gpupool::store {
namespace {

using jobs::Job;
using jobs::JobState;

Job MakeJob(const std::string& user) {
  Job j;
  j.user = user;
  j.command = {"true"};
  j.request.gpus = 1;
  return j;
}

class StoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "sqlite-file") {
      dir_ = std::filesystem::temp_directory_path() /
             ("gpupool-store-" + std::to_string(getpid()) + "-" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name());
      std::filesystem::remove_all(dir_);
      std::filesystem::create_directories(dir_);
      path_ = (dir_ / "state.db").string();
    } else {
      path_ = ":memory:";
    }
    auto s = OpenSqliteStore(path_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }
  void TearDown() override {
    store_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  std::filesystem::path dir_;
  std::string path_;
  std::unique_ptr<Store> store_;
};

TEST_P(StoreTest, InsertGetAndList) {
  auto a = store_->InsertJob(MakeJob("alice"));
  auto b = store_->InsertJob(MakeJob("bob"));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_LT(*a, *b);
  auto got = store_->GetJob(*a);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->id, *a);
  EXPECT_EQ(got->user, "alice");
  EXPECT_EQ(store_->GetJob(999).status().code(), StatusCode::kNotFound);

  JobFilter only_bob;
  only_bob.user = "bob";
  auto bobs = store_->ListJobs(only_bob);
  ASSERT_TRUE(bobs.ok());
  ASSERT_EQ(bobs->size(), 1u);
  EXPECT_EQ((*bobs)[0].user, "bob");

  JobFilter limited;
  limited.limit = 1;
  auto newest = store_->ListJobs(limited);
  ASSERT_TRUE(newest.ok());
  ASSERT_EQ(newest->size(), 1u);
  EXPECT_EQ((*newest)[0].id, *b);
}

TEST_P(StoreTest, UpdateIsCompareAndSet) {
  Job j = MakeJob("alice");
  j.id = store_->InsertJob(j).value();
  j.state = JobState::kAssigned;
  j.placement = {{"n1", {0}, {"GPU-1"}, 1000}};
  ASSERT_TRUE(store_->UpdateJob(j, JobState::kPending).ok());
  // A second writer that still believes the job is pending loses.
  Job stale = j;
  stale.state = JobState::kCancelled;
  Status s = store_->UpdateJob(stale, JobState::kPending);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "job " + std::to_string(j.id) + " is ASSIGNED, not PENDING");
  EXPECT_EQ(store_->GetJob(j.id)->state, JobState::kAssigned);

  JobFilter on_n1;
  on_n1.node = "n1";
  EXPECT_EQ(store_->ListJobs(on_n1)->size(), 1u);
  JobFilter active;
  active.active_only = true;
  EXPECT_EQ(store_->ListJobs(active)->size(), 1u);

  Job ghost = MakeJob("x");
  ghost.id = 4242;
  EXPECT_EQ(store_->UpdateJob(ghost, JobState::kPending).code(), StatusCode::kNotFound);
}

TEST_P(StoreTest, BatchUpdateIsAllOrNothing) {
  Job a = MakeJob("a");
  a.id = store_->InsertJob(a).value();
  Job b = MakeJob("b");
  b.id = store_->InsertJob(b).value();
  a.state = JobState::kAssigned;
  b.state = JobState::kAssigned;
  // b's expected state is wrong, so a's update must not be applied either.
  Status s = store_->UpdateJobs({{a, JobState::kPending}, {b, JobState::kRunning}});
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->GetJob(a.id)->state, JobState::kPending);
  EXPECT_TRUE(store_->UpdateJobs({{a, JobState::kPending}, {b, JobState::kPending}}).ok());
  EXPECT_EQ(store_->GetJob(b.id)->state, JobState::kAssigned);
}

TEST_P(StoreTest, SettingsAreReplacedWhole) {
  EXPECT_FALSE(store_->GetSetting("limits")->has_value());
  ASSERT_TRUE(store_->PutSetting("limits", R"({"users": {}})").ok());
  ASSERT_TRUE(store_->PutSetting("limits", R"({"users": {"a": {}}})").ok());
  EXPECT_EQ(store_->GetSetting("limits")->value(), R"({"users": {"a": {}}})");
  EXPECT_FALSE(store_->GetSetting("other")->has_value());
}

TEST_P(StoreTest, NodesAndTokens) {
  NodeRecord n{"gpu01", "{}", "unix:/x", 8000, 65536, 1, 2, false, "10.0.0.7", "1.1"};
  ASSERT_TRUE(store_->PutNode(n).ok());
  n.last_heartbeat_us = 5;
  n.draining = true;  // `gpupool node drain`, with its reason
  n.drain_reason = "disk swap (root)";
  ASSERT_TRUE(store_->PutNode(n).ok());
  auto nodes = store_->ListNodes();
  ASSERT_TRUE(nodes.ok());
  ASSERT_EQ(nodes->size(), 1u);
  EXPECT_EQ((*nodes)[0], n);

  TokenRecord t{"abc123", "alice", "user", 7};
  ASSERT_TRUE(store_->PutToken(t).ok());
  EXPECT_FALSE(store_->PutToken(t).ok());  // duplicate hash
  EXPECT_EQ(store_->FindToken("abc123")->value(), t);
  EXPECT_FALSE(store_->FindToken("nope")->has_value());
  EXPECT_EQ(store_->ListTokens()->size(), 1u);
  EXPECT_TRUE(store_->DeleteToken("abc123").ok());
  EXPECT_EQ(store_->DeleteToken("abc123").code(), StatusCode::kNotFound);
}

TEST_P(StoreTest, TokensKeepTheirExpiryAndLastUse) {
  TokenRecord never{"h-never", "alice", "user", 10};
  TokenRecord expiring{"h-expiring", "gpu7", "node", 11, /*expires_us=*/5000};
  ASSERT_TRUE(store_->PutToken(never).ok());
  ASSERT_TRUE(store_->PutToken(expiring).ok());
  EXPECT_EQ(store_->FindToken("h-expiring")->value(), expiring);
  EXPECT_EQ(store_->FindToken("h-never")->value().expires_us, 0);
  EXPECT_EQ(store_->FindToken("h-never")->value().last_used_us, 0);

  ASSERT_TRUE(store_->TouchToken("h-never", 4242).ok());
  EXPECT_EQ(store_->FindToken("h-never")->value().last_used_us, 4242);
  EXPECT_EQ(store_->FindToken("h-expiring")->value(), expiring);  // only the one touched
  EXPECT_EQ(store_->TouchToken("h-gone", 1).code(), StatusCode::kNotFound);

  auto list = store_->ListTokens();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  never.last_used_us = 4242;
  EXPECT_EQ((*list)[0], never);  // oldest first
  EXPECT_EQ((*list)[1], expiring);
}

TEST_P(StoreTest, EnvironmentsAreImmutableAndListedInOrder) {
  EnvironmentRecord a{"torch", "2.4", "image", "localhost/torch:2.4", R"({"source":"x"})",
                      "alice", 10};
  EnvironmentRecord b{"torch", "1.13", "dir", "/opt/envs/torch-1.13", "{}", "bob", 11};
  EnvironmentRecord c{"jax", "0.4", "image", "localhost/jax:0.4", "{}", "alice", 12};
  a.image_id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";  // pinned
  b.dir_digest = "sha256:00ff";
  for (const auto* e : {&a, &b, &c}) ASSERT_TRUE(store_->PutEnvironment(*e).ok());
  EnvironmentRecord again = a;
  again.location = "localhost/other:1";
  Status dup = store_->PutEnvironment(again);
  EXPECT_EQ(dup.code(), StatusCode::kAlreadyExists);
  EXPECT_NE(dup.message().find("torch:2.4 already exists"), std::string::npos);
  auto found = store_->FindEnvironment("torch", "2.4");
  ASSERT_TRUE(found.ok());
  ASSERT_TRUE(found->has_value());
  EXPECT_EQ(**found, a);  // the first registration stands
  EXPECT_FALSE(store_->FindEnvironment("torch", "9")->has_value());
  auto list = store_->ListEnvironments();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ((*list)[0], c);
  EXPECT_EQ((*list)[1], b);  // "1.13" < "2.4" as text
  EXPECT_EQ((*list)[2], a);
  EXPECT_TRUE(store_->DeleteEnvironment("torch", "1.13").ok());
  EXPECT_EQ(store_->DeleteEnvironment("torch", "1.13").code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->ListEnvironments()->size(), 2u);
}

TEST_P(StoreTest, ConcurrentWritersNeverLoseJobs) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 50;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        if (!store_->InsertJob(MakeJob("u" + std::to_string(t))).ok()) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(store_->ListJobs({})->size(), size_t{kThreads * kPerThread});
}

INSTANTIATE_TEST_SUITE_P(Sqlite, StoreTest, ::testing::Values("sqlite-memory", "sqlite-file"),
                         [](const auto& param_info) {
                           return param_info.param == "sqlite-file" ? "File" : "Memory";
                         });

TEST(SqliteStoreTest, SurvivesReopenAndRefusesNewerSchema) {
  auto dir =
      std::filesystem::temp_directory_path() / ("gpupool-reopen-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "state.db").string();
  int64_t id = 0;
  {
    auto s = OpenSqliteStore(path);
    ASSERT_TRUE(s.ok());
    id = (*s)->InsertJob(MakeJob("alice")).value();
  }
  {
    auto s = OpenSqliteStore(path);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ((*s)->GetJob(id)->user, "alice");
  }
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "PRAGMA user_version=99", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
  }
  auto newer = OpenSqliteStore(path);
  ASSERT_FALSE(newer.ok());
  EXPECT_EQ(newer.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(newer.status().message().find("newer than this gpupool understands"),
            std::string::npos);
  auto bad = OpenSqliteStore("/nonexistent-dir/state.db");
  EXPECT_EQ(bad.status().code(), StatusCode::kUnavailable);
  std::filesystem::remove_all(dir);
}

// A store written before tokens could expire: its tokens never expire and were never used.
TEST(SqliteStoreTest, MigratesTokensOfTheFirstSchema) {
  auto dir =
      std::filesystem::temp_directory_path() / ("gpupool-migrate-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "state.db").string();
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    const char* v1 =
        "CREATE TABLE tokens (token_hash TEXT PRIMARY KEY, user TEXT NOT NULL, kind TEXT NOT "
        "NULL, created_us INTEGER NOT NULL);"
        "INSERT INTO tokens VALUES('old-hash', 'alice', 'user', 77);"
        "CREATE TABLE jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, user TEXT NOT NULL, state "
        "TEXT NOT NULL, node TEXT NOT NULL DEFAULT '', end_time_us INTEGER NOT NULL DEFAULT 0, "
        "body TEXT NOT NULL);"
        "CREATE TABLE nodes (name TEXT PRIMARY KEY, info_json TEXT NOT NULL, agent_url TEXT NOT "
        "NULL, cpu_milli INTEGER NOT NULL, memory_mib INTEGER NOT NULL, registered_us INTEGER "
        "NOT NULL, last_heartbeat_us INTEGER NOT NULL, draining INTEGER NOT NULL);"
        "PRAGMA user_version=1;";
    ASSERT_EQ(sqlite3_exec(db, v1, nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
  }
  auto s = OpenSqliteStore(path);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)->FindToken("old-hash")->value(), (TokenRecord{"old-hash", "alice", "user", 77}));
  ASSERT_TRUE((*s)->TouchToken("old-hash", 99).ok());
  EXPECT_EQ((*s)->FindToken("old-hash")->value().last_used_us, 99);
  s->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gpupool::store
