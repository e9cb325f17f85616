#include "store/store_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "store/forwarding_store.h"
#include "store/sqlite_store.h"

namespace gpupool::store {
namespace {

// One connection of a pool over a shared in-memory database; GetSetting("slow") waits at
// a gate, as a statement that the database holds for long. The telemetry calls are
// forwarded too (ForwardingStore keeps Store's defaults for them).
class Member final : public ForwardingStore {
 public:
  struct Gate {
    std::mutex m;
    std::condition_variable cv;
    bool open = false;
    int waiting = 0;
  };
  Member(Store* db, Gate* gate) : ForwardingStore(db), gate_(gate) {}
  int64_t fence = 0;

  Result<std::optional<std::string>> GetSetting(std::string_view key) override {
    if (key == "slow") {
      std::unique_lock l(gate_->m);
      ++gate_->waiting;
      gate_->cv.notify_all();
      gate_->cv.wait(l, [&] { return gate_->open; });
      --gate_->waiting;
    }
    return inner()->GetSetting(key);
  }
  void SetFence(int64_t epoch, std::function<void(const Status&)>) override { fence = epoch; }
  Status PutTelemetry(const std::vector<TelemetryRecord>& p) override {
    return inner()->PutTelemetry(p);
  }
  Result<std::vector<TelemetryRecord>> ListTelemetry(const TelemetryQuery& q) override {
    return inner()->ListTelemetry(q);
  }
  Result<int64_t> DeleteTelemetryBefore(int64_t before) override {
    return inner()->DeleteTelemetryBefore(before);
  }

 private:
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
