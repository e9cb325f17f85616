#include "gpu/health_policy.h"

#include <gtest/gtest.h>

namespace gpupool::gpu {
namespace {

constexpr int64_t kNow = 1'700'000'000'000'000;
constexpr int64_t kMinute = 60'000'000;

HealthPolicy Policy(std::string_view overrides = "") {
  Result<HealthPolicy> p = HealthPolicy::Create(overrides);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return *p;
}

// Issue 29 item 2: each row of the table does what docs/health.md says, on a healthy GPU.
TEST(HealthPolicyTest, EveryRowOfTheTable) {
  const HealthPolicy policy = Policy();
  struct Row {
    int xid;
    GpuHealthState state;
    bool end_jobs;
    bool cordon_node;
  };
  using S = GpuHealthState;
  const Row rows[] = {
      {13, S::kHealthy, false, false},  {31, S::kHealthy, false, false},
      {43, S::kHealthy, false, false},  {45, S::kHealthy, false, false},
      {48, S::kCordoned, true, false},  {63, S::kHealthy, false, false},
      {64, S::kCordoned, true, false},  {68, S::kHealthy, false, false},
      {74, S::kCordoned, true, false},  {79, S::kCordoned, true, true},
      {92, S::kHealthy, false, false},  {94, S::kHealthy, false, false},
      {95, S::kCordoned, true, false},  {119, S::kCordoned, true, false},
      {120, S::kCordoned, true, false}, {61, S::kSuspect, false, false},  // unknown
  };
  for (const Row& r : rows) {
    const XidOutcome o = OnXid(GpuHealth{}, r.xid, 1, kNow, policy);
    EXPECT_EQ(o.next.state, r.state) << "Xid " << r.xid;
    EXPECT_EQ(o.end_jobs, r.end_jobs) << "Xid " << r.xid;
    EXPECT_EQ(o.cordon_node, r.cordon_node) << "Xid " << r.xid;
    if (r.state != S::kHealthy) {
      EXPECT_EQ(o.next.since_us, kNow) << "Xid " << r.xid;
      EXPECT_NE(o.next.reason.find("Xid " + std::to_string(r.xid)), std::string::npos)
          << o.next.reason;
    }
  }
  // The built-in table lists every row above that is not unknown, in Xid order.
  const std::vector<XidRule>& table = BuiltinXidRules();
  EXPECT_EQ(table.size(), std::size(rows) - 1);
  EXPECT_TRUE(std::is_sorted(table.begin(), table.end(),
                             [](const XidRule& a, const XidRule& b) { return a.xid < b.xid; }));
}

// Application Xids leave the GPU healthy unless they repeat 3 times within an hour.
TEST(HealthPolicyTest, ApplicationXidsCordonOnlyWhenTheyRepeatWithinTheWindow) {
  const HealthPolicy policy = Policy();
  GpuHealth h;
  h = OnXid(h, 13, 1, kNow, policy).next;
  h = OnXid(h, 31, 1, kNow + 30 * kMinute, policy).next;
  EXPECT_EQ(h.state, GpuHealthState::kHealthy);
  // The first is out of the window by the third: still healthy.
  h = OnXid(h, 13, 1, kNow + 61 * kMinute, policy).next;
  EXPECT_EQ(h.state, GpuHealthState::kHealthy);
  EXPECT_EQ(h.recent_us.size(), 2u);
  const XidOutcome third = OnXid(h, 43, 1, kNow + 62 * kMinute, policy);
  EXPECT_EQ(third.next.state, GpuHealthState::kCordoned);
  EXPECT_FALSE(third.end_jobs);  // the job failed by itself
  EXPECT_NE(third.next.reason.find("3 times within 60 min"), std::string::npos)
      << third.next.reason;
  // One report counting 3 at once is 3.
  EXPECT_EQ(OnXid(GpuHealth{}, 13, 3, kNow, policy).next.state, GpuHealthState::kCordoned);
  // A hostile or broken agent's count (network input) keeps no more than cordons.
  const XidOutcome huge = OnXid(GpuHealth{}, 13, int64_t{1} << 40, kNow, policy);
  EXPECT_EQ(huge.next.state, GpuHealthState::kCordoned);
  EXPECT_EQ(huge.next.recent_us.size(), 3u);
}

// A cordoned GPU stays cordoned since its first cordon; ignorable Xids change nothing.
TEST(HealthPolicyTest, ACordonedGpuKeepsItsSinceAndIgnorableXidsChangeNothing) {
  const HealthPolicy policy = Policy();
  GpuHealth h = OnXid(GpuHealth{}, 95, 1, kNow, policy).next;
  const XidOutcome again = OnXid(h, 48, 2, kNow + kMinute, policy);
  EXPECT_EQ(again.next.state, GpuHealthState::kCordoned);
  EXPECT_EQ(again.next.since_us, kNow);
  EXPECT_TRUE(again.end_jobs);
  EXPECT_EQ(again.next.evidence, "Xid 48 x2");
  const XidOutcome ignored = OnXid(GpuHealth{}, 63, 1, kNow, policy);
  EXPECT_FALSE(ignored.changed);
  EXPECT_EQ(ignored.next, GpuHealth{});
}

// Admins override rows (config: health-xid); bad entries name themselves and the fix.
TEST(HealthPolicyTest, OverridesReplaceRowsAndBadEntriesAreNamed) {
  const HealthPolicy policy = Policy(" 79:cordon-gpu, 13:ignore ,200:cordon-node");
  EXPECT_EQ(policy.ForXid(79).action, HealthAction::kCordonGpu);
  EXPECT_EQ(policy.ForXid(13).action, HealthAction::kIgnore);
  EXPECT_EQ(policy.ForXid(200).action, HealthAction::kCordonNode);
  EXPECT_FALSE(OnXid(GpuHealth{}, 79, 1, kNow, policy).cordon_node);
  for (const char* bad : {"79", "x:ignore", "-3:ignore", "79:reboot"}) {
    Result<HealthPolicy> p = HealthPolicy::Create(bad);
    ASSERT_FALSE(p.ok()) << bad;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(p.status().message().find(bad), std::string::npos) << p.status().ToString();
  }
  EXPECT_NE(HealthPolicy::Create("79:reboot").status().message().find("cordon-node"),
            std::string::npos);
}

}  // namespace
}  // namespace gpupool::gpu
