// MIG layouts for simulated GPUs: the parser (bad input named), cutting a node's GPUs
// into instances, the node CSV's `mig` column, physical-GPU accounting and the
// fragmentation measure on MIG nodes.
#include "sim/mig_layout.h"

#include <gtest/gtest.h>

#include "sched/rng.h"
#include "sim/openb_reader.h"

namespace gpupool::sim {
namespace {

void ExpectError(std::string_view layout, const std::string& needle) {
  Result<MigLayout> r = ParseMigLayout(layout);
  ASSERT_FALSE(r.ok()) << layout;
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
}

TEST(MigLayoutTest, ParsesALayoutOfOneGpu) {
  Result<MigLayout> r = ParseMigLayout(" 3g.40gb+2g.20gb + 1G.10GB+1g.10gb ");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->text, "3g.40gb+2g.20gb+1g.10gb+1g.10gb");
  EXPECT_EQ(r->gpu_memory_mib, 81920);
  ASSERT_EQ(r->instances.size(), 4u);
  EXPECT_EQ(r->instances[0].memory_mib, 40960);
  EXPECT_EQ(r->instances[0].compute_slices, 3);
  EXPECT_EQ(r->instances[1].memory_mib, 20480);
  EXPECT_EQ(r->instances[3].memory_mib, 10240);
  // The placements the hardware allows: 4g + 3g, seven 1g.10gb, 1g.20gb x 4.
  EXPECT_TRUE(ParseMigLayout("4g.40gb+3g.40gb").ok());
  EXPECT_TRUE(ParseMigLayout("1g.10gb+1g.10gb+1g.10gb+1g.10gb+1g.10gb+1g.10gb+1g.10gb").ok());
  EXPECT_TRUE(ParseMigLayout("1g.20gb+1g.20gb+1g.20gb+1g.20gb").ok());
  EXPECT_TRUE(ParseMigLayout("7g.80gb").ok());
  // Other GPUs: the family is told by the profile names.
  EXPECT_EQ(ParseMigLayout("2g.10gb+3g.20gb")->gpu_memory_mib, 40 * 1024);
  EXPECT_EQ(ParseMigLayout("4g.71gb+3g.71gb")->gpu_memory_mib, 141 * 1024);
  EXPECT_EQ(ParseMigLayout("2g.12gb+1g.6gb+1g.6gb")->gpu_memory_mib, 24 * 1024);
  // 1g.10gb exists on 40 and 80 GB GPUs; alone it is taken for the larger.
  EXPECT_EQ(ParseMigLayout("1g.10gb")->gpu_memory_mib, 81920);
}

TEST(MigLayoutTest, BadLayoutsNameTheProfileAndTheRule) {
  ExpectError("", "MIG layout '': empty");
  ExpectError("3g.30gb+1g.10gb", "'3g.30gb' is not a MIG profile");
  ExpectError("3g.30gb", "80 GB GPUs (A100 80GB, H100): 1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb");
  ExpectError("mig", "'mig' is not a MIG profile");
  ExpectError("1g.10gb++1g.10gb", "an empty profile between '+'");
  ExpectError("2g.10gb+3g.40gb", "the profiles are of different GPUs");
  // Too much for one GPU: compute slices, memory slices, or the allowed placements.
  ExpectError("4g.40gb+4g.40gb", "do not fit one 80 GB GPU");
  ExpectError("4g.40gb+4g.40gb", "these need 8 compute slices");
  ExpectError("3g.40gb+3g.40gb+1g.10gb", "do not fit one 80 GB GPU");
  ExpectError("7g.80gb+1g.10gb", "do not fit");
  ExpectError("1g.20gb+1g.20gb+1g.20gb+1g.20gb+1g.10gb", "do not fit");
  ExpectError("4g.24gb+1g.6gb", "do not fit one 24 GB GPU (4 compute slices");
}

sched::NodeSpec TwoGpus() { return sched::NodeSpec{"n", 64000, 262144, 2, "A100", 0, 80}; }

TEST(MigLayoutTest, ApplyCutsEveryGpuIntoWholeOnlyInstances) {
  sched::NodeSpec n = TwoGpus();
  ASSERT_TRUE(ApplyMigLayout(*ParseMigLayout("3g.40gb+2g.20gb+1g.10gb+1g.10gb"), n).ok());
  EXPECT_EQ(n.num_gpus, 8);
  EXPECT_EQ(n.whole_only_gpus, 0xffu);
  EXPECT_EQ(n.gpu_memory_mib, 81920);
  EXPECT_EQ(n.device_memory_mib,
            (std::vector<int64_t>{40960, 20480, 10240, 10240, 40960, 20480, 10240, 10240}));
  // Each instance's GPU: a gang's shares take instances of different GPUs (NCCL).
  EXPECT_EQ(n.physical_gpus, (std::vector<int32_t>{0, 0, 0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(SpecGpuCapacityMilli(n), 2000);  // two GPUs, every GB in an instance
  Status again = ApplyMigLayout(*ParseMigLayout("7g.80gb"), n);
  EXPECT_NE(again.message().find("already has MIG instances"), std::string::npos);

  sched::NodeSpec wide{"w", 64000, 262144, 10, "A100", 0, 80};
  Status s = ApplyMigLayout(*ParseMigLayout("1g.10gb+1g.10gb+1g.10gb+1g.10gb+1g.10gb+1g.10gb+"
                                            "1g.10gb"),
                            wide);
  EXPECT_NE(s.message().find("10 GPUs cut into 7 instances each make 70 devices; at most 64"),
            std::string::npos)
      << s.message();
  // Seven 1g.10gb leave an eighth of the memory in no instance: no capacity.
  sched::NodeSpec one{"o", 64000, 262144, 1, "A100", 0, 80};
  ASSERT_TRUE(ApplyMigLayout(*ParseMigLayout("1g.10gb+1g.10gb+1g.10gb+1g.10gb+1g.10gb+1g.10gb+"
                                             "1g.10gb"),
                             one)
                  .ok());
  EXPECT_EQ(SpecGpuCapacityMilli(one), 875);
}

TEST(MigLayoutTest, NodeCsvMigColumn) {
  auto nodes = [](const std::string& text) -> Result<std::vector<sched::NodeSpec>> {
    GP_ASSIGN_OR_RETURN(CsvTable t, CsvTable::Parse(text, "nodes.csv"));
    return ParseOpenbNodes(t);
  };
  const std::string h = "sn,cpu_milli,memory_mib,gpu,model,mig\n";
  auto ok = nodes(h + "a,64000,262144,2,A100,3g.40gb+4g.40gb\nb,64000,262144,2,A100,\n");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ((*ok)[0].num_gpus, 4);
  EXPECT_EQ((*ok)[0].whole_only_gpus, 0xfu);
  EXPECT_EQ((*ok)[1].num_gpus, 2);
  EXPECT_EQ((*ok)[1].whole_only_gpus, 0u);
  auto bad = nodes(h + "a,64000,262144,2,A100,3g.30gb\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("nodes.csv:2: field 'mig'"), std::string::npos)
      << bad.status().message();
  EXPECT_NE(bad.status().message().find("'3g.30gb' is not a MIG profile"), std::string::npos);
  bad = nodes(h + "a,64000,262144,0,,1g.10gb\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("a MIG layout for a node without GPUs"), std::string::npos);
}

sched::TargetWorkload Workload() {
  std::vector<sched::TargetShape> shapes = {{1000, 1, 1000, {}, 5, 0},  // whole GPUs
                                            {1000, 1, 125, {}, 3, 0},   // 10 GiB of 80
                                            {1000, 1, 400, {}, 2, 0},   // 32 GiB of 80
                                            {0, 0, 0, {}, 1, 0},        // CPU only
                                            {1000, 2, 1000, {"T4"}, 1, 0}};
  return sched::TargetWorkload(shapes);
}

TEST(MigLayoutTest, FragmentationEqualsFgdWithoutInstances) {
  const sched::TargetWorkload w = Workload();
  sched::ClusterState s;
  ASSERT_TRUE(s.AddNode(sched::NodeSpec{"p", 32000, 262144, 4, "A100", 81920, 80}).ok());
  const sched::FragmentationMeasure fgd(w, s.models());
  sched::Rng rng(7);
  for (int round = 0; round < 50; ++round) {
    sched::Task t{"t", "", static_cast<int64_t>(rng.Uniform(4)) * 1000,
                  0,   1,  static_cast<int32_t>(1 + rng.Uniform(1000)),
                  {},  0};
    const auto g = static_cast<int32_t>(rng.Uniform(4));
    if (s.node(0).gpu_free_milli[static_cast<size_t>(g)] >= t.gpu_milli &&
        s.node(0).cpu_free_milli >= t.cpu_milli) {
      ASSERT_TRUE(s.Allocate(t, {0, {g}}).ok());
    }
    EXPECT_EQ(fgd.ScaledMigNode(s.node(0)), fgd.ScaledNode(s.node(0)));
    EXPECT_EQ(NodeGpuUsedMilli(s.node(0)), 4000 - s.node(0).gpu_free_total);
  }
}

TEST(MigLayoutTest, FragmentationCountsInstancesAShapeMayNotTake) {
  const sched::TargetWorkload w = Workload();
  sched::NodeSpec spec{"m", 64000, 262144, 1, "A100", 0, 80};
  ASSERT_TRUE(ApplyMigLayout(*ParseMigLayout("3g.40gb+2g.20gb+1g.10gb+1g.10gb"), spec).ok());
  sched::ClusterState s;
  ASSERT_TRUE(s.AddNode(spec).ok());
  const sched::NodeState& n = s.node(0);
  const sched::FragmentationMeasure fgd(w, s.models());
  EXPECT_EQ(NodeGpuCapacityMilli(n), 1000);
  // Idle: whole GPUs, CPU-only and the T4 pair cannot use any of it (1000 each); the
  // 10 GiB share can use every instance (0); the 32 GiB share only the 3g.40gb (the
  // other three, 500, are fragmented for it).
  EXPECT_EQ(fgd.ScaledMigNode(n), 5 * 1000 + 3 * 0 + 2 * 500 + 1 * 1000 + 1 * 1000);
  // The 3g.40gb is taken: the 32 GiB share fits nowhere, so all 500 left count for it.
  sched::Task big{"b", "", 1000, 0, 1, 400, {}, 0};
  ASSERT_TRUE(s.Allocate(big, {0, {0}}).ok());
  EXPECT_EQ(NodeGpuUsedMilli(s.node(0)), 500);
  EXPECT_EQ(fgd.ScaledMigNode(s.node(0)), 5 * 500 + 0 + 2 * 500 + 500 + 500);
}

}  // namespace
}  // namespace gpupool::sim
