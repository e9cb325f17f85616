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

TEST(NodeCsv, ReadsOpenbNodesAndNamesBadFields) {
  auto t = CsvTable::Parse("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,P100\nn1,1,1,0,\n",
                           "nodes.csv");
  ASSERT_TRUE(t.ok());
  auto nodes = ReadNodeCsv(*t);
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  EXPECT_EQ(nodes->size(), 2u);
  auto bad =
      CsvTable::Parse("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,\n", "nodes.csv");
  ASSERT_TRUE(bad.ok());
  auto r = ReadNodeCsv(*bad);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("nodes.csv:2: field 'model'"), std::string::npos);
}

}  // namespace
}  // namespace gpupool::sim
