#include "sim/timed/resume_order.h"

#include <gtest/gtest.h>

#include <vector>

#include "sched/queue/queue_test_util.h"

namespace gpupool::sim {
namespace {

using sched::testing::GpuTask;
using sched::testing::Job;
using sched::testing::MakeCluster;
using sched::testing::Pointers;

// The order `policy` (from ResumeFirstPolicies) gives `pending`, as ids.
std::vector<std::string> OrderOf(const sched::QueuePolicy& policy,
                                 const std::vector<sched::QueuedJob>& pending,
                                 const std::vector<sched::RunningJob>& running,
                                 const sched::ClusterState& cluster) {
  const std::vector<const sched::QueuedJob*> ptrs = Pointers(pending);
  sched::QueueContext ctx{0, ptrs, running, &cluster};
  std::vector<std::string> ids;
  for (size_t i : policy.Order(ctx)) ids.push_back(pending[i].id);
  // Lazy gives the same order.
  std::unique_ptr<sched::QueueOrder> lazy = policy.Lazy(ctx);
  std::vector<std::string> lazy_ids;
  while (std::optional<size_t> i = lazy->Next()) lazy_ids.push_back(pending[*i].id);
  EXPECT_EQ(lazy_ids, ids);
  return ids;
}

TEST(ResumeOrder, VictimsGoFirstEarliestPreemptedFirstAndTheRestKeepTheirOrder) {
  const sched::ClusterState cluster = MakeCluster(1, 8);
  // sjf by time limit: a (10), b (20), c (30), d (40).
  std::vector<sched::QueuedJob> pending = {
      Job("d", "u", 0, {GpuTask(1)}, 40), Job("a", "u", 1, {GpuTask(1)}, 10),
      Job("c", "v", 2, {GpuTask(1)}, 30), Job("b", "v", 3, {GpuTask(1)}, 20)};
  auto front = std::make_shared<ResumeFront>();
  auto registry = ResumeFirstPolicies(front, /*under_share_only=*/false);
  auto sjf = registry->Create("sjf");
  ASSERT_TRUE(sjf.ok()) << sjf.status().ToString();
  EXPECT_EQ((*sjf)->name(), "sjf");
  EXPECT_EQ(OrderOf(**sjf, pending, {}, cluster), (std::vector<std::string>{"a", "b", "c", "d"}));
  front->Add("c");  // preempted first
  front->Add("d");
  EXPECT_EQ(OrderOf(**sjf, pending, {}, cluster), (std::vector<std::string>{"c", "d", "a", "b"}));
  front->Add("c");  // preempted again: now the latest
  EXPECT_EQ(OrderOf(**sjf, pending, {}, cluster), (std::vector<std::string>{"d", "c", "a", "b"}));
  front->Remove("d");  // started
  front->Remove("c");
  EXPECT_TRUE(front->empty());
  EXPECT_EQ(OrderOf(**sjf, pending, {}, cluster), (std::vector<std::string>{"a", "b", "c", "d"}));
  // Every built-in name is there, and unknown ones are refused as by the built-in registry.
  for (const char* name : {"fifo", "priority", "sjf", "fair"}) {
    EXPECT_TRUE(registry->Contains(name)) << name;
  }
  EXPECT_FALSE(registry->Create("lifo").ok());
}

// Under-share only: on one 8-GPU node u runs 4 GPUs; victims of u (1 GPU) and v (4 GPUs)
// wait. A victim goes first only if its group, with it started, stays within an equal
// share of the GPUs.
TEST(ResumeOrder, UnderShareOnlyPutsFirstTheVictimsWhoseGroupStaysWithinItsShare) {
  const sched::ClusterState cluster = MakeCluster(1, 8);
  std::vector<sched::QueuedJob> held = {Job("r", "u", 0, {GpuTask(4)})};
  std::vector<sched::RunningJob> running = {{&held[0], 0, {}}};
  std::vector<sched::QueuedJob> pending = {Job("a", "w", 0, {GpuTask(1)}, 10),
                                           Job("uv", "u", 1, {GpuTask(1)}, 50),
                                           Job("vv", "v", 2, {GpuTask(4)}, 60)};
  auto front = std::make_shared<ResumeFront>();
  front->Add("uv");
  front->Add("vv");
  auto all = ResumeFirstPolicies(front, false)->Create("sjf");
  auto under = ResumeFirstPolicies(front, true)->Create("sjf");
  ASSERT_TRUE(all.ok() && under.ok());
  // Three groups with jobs (u, v, w): a share is 8/3 GPUs. u holds 4: uv stays in place;
  // v, with vv's 4, would hold 4 > 8/3: in place too.
  EXPECT_EQ(OrderOf(**all, pending, running, cluster), (std::vector<std::string>{"uv", "vv", "a"}));
  EXPECT_EQ(OrderOf(**under, pending, running, cluster),
            (std::vector<std::string>{"a", "uv", "vv"}));
  // With w's job gone there are two groups (4 GPUs each): vv fits v's share.
  pending.erase(pending.begin());
  EXPECT_EQ(OrderOf(**under, pending, running, cluster), (std::vector<std::string>{"vv", "uv"}));
}

TEST(ResumeOrder, RemainingKeyAndNames) {
  EXPECT_EQ(RemainingSjfKey(1000, 300), 700);
  EXPECT_EQ(RemainingSjfKey(1000, 1000), 1);
  EXPECT_EQ(RemainingSjfKey(0, 300), 0);  // no key: unknown stays unknown
  for (PreemptResume r : {PreemptResume::kQueue, PreemptResume::kFirst,
                          PreemptResume::kFirstUnderShare, PreemptResume::kRemaining}) {
    auto parsed = ParsePreemptResume(PreemptResumeName(r));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, r);
  }
  auto bad = ParsePreemptResume("last");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("first-under-share"), std::string::npos);
}

}  // namespace
}  // namespace gpupool::sim
