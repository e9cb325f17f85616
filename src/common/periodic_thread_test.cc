#include "common/periodic_thread.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <vector>

namespace gpupool {
namespace {

constexpr int64_t kPeriod = 30'000'000;

// The task's runs and the clock's time at each.
struct Runs {
  std::mutex mu;
  std::vector<int64_t> at;
  std::vector<int64_t> Times() {
    std::lock_guard lock(mu);
    return at;
  }
};

// Issue 27: a service's thread moves with its clock: under a ManualClock it runs when
// time is advanced a period past its last run, not before and not with real time.
TEST(PeriodicThreadTest, RunsOncePerPeriodOfTheClocksTime) {
  ManualClock clock(1'000'000);
  Runs runs;
  PeriodicThread t(&clock, kPeriod, [&] {
    std::lock_guard lock(runs.mu);
    runs.at.push_back(clock.NowMicros());
  });
  t.Start();
  ASSERT_TRUE(clock.WaitForWaiters(1));
  EXPECT_EQ(t.runs(), 0u);
  clock.AdvanceMicros(kPeriod - 1);  // not yet due
  clock.AdvanceMicros(1);
  ASSERT_TRUE(t.WaitForRuns(1));
  EXPECT_EQ(runs.Times(), std::vector<int64_t>{1'000'000 + kPeriod});
  // The next one is a period after that run.
  ASSERT_TRUE(clock.WaitForWaiters(1));
  clock.AdvanceMicros(kPeriod);
  ASSERT_TRUE(t.WaitForRuns(2));
  EXPECT_EQ(runs.Times(), (std::vector<int64_t>{1'000'000 + kPeriod, 1'000'000 + 2 * kPeriod}));
  t.Stop();
  t.Stop();  // idempotent
  EXPECT_EQ(t.runs(), 2u);
}

TEST(PeriodicThreadTest, AKickRunsItAtOnceAndAKickBeforeStartRunsItOnStart) {
  ManualClock clock(0);
  std::atomic<int> runs{0};
  PeriodicThread t(&clock, kPeriod, [&] { ++runs; });
  t.Kick();
  t.Start();
  ASSERT_TRUE(t.WaitForRuns(1));  // no time passed: the kick did it
  EXPECT_EQ(clock.NowMicros(), 0);
  ASSERT_TRUE(clock.WaitForWaiters(1));
  t.Kick();
  ASSERT_TRUE(t.WaitForRuns(2));
  EXPECT_EQ(runs.load(), 2);
}

// A thread never started, or stopped while it waits, stops at once; nothing runs after.
TEST(PeriodicThreadTest, StopEndsAWaitingThreadAndNothingRunsAfterIt) {
  ManualClock clock(0);
  std::atomic<int> runs{0};
  {
    PeriodicThread never(&clock, kPeriod, [&] { ++runs; });
    never.Kick();
  }  // the destructor stops it
  PeriodicThread t(&clock, kPeriod, [&] { ++runs; });
  t.Start();
  ASSERT_TRUE(clock.WaitForWaiters(1));
  t.Stop();
  EXPECT_EQ(clock.Waiters(), 0);
  t.Kick();
  t.Start();  // once only: a stopped thread does not start again
  clock.AdvanceMicros(10 * kPeriod);
  EXPECT_EQ(runs.load(), 0);
  EXPECT_EQ(t.runs(), 0u);
}

}  // namespace
}  // namespace gpupool
