// Resources, Task validation and ClusterState bookkeeping.
#include <gtest/gtest.h>

#include "sched/cluster_state.h"
#include "sched/resources.h"
#include "sched/task.h"

namespace gpupool::sched {
namespace {

Task MakeTask(std::string name, int64_t cpu, int32_t gpus, int32_t milli) {
  Task t;
  t.name = std::move(name);
  t.cpu_milli = cpu;
  t.memory_mib = 1024;
  t.num_gpu = gpus;
  t.gpu_milli = milli;
  return t;
}

TEST(ResourcesTest, ArithmeticAndContains) {
  Resources a{4000, 8192, 2000};
  Resources b{1000, 1024, 500};
  EXPECT_EQ(a + b, (Resources{5000, 9216, 2500}));
  EXPECT_EQ(a - b, (Resources{3000, 7168, 1500}));
  EXPECT_TRUE(a.Contains(b));
  EXPECT_FALSE(b.Contains(a));
  EXPECT_TRUE((a - a).IsZero());
  EXPECT_EQ(b.ToString(), "cpu=1000m mem=1024Mi gpu=0.500");
}

TEST(TaskTest, ValidateRejectsBrokenInvariants) {
  EXPECT_TRUE(ValidateTask(MakeTask("ok", 1000, 1, 500)).ok());
  EXPECT_TRUE(ValidateTask(MakeTask("cpu-only", 1000, 0, 0)).ok());
  EXPECT_TRUE(ValidateTask(MakeTask("whole", 1000, 8, 1000)).ok());
  auto fractional_multi = ValidateTask(MakeTask("fm", 1000, 2, 500));
  EXPECT_FALSE(fractional_multi.ok());
  EXPECT_NE(fractional_multi.message().find("gpu_milli"), std::string::npos);
  EXPECT_FALSE(ValidateTask(MakeTask("big", 1000, 1, 1001)).ok());
  EXPECT_FALSE(ValidateTask(MakeTask("neg", -1, 0, 0)).ok());
  EXPECT_FALSE(ValidateTask(MakeTask("milli-no-gpu", 0, 0, 300)).ok());
}

TEST(ClusterStateTest, AllocateReleaseKeepTotals) {
  ClusterState s;
  ASSERT_TRUE(s.AddNode({"a", 8000, 16384, 2, "T4"}).ok());
  ASSERT_TRUE(s.AddNode({"b", 4000, 8192, 0, ""}).ok());
  EXPECT_EQ(s.TotalCapacity(), (Resources{12000, 24576, 2000}));
  Task t = MakeTask("t", 2000, 1, 300);
  ASSERT_TRUE(s.Fits(0, t));
  EXPECT_FALSE(s.Fits(1, t));
  const uint64_t v0 = s.node(0).version;
  ASSERT_TRUE(s.Allocate(t, {0, {1}}).ok());
  EXPECT_NE(s.node(0).version, v0);
  EXPECT_EQ(s.node(0).gpu_free_milli[1], 700);
  EXPECT_EQ(s.node(0).gpu_free_total, 1700);
  EXPECT_EQ(s.TotalGpuMilliUsed(), 300);
  ASSERT_EQ(s.node(0).gpu_task_kinds.size(), 1u);
  EXPECT_EQ(s.node(0).gpu_task_kinds[0], std::make_pair(0, 1));
  ASSERT_TRUE(s.Release(t, {0, {1}}).ok());
  EXPECT_EQ(s.TotalFree(), s.TotalCapacity());
  EXPECT_TRUE(s.node(0).gpu_task_kinds.empty());
  // Releasing again would exceed capacity: refused, nothing changes.
  EXPECT_FALSE(s.Release(t, {0, {1}}).ok());
  EXPECT_EQ(s.TotalFree(), s.TotalCapacity());
}

TEST(ClusterStateTest, AllocateRefusesInvalidPlacements) {
  ClusterState s;
  ASSERT_TRUE(s.AddNode({"a", 8000, 16384, 2, "T4"}).ok());
  Task whole = MakeTask("w", 1000, 2, 1000);
  EXPECT_FALSE(s.Allocate(whole, {0, {0}}).ok());     // too few GPUs listed
  EXPECT_FALSE(s.Allocate(whole, {0, {0, 0}}).ok());  // the same GPU twice
  EXPECT_FALSE(s.Allocate(whole, {0, {0, 5}}).ok());  // no such GPU
  EXPECT_FALSE(s.Allocate(whole, {3, {0, 1}}).ok());  // no such node
  Task big_cpu = MakeTask("c", 9000, 0, 0);
  EXPECT_FALSE(s.Allocate(big_cpu, {0, {}}).ok());
  Task v100 = MakeTask("v", 1000, 1, 1000);
  v100.gpu_models = {"V100"};
  EXPECT_FALSE(s.Fits(0, v100));
  EXPECT_FALSE(s.Allocate(v100, {0, {0}}).ok());
  EXPECT_EQ(s.TotalFree(), s.TotalCapacity());
}

TEST(ClusterStateTest, AddNodeRejectsBadNodes) {
  ClusterState s;
  EXPECT_TRUE(s.AddNode({"a", 1000, 1024, 1, "T4"}).ok());
  EXPECT_EQ(s.AddNode({"a", 1000, 1024, 1, "T4"}).code(), StatusCode::kAlreadyExists);
  EXPECT_FALSE(s.AddNode({"", 1000, 1024, 0, ""}).ok());
  EXPECT_FALSE(s.AddNode({"b", -1, 1024, 0, ""}).ok());
  EXPECT_FALSE(s.AddNode({"c", 1000, 1024, 2, ""}).ok());
  EXPECT_FALSE(s.AddNode({"d", 1000, 1024, 65, "X"}).ok());
  EXPECT_FALSE(s.SetScanOrder({0, 0}).ok());
  EXPECT_TRUE(s.SetScanOrder({0}).ok());
}

TEST(ClusterStateTest, MinCapabilityAndCouldEverHost) {
  ClusterState s;
  NodeSpec old{"old", 8000, 8192, 4, "P100"};
  old.gpu_capability = 60;
  NodeSpec newer{"new", 8000, 8192, 4, "A100"};
  newer.gpu_capability = 80;
  ASSERT_TRUE(s.AddNode(old).ok());
  ASSERT_TRUE(s.AddNode(newer).ok());
  Task t = MakeTask("t", 1000, 1, 1000);
  t.min_capability = 70;
  EXPECT_FALSE(s.Fits(0, t));
  EXPECT_TRUE(s.Fits(1, t));
  Task eight = MakeTask("e", 1000, 8, 1000);
  EXPECT_FALSE(s.CouldEverHost(0, eight));
  EXPECT_FALSE(s.CouldEverHost(1, eight));
}

TEST(ClusterStateTest, AllowedNodesConstrainGpuTasksOnly) {
  ClusterState s;
  ASSERT_TRUE(s.AddNode({"a", 8000, 8192, 4, "A100"}).ok());
  ASSERT_TRUE(s.AddNode({"b", 8000, 8192, 4, "A100"}).ok());
  Task t = MakeTask("t", 1000, 1, 1000);
  t.allowed_nodes = {"b"};
  EXPECT_FALSE(s.Fits(0, t));
  EXPECT_TRUE(s.Fits(1, t));
  EXPECT_FALSE(s.CouldEverHost(0, t));
  EXPECT_NE(ShapeOf(t), ShapeOf(MakeTask("t", 1000, 1, 1000)));  // caches keep them apart
  Task cpu = MakeTask("c", 1000, 0, 0);
  cpu.allowed_nodes = {"b"};
  EXPECT_TRUE(s.Fits(0, cpu));
}

}  // namespace
}  // namespace gpupool::sched
