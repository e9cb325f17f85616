#include <gtest/gtest.h>

#include "sched/queue/queue_policy_registry.h"
#include "sched/queue/queue_test_util.h"

namespace gpupool::sched {
namespace {

using testing::GpuTask;
using testing::Job;
using testing::MakeCluster;
using testing::Pointers;

std::vector<std::string> OrderedIds(const std::string& policy, const std::vector<QueuedJob>& jobs,
                                    const QueuePolicyConfig& config = {}) {
  auto p = BuiltinQueuePolicies().Create(policy, config);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  ClusterState cluster = MakeCluster(1, 8);
  auto pending = Pointers(jobs);
  std::vector<size_t> order = (*p)->Order(QueueContext{0, pending, {}, &cluster});
  std::vector<std::string> ids;
  for (size_t i : order) ids.push_back(jobs[i].id);
  return ids;
}

TEST(FifoQueuePolicy, OrdersBySubmitTimeAndKeepsArrivalOrderOnTies) {
  std::vector<QueuedJob> jobs = {Job("c", "u", 30, {GpuTask(1)}), Job("a", "u", 10, {GpuTask(1)}),
                                 Job("b1", "u", 20, {GpuTask(1)}),
                                 Job("b2", "u", 20, {GpuTask(1)})};
  EXPECT_EQ(OrderedIds("fifo", jobs), (std::vector<std::string>{"a", "b1", "b2", "c"}));
}

TEST(PriorityQueuePolicy, HigherPriorityFirstThenFifoAmongOneUsersJobs) {
  std::vector<QueuedJob> jobs = {
      Job("low-old", "u", 1, {GpuTask(1)}), Job("high-new", "u", 5, {GpuTask(1)}),
      Job("high-old", "u", 2, {GpuTask(1)}), Job("neg", "u", 0, {GpuTask(1)})};
  jobs[1].priority = 10;
  jobs[2].priority = 10;
  jobs[3].priority = -1;
  EXPECT_EQ(OrderedIds("priority", jobs),
            (std::vector<std::string>{"high-old", "high-new", "low-old", "neg"}));
}

// docs/cli.md: --priority is "priority among your own jobs". A user's priority reorders
// that user's jobs in the places they hold in first-come-first-served order, and never
// moves one ahead of another user's earlier job (the red team's finding 4: mallory's
// later job at 1000000 went before alice's).
TEST(PriorityQueuePolicy, AUsersPriorityReordersOnlyTheirOwnJobs) {
  std::vector<QueuedJob> jobs = {
      Job("alice-1", "alice", 10, {GpuTask(1)}), Job("mallory-1", "mallory", 11, {GpuTask(1)}),
      Job("alice-2", "alice", 12, {GpuTask(1)}), Job("mallory-2", "mallory", 13, {GpuTask(1)}),
      Job("alice-3", "alice", 14, {GpuTask(1)})};
  jobs[3].priority = 1000000;  // mallory's later job
  jobs[4].priority = 5;        // alice's last job, above her others
  EXPECT_EQ(OrderedIds("priority", jobs),
            (std::vector<std::string>{"alice-3", "mallory-2", "alice-1", "mallory-1", "alice-2"}));
  // The simulator's traces carry the site's priorities: they order every job.
  QueuePolicyConfig site;
  site.priority_across_users = true;
  EXPECT_EQ(OrderedIds("priority", jobs, site),
            (std::vector<std::string>{"mallory-2", "alice-3", "alice-1", "mallory-1", "alice-2"}));
}

TEST(ShortestJobFirstQueuePolicy, UsesEstimateThenLimitAndPutsUnknownLast) {
  std::vector<QueuedJob> jobs = {Job("unknown", "u", 0, {GpuTask(1)}),
                                 Job("limit-300", "u", 1, {GpuTask(1)}, 300),
                                 Job("estimate-100", "u", 2, {GpuTask(1)}, 1000),
                                 Job("limit-300-later", "u", 3, {GpuTask(1)}, 300)};
  jobs[2].runtime_estimate_s = 100;  // the estimate wins over its 1000 s limit
  EXPECT_EQ(OrderedIds("sjf", jobs),
            (std::vector<std::string>{"estimate-100", "limit-300", "limit-300-later", "unknown"}));
}

TEST(QueuePolicyRegistry, ListsBuiltinsAndRejectsUnknownNames) {
  const auto& r = BuiltinQueuePolicies();
  for (const char* name : {"fifo", "priority", "sjf", "fair"}) EXPECT_TRUE(r.Contains(name));
  auto bad = r.Create("lifo");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kNotFound);
  EXPECT_NE(bad.status().message().find("fifo, priority, sjf, fair"), std::string::npos)
      << bad.status().message();
}

TEST(QueuePolicyRegistry, RejectsDuplicatesAndBadWeights) {
  QueuePolicyRegistry r;
  ASSERT_TRUE(
      r.Register("x", "d", [](const QueuePolicyConfig&) { return MakeFifoQueuePolicy(); }).ok());
  Status dup = r.Register("x", "d", [](const QueuePolicyConfig&) { return MakeFifoQueuePolicy(); });
  EXPECT_EQ(dup.code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(r.Register("y", "d", nullptr).code(), StatusCode::kInvalidArgument);
  QueuePolicyConfig config;
  config.fair_weights["team"] = 0;
  auto bad = BuiltinQueuePolicies().Create("fair", config);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("team"), std::string::npos);
}

}  // namespace
}  // namespace gpupool::sched
