#include "sim/timed/cluster_spec.h"

#include <gtest/gtest.h>

namespace gpupool::sim {
namespace {

TEST(ClusterSpec, ParsesGroupsWithDefaults) {
  auto nodes = ParseClusterSpec("2x8:V100, 1x4:T4:16000:32768,1x0");
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 4u);
  EXPECT_EQ((*nodes)[0].name, "node-0000");
  EXPECT_EQ((*nodes)[0].num_gpus, 8);
  EXPECT_EQ((*nodes)[0].gpu_model, "V100");
  EXPECT_EQ((*nodes)[0].cpu_milli, 64000);
  EXPECT_EQ((*nodes)[2].cpu_milli, 16000);
  EXPECT_EQ((*nodes)[2].memory_mib, 32768);
  EXPECT_EQ((*nodes)[3].gpu_model, "");
  auto cluster = BuildCluster(*nodes);
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  EXPECT_EQ(cluster->TotalCapacity().gpu_milli, 20000);
}

TEST(ClusterSpec, RejectsBadSpecs) {
  for (const char* bad : {"", "8", "0x8", "ax8", "2x-1", "2x8:V100:x", "2x8:a:1:2:3", "2x8,"}) {
    auto nodes = ParseClusterSpec(bad);
    EXPECT_FALSE(nodes.ok()) << bad;
    if (!nodes.ok()) {
      EXPECT_NE(nodes.status().message().find("cluster spec"), std::string::npos);
    }
  }
  EXPECT_FALSE(BuildCluster({}).ok());
}

}  // namespace
}  // namespace gpupool::sim
