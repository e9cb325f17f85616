#include "common/log_throttle.h"

#include <gtest/gtest.h>

namespace gpupool {
namespace {

TEST(LogThrottle, OneLinePerKeyPerPeriodCountingWhatItHeldBack) {
  LogThrottle t(10'000'000);
  int64_t held = -1;
  EXPECT_TRUE(t.Allow("a", 0, &held));
  EXPECT_EQ(held, 0);
  EXPECT_FALSE(t.Allow("a", 1'000'000));
  EXPECT_FALSE(t.Allow("a", 9'999'999));
  EXPECT_TRUE(t.Allow("b", 5'000'000, &held)) << "keys are apart";
  EXPECT_TRUE(t.Allow("a", 10'000'000, &held));
  EXPECT_EQ(held, 2);
  EXPECT_FALSE(t.Allow("a", 15'000'000));
  EXPECT_TRUE(t.Allow("a", 30'000'000, &held));
  EXPECT_EQ(held, 1);
}

TEST(LogThrottle, HostileKeysDoNotGrowItWithoutBound) {
  LogThrottle t(10'000'000, /*max_keys=*/4);
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(t.Allow("k" + std::to_string(i), 0));
  // The table was dropped on the way: a key seen long ago may log again early, which is
  // the price of the bound.
  EXPECT_TRUE(t.Allow("k0", 1));
}

}  // namespace
}  // namespace gpupool
