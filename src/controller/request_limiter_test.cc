#include "controller/request_limiter.h"

#include <gtest/gtest.h>

#include <vector>

namespace gpupool::controller {
namespace {

TEST(RequestLimiterTest, BoundsEachCallerAndAllTogether) {
  RequestLimiter limiter(/*per_caller=*/2, /*total=*/3);
  std::string why;
  std::vector<RequestLimiter::Slot> held;
  held.push_back(*limiter.TryAcquire("uid:1001", &why));
  held.push_back(*limiter.TryAcquire("uid:1001", &why));
  EXPECT_FALSE(limiter.TryAcquire("uid:1001", &why).has_value());
  EXPECT_NE(why.find("you already have 2 waiting requests"), std::string::npos) << why;
  // Another caller is not held up by the first one's bound...
  held.push_back(*limiter.TryAcquire("uid:1002", &why));
  // ...but the server's is shared.
  EXPECT_FALSE(limiter.TryAcquire("uid:1003", &why).has_value());
  EXPECT_NE(why.find("from all callers"), std::string::npos) << why;
  EXPECT_EQ(limiter.InFlight("uid:1003"), 0u);
  held.erase(held.begin());  // one of uid 1001's ends
  EXPECT_EQ(limiter.InFlight("uid:1001"), 1u);
  EXPECT_TRUE(limiter.TryAcquire("uid:1003", &why).has_value());  // released at once
  held.clear();
  EXPECT_EQ(limiter.InFlight("uid:1001"), 0u);
  EXPECT_EQ(limiter.InFlight("uid:1002"), 0u);
}

}  // namespace
}  // namespace gpupool::controller
