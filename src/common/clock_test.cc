#include "common/clock.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace gpupool
