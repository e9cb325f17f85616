#include "store/store_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "store/sqlite_store.h"

namespace gpupool::store {
namespace {

// One connection of a pool over a shared in-memory database; GetSetting("slow") waits at
// a gate, as a statement that the database holds for long.
class Member final : public Store {
 public:
  struct Gate {
    std::mutex m;
    std::condition_variable cv;
    bool open = false;
    int waiting = 0;
  };
  Member(Store* db, Gate* gate) : db_(db), gate_(gate) {}
  int64_t fence = 0;

  Result<std::optional<std::string>> GetSetting(std::string_view key) override {
    if (key == "slow") {
      std::unique_lock l(gate_->m);
      ++gate_->waiting;
      gate_->cv.notify_all();
      gate_->cv.wait(l, [&] { return gate_->open; });
      --gate_->waiting;
    }
    return db_->GetSetting(key);
  }
  void SetFence(int64_t epoch, std::function<void(const Status&)>) override { fence = epoch; }

  Result<std::vector<jobs::Job>> InsertJobs(std::vector<jobs::Job> j, InsertAs as) override {
    return db_->InsertJobs(std::move(j), as);
  }
  Result<std::optional<int64_t>> FindSubmitKey(uint32_t u, std::string_view k) override {
    return db_->FindSubmitKey(u, k);
  }
  Result<jobs::Job> GetJob(int64_t id) override { return db_->GetJob(id); }
  Result<std::vector<jobs::Job>> ListJobs(const JobFilter& f) override { return db_->ListJobs(f); }
  Status UpdateJobs(const std::vector<JobUpdate>& u, std::vector<JobConflict>* c) override {
    return db_->UpdateJobs(u, c);
  }
  Result<std::vector<PreemptHoldRecord>> ListPreemptHolds() override {
    return db_->ListPreemptHolds();
  }
  Status DeletePreemptHold(int64_t p) override { return db_->DeletePreemptHold(p); }
  Status PutNode(const NodeRecord& n) override { return db_->PutNode(n); }
  Result<std::vector<NodeRecord>> ListNodes() override { return db_->ListNodes(); }
  Status PutToken(const TokenRecord& t) override { return db_->PutToken(t); }
  Result<std::optional<TokenRecord>> FindToken(std::string_view h) override {
    return db_->FindToken(h);
  }
  Result<std::vector<TokenRecord>> ListTokens() override { return db_->ListTokens(); }
  Status PutTelemetry(const std::vector<TelemetryRecord>& p) override {
    return db_->PutTelemetry(p);
  }
  Result<std::vector<TelemetryRecord>> ListTelemetry(const TelemetryQuery& q) override {
    return db_->ListTelemetry(q);
  }
  Result<int64_t> DeleteTelemetryBefore(int64_t before) override {
    return db_->DeleteTelemetryBefore(before);
  }
  Status DeleteToken(std::string_view h) override { return db_->DeleteToken(h); }
  Status TouchToken(std::string_view h, int64_t t) override { return db_->TouchToken(h, t); }
  Status PutEnvironment(const EnvironmentRecord& e) override { return db_->PutEnvironment(e); }
  Result<std::optional<EnvironmentRecord>> FindEnvironment(std::string_view n,
                                                           std::string_view v) override {
    return db_->FindEnvironment(n, v);
  }
  Result<std::vector<EnvironmentRecord>> ListEnvironments() override {
    return db_->ListEnvironments();
  }
  Status DeleteEnvironment(std::string_view n, std::string_view v) override {
    return db_->DeleteEnvironment(n, v);
  }
  Status PutSetting(std::string_view k, std::string_view v) override {
    return db_->PutSetting(k, v);
  }

 private:
  Store* db_;
  Gate* gate_;
};

class StorePoolTest : public ::testing::Test {
 protected:
  void SetUp() override { db_ = OpenSqliteStore(":memory:").value(); }
  std::unique_ptr<Store> Pool(int n) {
    std::vector<std::unique_ptr<Store>> members;
    for (int i = 0; i < n; ++i) {
      auto m = std::make_unique<Member>(db_.get(), &gate_);
      members_.push_back(m.get());
      members.push_back(std::move(m));
    }
    return MakeStorePool(std::move(members)).value();
  }
  void WaitForSlowCalls(int n) {
    std::unique_lock l(gate_.m);
    gate_.cv.wait(l, [&] { return gate_.waiting == n; });
  }
  void Open() {
    std::lock_guard l(gate_.m);
    gate_.open = true;
    gate_.cv.notify_all();
  }
  std::unique_ptr<Store> db_;
  Member::Gate gate_;
  std::vector<Member*> members_;
};

TEST_F(StorePoolTest, ASlowCallHoldsOneMemberAndTheOthersGoOn) {
  auto pool = Pool(2);
  std::thread slow([&] { EXPECT_TRUE(pool->GetSetting("slow").ok()); });
  WaitForSlowCalls(1);
  jobs::Job j;
  j.command = {"true"};
  const int64_t id = pool->InsertJob(j).value();  // not behind the slow call
  EXPECT_EQ(pool->GetJob(id)->id, id);
  ASSERT_TRUE(pool->PutSetting("k", "v").ok());
  EXPECT_EQ(pool->GetSetting("k")->value_or(""), "v");
  Open();
  slow.join();
}

TEST_F(StorePoolTest, WhenEveryMemberIsBusyACallWaitsForOne) {
  auto pool = Pool(2);
  std::thread a([&] { EXPECT_TRUE(pool->GetSetting("slow").ok()); });
  std::thread b([&] { EXPECT_TRUE(pool->GetSetting("slow").ok()); });
  WaitForSlowCalls(2);
  std::atomic<bool> done{false};
  std::thread c([&] {
    EXPECT_TRUE(pool->ListNodes().ok());
    done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(done);  // no member free
  Open();
  a.join();
  b.join();
  c.join();
  EXPECT_TRUE(done);
}

// The telemetry calls reach a member (not the interface's Unimplemented default).
TEST_F(StorePoolTest, TelemetryCallsAreForwarded) {
  auto pool = Pool(2);
  const TelemetryRecord point{"gpu", "n1/0", 60'000, 50, 1, 50, 10, 0, 1};
  ASSERT_TRUE(pool->PutTelemetry({point}).ok());
  Result<std::vector<TelemetryRecord>> listed = pool->ListTelemetry({});
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_EQ(*listed, std::vector<TelemetryRecord>{point});
  EXPECT_EQ(pool->DeleteTelemetryBefore(120'000).value_or(-1), 1);
}

TEST_F(StorePoolTest, FencingReachesEveryMember) {
  auto pool = Pool(3);
  pool->SetFence(7, [](const Status&) {});
  for (Member* m : members_) EXPECT_EQ(m->fence, 7);
}

TEST_F(StorePoolTest, AnEmptyPoolIsRefused) {
  EXPECT_EQ(MakeStorePool({}).status().code(), StatusCode::kInvalidArgument);
  std::vector<std::unique_ptr<Store>> nulls;
  nulls.push_back(nullptr);
  EXPECT_EQ(MakeStorePool(std::move(nulls)).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpupool::store
