#include "common/clock.h"

#include <gtest/gtest.h>

#include <thread>

namespace gpupool {
namespace {

TEST(ClockTest, ManualClockMovesOnlyWhenTold) {
  ManualClock c(1'000'000);
  EXPECT_EQ(c.NowMicros(), 1'000'000);
  EXPECT_EQ(c.NowSeconds(), 1);
  c.AdvanceMicros(2'500'000);
  EXPECT_EQ(c.NowMicros(), 3'500'000);
  EXPECT_EQ(c.MonotonicMicros(), 3'500'000);
  c.SetMicros(7);
  EXPECT_EQ(c.NowMicros(), 7);
}

TEST(ClockTest, SystemClockIsPlausibleAndMonotonic) {
  const Clock* c = SystemClock::Get();
  EXPECT_GT(c->NowSeconds(), 1'700'000'000);  // after 2023
  const int64_t a = c->MonotonicMicros();
  const int64_t b = c->MonotonicMicros();
  EXPECT_LE(a, b);
}

// A suspend moves boot time only: wall and monotonic time stand still, as Linux's
// CLOCK_MONOTONIC does while the host sleeps and CLOCK_BOOTTIME does not.
TEST(ClockTest, ManualSuspendMovesOnlyBootTime) {
  ManualClock c(1'000);
  EXPECT_EQ(c.BootMicros(), 1'000);
  c.SuspendMicros(5'000);
  EXPECT_EQ(c.NowMicros(), 1'000);
  EXPECT_EQ(c.MonotonicMicros(), 1'000);
  EXPECT_EQ(c.BootMicros(), 6'000);
  c.AdvanceMicros(10);
  EXPECT_EQ(c.MonotonicMicros(), 1'010);
  EXPECT_EQ(c.BootMicros(), 6'010);
}

// Issue 27: waits move with a ManualClock, never with real time.
TEST(ClockTest, ManualWaitsEndWhenTimeIsAdvancedPastTheirDeadline) {
  ManualClock c(1'000);
  std::mutex mu;
  std::condition_variable cv;
  bool timed_out = false;
  std::thread waiter([&] {
    std::unique_lock lock(mu);
    timed_out = !c.WaitUntil(cv, lock, 5'000, [] { return false; });
  });
  ASSERT_TRUE(c.WaitForWaiters(1));
  c.AdvanceMicros(3'000);  // 4'000: not yet
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(c.Waiters(), 1);
  c.AdvanceMicros(1'000);  // 5'000: the deadline
  waiter.join();
  EXPECT_TRUE(timed_out);
  EXPECT_EQ(c.Waiters(), 0);
}

TEST(ClockTest, ManualWaitsEndOnTheirConditionWithoutTimeMoving) {
  ManualClock c(0);
  std::mutex mu;
  std::condition_variable cv;
  bool ready = false;
  bool result = false;
  std::thread waiter([&] {
    std::unique_lock lock(mu);
    result = c.WaitFor(cv, lock, 60'000'000, [&] { return ready; });
  });
  ASSERT_TRUE(c.WaitForWaiters(1));
  {
    std::lock_guard lock(mu);
    ready = true;
  }
  cv.notify_all();
  waiter.join();
  EXPECT_TRUE(result);
  EXPECT_EQ(c.NowMicros(), 0);
}

TEST(ClockTest, ManualSleepEndsWhenTimeIsAdvanced) {
  ManualClock c(0);
  std::atomic<bool> woke{false};
  std::thread sleeper([&] {
    c.SleepFor(10'000'000);
    woke = true;
  });
  ASSERT_TRUE(c.WaitForWaiters(1));
  EXPECT_FALSE(woke);
  c.AdvanceMicros(10'000'000);
  sleeper.join();
  EXPECT_TRUE(woke);
}

TEST(ClockTest, SystemWaitsTimeOutInRealTime) {
  const Clock* c = SystemClock::Get();
  std::mutex mu;
  std::condition_variable cv;
  std::unique_lock lock(mu);
  const int64_t t0 = c->MonotonicMicros();
  EXPECT_FALSE(c->WaitFor(cv, lock, 20'000, [] { return false; }));
  EXPECT_GE(c->MonotonicMicros() - t0, 20'000);
  EXPECT_TRUE(c->WaitFor(cv, lock, 20'000, [] { return true; }));
}

}  // namespace
}  // namespace gpupool
