#include <gtest/gtest.h>

#include "gpu/export/exporters.h"
#include "gpu/export/test_nodes.h"

namespace gpupool::gpu {
namespace {

using testing::AmdGpu;
using testing::TwoH100;

TEST(GresExportTest, TypeNamesAreShortModelNames) {
  EXPECT_EQ(GresTypeName("NVIDIA H100 80GB HBM3"), "h100");
  EXPECT_EQ(GresTypeName("NVIDIA A100-SXM4-80GB"), "a100");
  EXPECT_EQ(GresTypeName("Tesla V100-SXM3-32GB"), "v100");
  EXPECT_EQ(GresTypeName("AMD Instinct MI250X"), "mi250x");
  EXPECT_EQ(GresTypeName("NVIDIA GeForce RTX 4090"), "rtx4090");
  EXPECT_EQ(GresTypeName("NVIDIA L40S"), "l40s");
  EXPECT_EQ(GresTypeName("NVIDIA"), "");
  EXPECT_EQ(GresTypeName(""), "");
  EXPECT_EQ(GresTypeName("Weird=Name;rm -rf"), "weirdnamerm");
}

TEST(GresExportTest, LinesCarryFileCoresAndLinks) {
  NodeInfo n = TwoH100();
  n.gpus[0].cpu_affinity = "0-55,112-167";
  EXPECT_EQ(ExportGres(n),
            "# gres.conf for h100-pair, written by `gpupool gpus --format gres`\n"
            "Name=gpu Type=h100 File=/dev/nvidia0 Cores=0-55,112-167 Links=-1,18\n"
            "Name=gpu Type=h100 File=/dev/nvidia1 Links=18,-1\n");
}

TEST(GresExportTest, LinksAreLeftOutWithoutNvlink) {
  NodeInfo n = TwoH100();
  n.links[0].nvlink_count = 0;
  EXPECT_EQ(ExportGres(n).find("Links="), std::string::npos);
}

TEST(GresExportTest, AmdUsesRenderNodesAndXgmi) {
  NodeInfo n;
  n.hostname = "mi";
  n.gpus = {AmdGpu(0, "0x1", "0000:c1:00.0"), AmdGpu(1, "0x2", "0000:c6:00.0")};
  n.links = {GpuLink{"0000:c1:00.0", "0000:c6:00.0", 0, 4, PcieLevel::kSystem}};
  EXPECT_EQ(ExportGres(n),
            "# gres.conf for mi, written by `gpupool gpus --format gres`\n"
            "Name=gpu Type=mi250x File=/dev/dri/renderD128 Links=-1,4\n"
            "Name=gpu Type=mi250x File=/dev/dri/renderD129 Links=4,-1\n");
}

TEST(GresExportTest, HostileHostnameCannotAddLines) {
  NodeInfo n = TwoH100();
  n.hostname = "x\nName=gpu File=/dev/sda";
  const std::string g = ExportGres(n);
  EXPECT_EQ(std::count(g.begin(), g.end(), '\n'), 3) << g;
}

TEST(GresExportTest, NoGpus) {
  EXPECT_EQ(
      ExportGres(NodeInfo{}),
      "# gres.conf for this node, written by `gpupool gpus --format gres`\n# no GPUs found\n");
}

}  // namespace
}  // namespace gpupool::gpu
