// The fragmentation measure on worked examples (numbers computed by hand).
#include "sched/fragmentation.h"

#include <gtest/gtest.h>

namespace gpupool::sched {
namespace {

// Two shapes: a half GPU (weight 3) and one whole GPU (weight 1).
TargetWorkload HalfAndWhole() {
  return TargetWorkload({{1000, 1, 500, {}, 3}, {1000, 1, 1000, {}, 1}});
}

TEST(FragmentationTest, IdleNodeHasNoFragment) {
  ClusterState s;
  ASSERT_TRUE(s.AddNode({"n", 8000, 8192, 2, "T4"}).ok());
  FragmentationMeasure m(HalfAndWhole(), s.models());
  EXPECT_EQ(m.ScaledNode(s.node(0)), 0);
  EXPECT_DOUBLE_EQ(m.ClusterRatio(s), 0.0);
}

TEST(FragmentationTest, WorkedExampleWithSmallLeftovers) {
  // GPUs free: 300 and 1000. Half-GPU shape fits (the idle GPU); the 300 left on GPU 0
  // is fragment for it: frag = 300. Whole shape fits; 300 < 1000 is fragment: 300.
  // F = (3*300 + 1*300) / 4 = 300 milli.
  ClusterState s;
  ASSERT_TRUE(s.AddNode({"n", 8000, 8192, 2, "T4"}).ok());
  Task t{"t", "", 1000, 0, 1, 700, {}, 0};
  ASSERT_TRUE(s.Allocate(t, {0, {0}}).ok());
  FragmentationMeasure m(HalfAndWhole(), s.models());
  EXPECT_EQ(m.ScaledNode(s.node(0)), 3 * 300 + 1 * 300);
  EXPECT_DOUBLE_EQ(m.NodeMilli(s.node(0)), 300.0);
  // Ratio: 300 fragment of 1300 free.
  EXPECT_DOUBLE_EQ(m.ClusterRatio(s), 300.0 / 1300.0);
}

TEST(FragmentationTest, WorkedExampleWholeShapeBlocked) {
  // GPUs free: 600 and 600. Half fits both: no GPU below 500, frag 0. Whole does not fit:
  // all 1200 free is fragment. F = (3*0 + 1*1200)/4 = 300.
  ClusterState s;
  ASSERT_TRUE(s.AddNode({"n", 8000, 8192, 2, "T4"}).ok());
  Task t{"t", "", 0, 0, 1, 400, {}, 0};
  ASSERT_TRUE(s.Allocate(t, {0, {0}}).ok());
  ASSERT_TRUE(s.Allocate(t, {0, {1}}).ok());
  FragmentationMeasure m(HalfAndWhole(), s.models());
  EXPECT_DOUBLE_EQ(m.NodeMilli(s.node(0)), 300.0);
}

TEST(FragmentationTest, CpuShortageAndModelMismatchMakeEverythingFragment) {
  ClusterState s;
  ASSERT_TRUE(s.AddNode({"n", 1500, 8192, 2, "T4"}).ok());
  Task cpu_hog{"c", "", 1000, 0, 0, 0, {}, 0};
  ASSERT_TRUE(s.Allocate(cpu_hog, {0, {}}).ok());
  // 500 CPU left; both shapes need 1000 CPU: the whole 2000 free GPU milli is fragment.
  FragmentationMeasure m(HalfAndWhole(), s.models());
  EXPECT_DOUBLE_EQ(m.NodeMilli(s.node(0)), 2000.0);

  ClusterState s2;
  ASSERT_TRUE(s2.AddNode({"n", 8000, 8192, 2, "T4"}).ok());
  TargetWorkload only_v100({{0, 1, 1000, {"V100"}, 1}});
  FragmentationMeasure m2(only_v100, s2.models());
  EXPECT_DOUBLE_EQ(m2.NodeMilli(s2.node(0)), 2000.0);
  // CPU-only shapes count every free GPU share as fragment.
  TargetWorkload cpu_only({{1000, 0, 0, {}, 1}});
  FragmentationMeasure m3(cpu_only, s2.models());
  EXPECT_DOUBLE_EQ(m3.NodeMilli(s2.node(0)), 2000.0);
}

TEST(FragmentationTest, TargetWorkloadKeepsPopularShapesUpToCoverage) {
  std::vector<Task> tasks;
  for (int i = 0; i < 90; ++i) tasks.push_back({"a", "", 1000, 0, 1, 1000, {}, 0});
  for (int i = 0; i < 8; ++i) tasks.push_back({"b", "", 2000, 0, 1, 500, {}, 0});
  for (int i = 0; i < 2; ++i) tasks.push_back({"c", "", 3000, 0, 0, 0, {}, 0});
  TargetWorkload w = TargetWorkload::FromTasks(tasks, 0.95);
  ASSERT_EQ(w.shapes().size(), 2u);  // 90 + 8 = 98% >= 95%; the CPU-only shape is cut
  EXPECT_EQ(w.shapes()[0].weight, 90);
  EXPECT_EQ(w.shapes()[1].gpu_milli, 500);
  EXPECT_EQ(w.total_weight(), 98);
}

TEST(FragmentationTest, MemoryShapesCountMemoryAndFgdShapesDoNot) {
  // One GPU shape in two memory sizes: FGD's shapes merge them and carry no memory; the
  // memory shapes keep them apart, and a node without the memory counts as fragment.
  std::vector<Task> tasks;
  for (int i = 0; i < 6; ++i) tasks.push_back({"a", "", 1000, 4096, 1, 1000, {}, 0});
  for (int i = 0; i < 4; ++i) tasks.push_back({"b", "", 1000, 65536, 1, 1000, {}, 0});
  TargetWorkload w = TargetWorkload::FromTasks(tasks, 1.0);
  ASSERT_EQ(w.shapes().size(), 1u);
  EXPECT_EQ(w.shapes()[0].memory_mib, 0);
  ASSERT_EQ(w.memory_shapes().size(), 2u);
  EXPECT_EQ(w.memory_shapes()[0].memory_mib, 4096);
  EXPECT_EQ(w.memory_shapes()[1].memory_mib, 65536);
  const std::vector<std::string> models = {"T4"};
  const int32_t gpus[] = {1000, 1000};
  const FragmentationMeasure fgd(w, models);
  const FragmentationMeasure mem(TargetWorkload(w.memory_shapes()), models);
  EXPECT_EQ(fgd.ScaledNode(0, 8000, gpus, 2, 8192), 0);
  // Only the 4 GiB shape fits in 8 GiB: the 64 GiB shape (weight 4) sees 2000 fragment.
  EXPECT_EQ(mem.ScaledNode(0, 8000, gpus, 2, 8192), 4 * 2000);
  EXPECT_EQ(mem.ScaledNode(0, 8000, gpus, 2, 65536), 0);
}

}  // namespace
}  // namespace gpupool::sched
