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

// Issue 29 item 5, strikes: each cordon by the policy is one, whether a reset-class Xid
// or repeated application Xids made it; the third fails the GPU (it needs service). An Xid
// on a GPU already out of service is no new strike, but it is its last error.
TEST(HealthPolicyTest, TheThirdCordonFailsTheGpu) {
  const HealthPolicy policy = Policy();
  GpuHealth h = OnXid(GpuHealth{}, 95, 1, kNow, policy).next;
  EXPECT_EQ(h.state, GpuHealthState::kCordoned);
  EXPECT_EQ(h.strikes, 1);
  EXPECT_EQ(h.last_error_us, kNow);
  h = OnXid(h, 48, 1, kNow + kMinute, policy).next;  // still out of service: no strike
  EXPECT_EQ(h.strikes, 1);
  EXPECT_EQ(h.last_error_us, kNow + kMinute);
  EXPECT_EQ(h.since_us, kNow);
  ASSERT_TRUE(ResumeIfProven(&h, kNow + 90 * kMinute, 60 * kMinute));
  EXPECT_EQ(h.state, GpuHealthState::kHealthy);
  EXPECT_EQ(h.strikes, 1);
  h = OnXid(h, 13, 3, kNow + 100 * kMinute, policy).next;  // application Xids, repeated
  EXPECT_EQ(h.state, GpuHealthState::kCordoned);
  EXPECT_EQ(h.strikes, 2);
  ASSERT_TRUE(ResumeIfProven(&h, kNow + 200 * kMinute, 60 * kMinute));
  const XidOutcome third = OnXid(h, 74, 1, kNow + 300 * kMinute, policy);
  EXPECT_EQ(third.next.state, GpuHealthState::kFailed);
  EXPECT_EQ(third.next.strikes, 3);
  EXPECT_TRUE(third.end_jobs);
  EXPECT_NE(third.next.reason.find("Xid 74"), std::string::npos) << third.next.reason;
  EXPECT_NE(third.next.reason.find("needs service"), std::string::npos) << third.next.reason;
  // Failed never returns by itself, however quiet.
  GpuHealth failed = third.next;
  EXPECT_FALSE(ResumeIfProven(&failed, kNow + 100'000 * kMinute, 60 * kMinute));
  EXPECT_EQ(failed, third.next);
}

// Resume only when proven: a policy cordon returns once no Xid came for the quiet period
// (counted from its last error, so a recurrence starts it again); 0 never returns it, and
// a cordon by the health program or an admin is not the policy's to lift.
TEST(HealthPolicyTest, APolicyCordonReturnsOnlyAfterItsQuietPeriod) {
  const HealthPolicy policy = Policy();
  GpuHealth h = OnXid(GpuHealth{}, 95, 1, kNow, policy).next;
  GpuHealth copy = h;
  EXPECT_FALSE(ResumeIfProven(&copy, kNow + 59 * kMinute, 60 * kMinute));
  EXPECT_EQ(copy, h);
  EXPECT_FALSE(ResumeIfProven(&copy, kNow + 100'000 * kMinute, 0));  // 0: never
  h = OnXid(h, 95, 1, kNow + 30 * kMinute, policy).next;             // it recurs
  copy = h;
  EXPECT_FALSE(ResumeIfProven(&copy, kNow + 61 * kMinute, 60 * kMinute));
  ASSERT_TRUE(ResumeIfProven(&copy, kNow + 90 * kMinute, 60 * kMinute));
  EXPECT_EQ(copy.state, GpuHealthState::kHealthy);
  EXPECT_EQ(copy.since_us, kNow + 90 * kMinute);
  EXPECT_NE(copy.reason.find("back in service"), std::string::npos) << copy.reason;
  EXPECT_TRUE(copy.recent_us.empty());
  // Stored before last_error_us existed: counted from its since.
  GpuHealth old = h;
  old.last_error_us = 0;
  EXPECT_TRUE(ResumeIfProven(&old, kNow + 60 * kMinute, 60 * kMinute));
  for (const char* by : {"health-check", "root"}) {
    GpuHealth other = h;
    other.by = by;
    EXPECT_FALSE(ResumeIfProven(&other, kNow + 100'000 * kMinute, 60 * kMinute)) << by;
  }
}

}  // namespace
}  // namespace gpupool::gpu
