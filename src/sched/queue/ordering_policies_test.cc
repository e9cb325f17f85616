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

TEST(PriorityQueuePolicy, HigherPriorityFirstThenFifo) {
  std::vector<QueuedJob> jobs = {
      Job("low-old", "u", 1, {GpuTask(1)}), Job("high-new", "u", 5, {GpuTask(1)}),
      Job("high-old", "u", 2, {GpuTask(1)}), Job("neg", "u", 0, {GpuTask(1)})};
  jobs[1].priority = 10;
  jobs[2].priority = 10;
  jobs[3].priority = -1;
  EXPECT_EQ(OrderedIds("priority", jobs),
            (std::vector<std::string>{"high-old", "high-new", "low-old", "neg"}));
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
