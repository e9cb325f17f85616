#include "gpu/rocm/kfd_topology.h"

#include <gtest/gtest.h>

#include "gpu/sysfs/fake_sysfs_tree.h"

namespace gpupool::gpu::rocm {
namespace {

using gpupool::gpu::testing::FakeSysfsTree;

TEST(GfxTargetNameTest, FormatsMajorDecimalMinorAndSteppingHex) {
  EXPECT_EQ(GfxTargetName(90010), "gfx90a");
  EXPECT_EQ(GfxTargetName(110000), "gfx1100");
  EXPECT_EQ(GfxTargetName(90400), "gfx940");
  EXPECT_EQ(GfxTargetName(90402), "gfx942");
  EXPECT_EQ(GfxTargetName(90008), "gfx908");
  EXPECT_EQ(GfxTargetName(100300), "gfx1030");
  EXPECT_EQ(GfxTargetName(0), "");
}

TEST(KfdTopologyTest, ReadsGpuNodesAndLinks) {
  FakeSysfsTree tree;
  tree.AddKfdNode(0, "cpu_cores_count 64\nsimd_count 0\ngfx_target_version 0\n");
  tree.AddKfdNode(1,
                  "simd_count 440\ngfx_target_version 90010\nlocation_id 49408\ndomain 2\n"
                  "drm_render_minor 128\nunique_id 7654321\n");
  tree.AddKfdIoLink(1, 0, 2, 0);
  tree.AddKfdIoLink(1, 1, 11, 2);
  tree.AddKfdNode(2, "simd_count 440\nlocation_id 50688\n");
  tree.Write(FakeSysfsTree::KfdNodeDir(3) + "/gpu_id", "0\n");  // no properties: skipped
  tree.AddKfdNode(10, "simd_count 4\n");                        // numeric order, not name order
  SysfsReader reader(tree.root());
  DiagnosticSink sink("rocm-smi");
  std::vector<KfdNode> nodes = ReadKfdTopology(reader, &sink);
  EXPECT_EQ(sink.size(), 0u);
  ASSERT_EQ(nodes.size(), 4u);
  EXPECT_FALSE(nodes[0].is_gpu());
  const KfdNode& gpu = nodes[1];
  EXPECT_TRUE(gpu.is_gpu());
  EXPECT_EQ(gpu.id, 1);
  EXPECT_EQ(gpu.gfx_target_version, 90010u);
  EXPECT_EQ(gpu.pci_bus_id(), "0002:c1:00.0");  // 49408 = 0xc100
  EXPECT_EQ(gpu.drm_render_minor, 128);
  EXPECT_EQ(gpu.unique_id, 7654321u);
  ASSERT_EQ(gpu.io_links.size(), 2u);
  EXPECT_EQ(gpu.io_links[1].type, kKfdIoLinkTypeXgmi);
  EXPECT_EQ(gpu.io_links[1].node_to, 2);
  EXPECT_EQ(nodes[2].pci_bus_id(), "0000:c6:00.0");
  EXPECT_EQ(nodes[3].id, 10);
  EXPECT_EQ(FindKfdGpu(nodes, "0002:c1:00.0"), &nodes[1]);
  EXPECT_EQ(FindKfdGpu(nodes, "0000:99:00.0"), nullptr);
}

// MI300 partitions: a kernel that puts the partition's number in bits 28-31 and one that
// puts it in the function bits give each partition the same bus id of its own.
TEST(KfdTopologyTest, PartitionNumbersBecomeTheFunctionEitherWay) {
  EXPECT_EQ(KfdBusId(0, 0x0c00), "0000:0c:00.0");
  EXPECT_EQ(KfdBusId(0, 0x0c00 | (1u << 28)), "0000:0c:00.1");
  EXPECT_EQ(KfdBusId(0, 0x0c00 | 1), "0000:0c:00.1");
  EXPECT_EQ(KfdBusId(2, 0x0c00 | (7u << 28)), "0002:0c:00.7");
  FakeSysfsTree tree;
  tree.AddKfdNode(2, "simd_count 152\nsimd_per_cu 4\nlocation_id " +
                         std::to_string(0x0c00 | (3u << 28)) + "\n");
  SysfsReader reader(tree.root());
  DiagnosticSink sink("rocm-smi");
  std::vector<KfdNode> nodes = ReadKfdTopology(reader, &sink);
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0].pci_bus_id(), "0000:0c:00.3");
  EXPECT_EQ(nodes[0].compute_units(), 38);
  EXPECT_TRUE(sink.Take().empty());  // a 32-bit location is not garbled
}

TEST(KfdTopologyTest, GarbledPropertiesAreReportedAndIgnored) {
  FakeSysfsTree tree;
  tree.AddKfdNode(1,
                  "simd_count 440\ngfx_target_version abc\nlocation_id 9999999999\n"
                  "drm_render_minor -1\nunique_id 123456789012345678901234567890\n");
  tree.Write(FakeSysfsTree::KfdNodeDir(1) + "/io_links/0/properties", "type eleven\nnode_to 2\n");
  SysfsReader reader(tree.root());
  DiagnosticSink sink("rocm-smi");
  std::vector<KfdNode> nodes = ReadKfdTopology(reader, &sink);
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0].gfx_target_version, 0u);
  EXPECT_EQ(nodes[0].location_id, 0u);
  EXPECT_EQ(nodes[0].drm_render_minor, -1);
  EXPECT_EQ(nodes[0].unique_id, 0u);
  ASSERT_EQ(nodes[0].io_links.size(), 1u);
  EXPECT_EQ(nodes[0].io_links[0].type, 0u);
  std::vector<Diagnostic> d = sink.Take();
  ASSERT_EQ(d.size(), 5u);
  EXPECT_NE(d[0].message.find("'gfx_target_version'"), std::string::npos) << d[0].message;
  EXPECT_NE(d[0].message.find("'abc'"), std::string::npos) << d[0].message;
}

}  // namespace
}  // namespace gpupool::gpu::rocm
