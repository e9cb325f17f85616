#include "gpu/health_policy.h"

#include <gtest/gtest.h>

#include <set>

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
      {95, S::kCordoned, true, false},  {109, S::kHealthy, false, false},
      {119, S::kCordoned, true, false}, {120, S::kCordoned, true, false},
      {61, S::kSuspect, false, false},  // unknown
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

// Strikes count within the policy's window (30 days by default): a GPU taken out twice a
// year ago and once now is cordoned, not failed; with the window off (0) every strike
// counts. A record from before strike times were kept counts its strikes from its last
// error.
TEST(HealthPolicyTest, StrikesOlderThanTheWindowNoLongerCount) {
  constexpr int64_t kDay = 24 * 60 * kMinute;
  HealthPolicy policy = Policy();
  ASSERT_EQ(policy.strike_window_us, 30 * kDay);
  auto twice_then_once = [&](int64_t gap) {
    GpuHealth h = OnXid(GpuHealth{}, 95, 1, kNow, policy).next;
    EXPECT_TRUE(ResumeIfProven(&h, kNow + kDay, 60 * kMinute));
    h = OnXid(h, 95, 1, kNow + 2 * kDay, policy).next;
    EXPECT_EQ(h.strike_us, (std::vector<int64_t>{kNow, kNow + 2 * kDay}));
    EXPECT_TRUE(ResumeIfProven(&h, kNow + 3 * kDay, 60 * kMinute));
    return OnXid(h, 95, 1, kNow + 2 * kDay + gap, policy).next;
  };
  const GpuHealth later = twice_then_once(365 * kDay);
  EXPECT_EQ(later.state, GpuHealthState::kCordoned) << later.reason;
  EXPECT_EQ(later.strikes, 1);
  EXPECT_EQ(later.strike_us, std::vector<int64_t>{kNow + 367 * kDay});
  // All three within 30 days (the third 29 days after the first): the third fails it.
  const GpuHealth soon = twice_then_once(27 * kDay);
  EXPECT_EQ(soon.state, GpuHealthState::kFailed);
  EXPECT_EQ(soon.strikes, 3);
  EXPECT_NE(soon.reason.find("taken out of service 3 times within 30 days"), std::string::npos)
      << soon.reason;
  policy.strike_window_us = 0;
  const GpuHealth never = twice_then_once(365 * kDay);
  EXPECT_EQ(never.state, GpuHealthState::kFailed);
  EXPECT_NE(never.reason.find("taken out of service 3 times: it needs service"), std::string::npos)
      << never.reason;
  // Two strikes stored without their times (last error a year ago), then a new one.
  policy.strike_window_us = 30 * kDay;
  GpuHealth legacy;
  legacy.strikes = 2;
  legacy.last_error_us = kNow;
  EXPECT_EQ(OnXid(legacy, 95, 1, kNow + 365 * kDay, policy).next.strikes, 1);
  EXPECT_EQ(OnXid(legacy, 95, 1, kNow + kDay, policy).next.state, GpuHealthState::kFailed);
}

// The hostile-testing defect: one user's application Xids (a device-side assert, Xid 43,
// three times an hour) cordoned any GPU they got, and three cordons retired it. Repeats
// pinned on one user are theirs: the GPU stays in service, for as long as they go on.
TEST(HealthPolicyTest, OneUsersRepeatedApplicationXidsLeaveTheGpuInService) {
  const HealthPolicy policy = Policy();
  GpuHealth h;
  XidOutcome o;
  for (int k = 0; k < 10; ++k) {
    o = OnXid(h, 43, 1, kNow + k * kMinute, policy, {"alice"});
    h = o.next;
    EXPECT_EQ(h.state, GpuHealthState::kHealthy) << "Xid " << k + 1;
    EXPECT_EQ(h.strikes, 0);
  }
  EXPECT_TRUE(o.pinned_on_user);
  EXPECT_EQ(h.recent_us.size(), 10u);
  ASSERT_EQ(h.recent_users.size(), 10u);
  EXPECT_EQ(h.recent_users.back(), std::vector<std::string>{"alice"});
  // A GPU shared by two users at each Xid: the same pair is still one culprit (any order,
  // named twice); so is a user common to all of them.
  GpuHealth shared;
  shared = OnXid(shared, 13, 1, kNow, policy, {"bob", "alice"}).next;
  shared = OnXid(shared, 13, 1, kNow + kMinute, policy, {"alice", "bob", "alice"}).next;
  shared = OnXid(shared, 31, 1, kNow + 2 * kMinute, policy, {"alice"}).next;
  EXPECT_EQ(shared.state, GpuHealthState::kHealthy);
  // A count of 3 from one report of one user's job: theirs too.
  EXPECT_EQ(OnXid(GpuHealth{}, 43, 3, kNow, policy, {"alice"}).next.state,
            GpuHealthState::kHealthy);
  // Xid 109 (context switch timeout) is an application Xid as well.
  GpuHealth timeouts;
  for (int k = 0; k < 3; ++k) timeouts = OnXid(timeouts, 109, 1, kNow + k, policy, {"a"}).next;
  EXPECT_EQ(timeouts.state, GpuHealthState::kHealthy);
  // The list kept is bounded, however many come within the window.
  for (int k = 0; k < 200; ++k)
    h = OnXid(h, 43, 3, kNow + 11 * kMinute + k, policy, {"alice"}).next;
  EXPECT_EQ(h.recent_us.size(), kMostRecentKept);
  EXPECT_EQ(h.recent_users.size(), kMostRecentKept);
  EXPECT_EQ(h.state, GpuHealthState::kHealthy);
}

// Repeats that cannot be pinned on one user count against the GPU: two users' jobs, or one
// Xid with no job on the GPU; a suspect (unknown) Xid counts against it as before; a
// reset-class Xid cordons whoever held it.
TEST(HealthPolicyTest, RepeatsNotPinnedOnOneUserCordonTheGpu) {
  const HealthPolicy policy = Policy();
  GpuHealth two = OnXid(GpuHealth{}, 43, 1, kNow, policy, {"alice"}).next;
  two = OnXid(two, 43, 1, kNow + kMinute, policy, {"alice"}).next;
  const XidOutcome bob = OnXid(two, 43, 1, kNow + 2 * kMinute, policy, {"bob"});
  EXPECT_EQ(bob.next.state, GpuHealthState::kCordoned);
  EXPECT_FALSE(bob.pinned_on_user);
  EXPECT_EQ(bob.next.strikes, 1);
  EXPECT_NE(bob.next.reason.find("with different users' jobs on it"), std::string::npos)
      << bob.next.reason;
  EXPECT_EQ(bob.next.reason.find("alice"), std::string::npos);  // names no user (all see it)
  const XidOutcome nobody = OnXid(two, 43, 1, kNow + 2 * kMinute, policy, {});
  EXPECT_EQ(nobody.next.state, GpuHealthState::kCordoned);
  EXPECT_NE(nobody.next.reason.find("at least once with no job on the GPU"), std::string::npos)
      << nobody.next.reason;
  // Pairs without one user common to all: {alice, bob}, {bob, carol}, {carol}.
  GpuHealth pairs = OnXid(GpuHealth{}, 13, 1, kNow, policy, {"alice", "bob"}).next;
  pairs = OnXid(pairs, 13, 1, kNow + 1, policy, {"bob", "carol"}).next;
  EXPECT_EQ(OnXid(pairs, 13, 1, kNow + 2, policy, {"carol"}).next.state, GpuHealthState::kCordoned);
  // No holders at all (the simulator): three cordon, as before attribution.
  GpuHealth none;
  for (int k = 0; k < 3; ++k) none = OnXid(none, 43, 1, kNow + k, policy).next;
  EXPECT_EQ(none.state, GpuHealthState::kCordoned);
  EXPECT_TRUE(none.recent_users.empty());  // nothing stored for it
  // An unknown Xid is the GPU's, whoever held it.
  EXPECT_EQ(OnXid(two, 61, 1, kNow + 2 * kMinute, policy, {"alice"}).next.state,
            GpuHealthState::kCordoned);
  EXPECT_EQ(OnXid(GpuHealth{}, 95, 1, kNow, policy, {"alice"}).next.state,
            GpuHealthState::kCordoned);
  // The first user's Xids leave the window: the rest are one user's again.
  GpuHealth later = OnXid(GpuHealth{}, 43, 1, kNow, policy, {"bob"}).next;
  later = OnXid(later, 43, 1, kNow + 61 * kMinute, policy, {"alice"}).next;
  later = OnXid(later, 43, 1, kNow + 62 * kMinute, policy, {"alice"}).next;
  EXPECT_EQ(OnXid(later, 43, 1, kNow + 63 * kMinute, policy, {"alice"}).next.state,
            GpuHealthState::kHealthy);
}

// A record stored before attribution (recent_us without recent_users) is read as then:
// its Xids count against the GPU, so one more, even one user's, cordons on the third.
TEST(HealthPolicyTest, ARecordFromBeforeAttributionCountsItsXidsAgainstTheGpu) {
  const HealthPolicy policy = Policy();
  GpuHealth legacy;
  legacy.recent_us = {kNow, kNow + kMinute};
  const XidOutcome o = OnXid(legacy, 43, 1, kNow + 2 * kMinute, policy, {"alice"});
  EXPECT_EQ(o.next.state, GpuHealthState::kCordoned);
  ASSERT_EQ(o.next.recent_users.size(), 3u);
  EXPECT_TRUE(o.next.recent_users[0].empty());
  EXPECT_EQ(o.next.recent_users[2], std::vector<std::string>{"alice"});
}

// What a GPU's record shows as its strikes is what still counts: those in the window, not
// every strike kept since the last one (AddStrike forgets the others only at the next).
TEST(HealthPolicyTest, OnlyTheStrikesInTheWindowAreShown) {
  constexpr int64_t kDay = 24 * 60 * kMinute;
  const HealthPolicy policy = Policy();
  GpuHealth h = OnXid(GpuHealth{}, 95, 1, kNow, policy).next;
  ASSERT_TRUE(ResumeIfProven(&h, kNow + kDay, 60 * kMinute));
  h = OnXid(h, 95, 1, kNow + 10 * kDay, policy).next;
  ASSERT_EQ(h.strikes, 2);
  EXPECT_EQ(StrikesWithin(h, kNow + 11 * kDay, 30 * kDay), 2);
  EXPECT_EQ(StrikesWithin(h, kNow + 35 * kDay, 30 * kDay), 1);  // the first is 35 days old
  EXPECT_EQ(StrikesWithin(h, kNow + 45 * kDay, 30 * kDay), 0);
  EXPECT_EQ(StrikesWithin(h, kNow + 450 * kDay, 0), 2);  // no window: all count
  EXPECT_EQ(h.strikes, 2);                               // the record is not changed
  GpuHealth legacy;  // strikes without times count from the last error
  legacy.strikes = 2;
  legacy.last_error_us = kNow;
  EXPECT_EQ(StrikesWithin(legacy, kNow + kDay, 30 * kDay), 2);
  EXPECT_EQ(StrikesWithin(legacy, kNow + 31 * kDay, 30 * kDay), 0);
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
  // A threshold cordon returns only once its reading fell below the cordon level.
  GpuHealth pages = OnReadings(GpuHealth{}, {{"remapped-rows-failed", 1}}, kNow, policy).next;
  ASSERT_EQ(pages.state, GpuHealthState::kCordoned);
  GpuHealth still = pages;
  EXPECT_FALSE(ResumeIfProven(&still, kNow + 100'000 * kMinute, 60 * kMinute));
  pages = OnReadings(pages, {{"remapped-rows-failed", 0}}, kNow + kMinute, policy).next;
  EXPECT_TRUE(ResumeIfProven(&pages, kNow + 100 * kMinute, 60 * kMinute));
  for (const char* by : {"health-check", "root"}) {
    GpuHealth other = h;
    other.by = by;
    EXPECT_FALSE(ResumeIfProven(&other, kNow + 100'000 * kMinute, 60 * kMinute)) << by;
  }
}

// Issue 29 item 2: each threshold row, on a healthy GPU, at the value just below its
// suspect threshold, at it, and at its cordon threshold.
TEST(HealthPolicyTest, EveryThresholdRow) {
  const HealthPolicy policy = Policy();
  using S = GpuHealthState;
  struct Row {
    std::string name;
    int64_t value;
    S state;
  };
  const Row rows[] = {
      {"retired-pages", 9, S::kHealthy},
      {"retired-pages", 10, S::kSuspect},
      {"retired-pages", 60, S::kCordoned},
      {"retired-pages-pending", 0, S::kHealthy},
      {"retired-pages-pending", 1, S::kCordoned},
      {"remapped-rows", 7, S::kHealthy},
      {"remapped-rows", 8, S::kSuspect},
      {"remapped-rows", 64, S::kCordoned},
      {"remapped-rows-pending", 1, S::kCordoned},
      {"remapped-rows-failed", 0, S::kHealthy},
      {"remapped-rows-failed", 1, S::kCordoned},
      {"hw-slowdown", 0, S::kHealthy},
      {"hw-slowdown", 1, S::kSuspect},
      {"ecc-uncorrected", 0, S::kHealthy},
      {"ecc-uncorrected", 1, S::kSuspect},
      {"ecc-uncorrected", 3, S::kCordoned},
  };
  for (const Row& r : rows) {
    const XidOutcome o = OnReadings(GpuHealth{}, {{r.name, r.value}}, kNow, policy);
    EXPECT_EQ(o.next.state, r.state) << r.name << " " << r.value;
    EXPECT_FALSE(o.end_jobs) << r.name;  // the jobs on it go on
    EXPECT_FALSE(o.cordon_node) << r.name;
    EXPECT_EQ(o.changed, r.state != S::kHealthy) << r.name << " " << r.value;
    if (r.state == S::kHealthy) continue;
    EXPECT_EQ(o.next.since_us, kNow);
    EXPECT_EQ(o.next.by, "policy");
    EXPECT_EQ(o.next.reason.rfind(r.name + ": ", 0), 0u) << o.next.reason;
    EXPECT_EQ(o.next.evidence, r.name + " " + std::to_string(r.value));
  }
  // Every row of the table is tested above, and readings name each row.
  std::set<std::string> tested;
  for (const Row& r : rows) tested.insert(r.name);
  EXPECT_EQ(tested.size(), BuiltinThresholdRules().size());
  HardwareHealth hw{1, true, 2, false, true, false};
  EXPECT_EQ(HealthReadings(hw, 5).size(), BuiltinThresholdRules().size());
  EXPECT_EQ(HealthReadings(HardwareHealth{}, std::nullopt).size(), 0u);
}

// A count that grows makes the GPU suspect, then cordons it; the same count again, or after
// an admin put the GPU back, does nothing; a count that fell back and rises again acts.
TEST(HealthPolicyTest, ThresholdsActOnceWhenTheirLevelRises) {
  const HealthPolicy policy = Policy();
  GpuHealth h;
  XidOutcome o = OnReadings(h, {{"ecc-uncorrected", 1}}, kNow, policy);
  EXPECT_EQ(o.next.state, GpuHealthState::kSuspect);
  h = o.next;
  EXPECT_FALSE(OnReadings(h, {{"ecc-uncorrected", 2}}, kNow + 1, policy).changed);
  o = OnReadings(h, {{"ecc-uncorrected", 3}}, kNow + kMinute, policy);
  EXPECT_EQ(o.next.state, GpuHealthState::kCordoned);
  EXPECT_EQ(o.next.since_us, kNow + kMinute);
  EXPECT_NE(o.next.reason.find("3 (cordon at 3)"), std::string::npos) << o.next.reason;
  EXPECT_NE(o.rule.what.find("ecc-uncorrected"), std::string::npos);
  // An admin resumes it (keeping the levels): the same count does not cordon it again.
  GpuHealth resumed;
  resumed.levels = o.next.levels;
  EXPECT_FALSE(OnReadings(resumed, {{"ecc-uncorrected", 4}}, kNow + 2 * kMinute, policy).changed);
  // A driver reload clears the count; new errors act again.
  h = OnReadings(resumed, {{"ecc-uncorrected", 0}}, kNow + 3 * kMinute, policy).next;
  EXPECT_TRUE(h.levels.empty());
  EXPECT_EQ(h.state, GpuHealthState::kHealthy);
  EXPECT_EQ(OnReadings(h, {{"ecc-uncorrected", 5}}, kNow, policy).next.state,
            GpuHealthState::kCordoned);
  // A row without a reading keeps its level; an out-of-service GPU stays so.
  h = OnReadings(GpuHealth{}, {{"remapped-rows-failed", 1}}, kNow, policy).next;
  EXPECT_EQ(OnReadings(h, {}, kNow, policy).next, h);
  const XidOutcome more = OnReadings(h, {{"retired-pages", 70}}, kNow + kMinute, policy);
  EXPECT_EQ(more.next.state, GpuHealthState::kCordoned);
  EXPECT_EQ(more.next.since_us, kNow);
  EXPECT_EQ(more.next.reason, h.reason);
}

// Admins override threshold rows (config: health-threshold); bad entries name themselves.
TEST(HealthPolicyTest, ThresholdOverridesReplaceRowsAndBadEntriesAreNamed) {
  Result<HealthPolicy> p = HealthPolicy::Create("", " hw-slowdown:0:1 , retired-pages:0:5");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(OnReadings(GpuHealth{}, {{"hw-slowdown", 1}}, kNow, *p).next.state,
            GpuHealthState::kCordoned);
  EXPECT_EQ(OnReadings(GpuHealth{}, {{"retired-pages", 4}}, kNow, *p).next.state,
            GpuHealthState::kHealthy);
  EXPECT_EQ(OnReadings(GpuHealth{}, {{"retired-pages", 5}}, kNow, *p).next.state,
            GpuHealthState::kCordoned);
  // A row set to 0:0 never acts.
  p = HealthPolicy::Create("", "ecc-uncorrected:0:0");
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(OnReadings(GpuHealth{}, {{"ecc-uncorrected", 100}}, kNow, *p).changed);
  for (const char* bad : {"retired-pages:10", "retired-pages:x:60", "retired-pages:10:-1",
                          "bad-pages:1:2", "hw-slowdown:0:2"}) {
    Result<HealthPolicy> q = HealthPolicy::Create("", bad);
    ASSERT_FALSE(q.ok()) << bad;
    EXPECT_EQ(q.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(q.status().message().find(bad), std::string::npos) << q.status().ToString();
  }
  EXPECT_NE(HealthPolicy::Create("", "bad-pages:1:2").status().message().find("retired-pages"),
            std::string::npos);
}

}  // namespace
}  // namespace gpupool::gpu
