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
  Task no_owner = MakeTask("o", 1000, 1, 500);
  no_owner.owner = -1;
  EXPECT_NE(ValidateTask(no_owner).message().find("field owner is negative"), std::string::npos);
}

Task Share(std::string name, int32_t milli, int64_t owner) {
  Task t = MakeTask(std::move(name), 1000, 1, milli);
  t.owner = owner;
  return t;
}

// One node of 2 GPUs; GPU 0 single-owner (bit 0), GPU 1 not.
ClusterState OneSingleOwnerGpu() {
  ClusterState s;
  NodeSpec spec{"a", 16000, 32768, 2, "H100"};
  spec.single_owner_gpus = 0b01;
  EXPECT_TRUE(s.AddNode(spec).ok());
  return s;
}

TEST(TaskTest, ShapeKeepsTheOwnerOfFractionalTasksOnly) {
  // Caches by shape (failed shapes of a pass, explanations) must keep two owners' shares
  // apart, since one may fit where the other may not; a whole GPU's owner never matters.
  EXPECT_NE(ShapeOf(Share("a", 500, 1)), ShapeOf(Share("b", 500, 2)));
  EXPECT_NE(HashShape(ShapeOf(Share("a", 500, 1))), HashShape(ShapeOf(Share("b", 500, 2))));
  EXPECT_EQ(ShapeOf(Share("a", 1000, 1)), ShapeOf(Share("b", 1000, 2)));
  EXPECT_EQ(ShapeOf(Share("a", 1000, 1)).owner, 0);
}

TEST(ClusterStateTest, SingleOwnerGpuTakesOneOwnersSharesAtATime) {
  ClusterState s = OneSingleOwnerGpu();
  EXPECT_TRUE(s.has_single_owner_gpus());
  EXPECT_EQ(s.OwnerOf(0, 0), 0);
  const Task a1 = Share("a1", 300, 7), a2 = Share("a2", 300, 7), b = Share("b", 300, 9);
  ASSERT_TRUE(s.Allocate(a1, {0, {0}}).ok());
  EXPECT_EQ(s.OwnerOf(0, 0), 7);
  EXPECT_EQ(s.HeldByOthers(0, b), 0b01u);
  EXPECT_EQ(s.HeldByOthers(0, a2), 0u);
  // The same owner joins; another owner may not, though the share is free; it may use
  // GPU 1, which is not single-owner (and gets no owner there).
  ASSERT_TRUE(s.Allocate(a2, {0, {0}}).ok());
  const uint64_t version = s.node(0).version;
  const Status refused = s.Allocate(b, {0, {0}});
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused.message(),
            "task 'b' of owner 9 may not use GPU 0 of node 'a': the GPU serves one owner at a "
            "time and owner 7 holds it");
  EXPECT_EQ(s.node(0).version, version);  // refused: nothing changed
  EXPECT_EQ(s.node(0).gpu_free_milli[0], 400);
  // With GPU 1 taken whole, only GPU 0's share is left: Fits says no to b alone.
  const Task whole = MakeTask("w", 1000, 1, 1000);
  ASSERT_TRUE(s.Allocate(whole, {0, {1}}).ok());
  EXPECT_FALSE(s.Fits(0, b));
  EXPECT_EQ(s.WhyNotFit(0, b), "single-owner GPUs held by another owner");
  EXPECT_TRUE(s.Fits(0, Share("a3", 300, 7)));
  EXPECT_TRUE(s.Fits(0, Share("anyone", 300, 0)));  // no owner: not restricted
  EXPECT_EQ(s.WhyNotFit(0, Share("big", 500, 7)), "insufficient GPU share");
  ASSERT_TRUE(s.Release(whole, {0, {1}}).ok());
  EXPECT_TRUE(s.Fits(0, b));  // through GPU 1, which is not single-owner
  ASSERT_TRUE(s.Allocate(b, {0, {1}}).ok());
  EXPECT_EQ(s.OwnerOf(0, 1), 0);
  // Release: the owner stays while a share of theirs runs, and goes when the GPU is idle.
  ASSERT_TRUE(s.Release(a1, {0, {0}}).ok());
  EXPECT_EQ(s.OwnerOf(0, 0), 7);
  EXPECT_FALSE(s.Allocate(b, {0, {0}}).ok());
  ASSERT_TRUE(s.Release(a2, {0, {0}}).ok());
  EXPECT_EQ(s.OwnerOf(0, 0), 0);
  ASSERT_TRUE(s.Allocate(b, {0, {0}}).ok());
  EXPECT_EQ(s.OwnerOf(0, 0), 9);
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
  NodeSpec ghost{"e", 1000, 1024, 2, "X"};
  ghost.single_owner_gpus = 0b100;  // GPU 2 of 2
  EXPECT_EQ(s.AddNode(ghost).message(), "node 'e' marks GPU 2 single-owner but has 2 GPUs");
  EXPECT_FALSE(s.has_single_owner_gpus());
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

TEST(ClusterStateTest, AShareSizedByMemoryNeverLandsOnAGpuOfUnknownMemory) {
  // Memory 0 is unknown (discovery could not read it): a --gpu-mem share of 10 GiB was
  // placed there as 1/8 of the GPU, which may be far smaller than 80 GiB.
  ClusterState s;
  NodeSpec unknown{"unknown", 8000, 8192, 4, "A100"};
  unknown.gpu_memory_unknown = true;
  NodeSpec known{"known", 8000, 8192, 4, "A100"};
  known.gpu_memory_mib = 81920;
  ASSERT_TRUE(s.AddNode(unknown).ok());
  ASSERT_TRUE(s.AddNode(known).ok());
  Task share = MakeTask("s", 1000, 1, 125);
  share.gpu_memory_mib = 10240;
  EXPECT_FALSE(s.Fits(0, share));
  EXPECT_FALSE(s.CouldEverHost(0, share));
  EXPECT_EQ(s.WhyNotFit(0, share), "GPU memory unknown (a --gpu-mem share is never placed there)");
  EXPECT_TRUE(s.Fits(1, share));
  // A share by fraction, or a whole GPU, asks no memory: the GPU of unknown memory serves.
  EXPECT_TRUE(s.Fits(0, MakeTask("f", 1000, 1, 125)));
  EXPECT_TRUE(s.Fits(0, MakeTask("w", 1000, 1, 1000)));
  // A node whose memory is merely not modelled (the simulator's: 0, not unknown) takes it.
  ASSERT_TRUE(s.AddNode({"unmodelled", 8000, 8192, 4, "A100"}).ok());
  EXPECT_TRUE(s.Fits(2, share));
}

}  // namespace
}  // namespace gpupool::sched
