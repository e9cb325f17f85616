#include <gtest/gtest.h>

#include "gpu/export/exporters.h"
#include "gpu/export/test_nodes.h"

namespace gpupool::gpu {
namespace {

using testing::TwoH100;

TEST(TableExportTest, ShowsGpusDriverAndTopology) {
  const std::string t = ExportTable(TwoH100());
  EXPECT_NE(t.find("Node h100-pair: 2 GPUs\n"), std::string::npos) << t;
  EXPECT_NE(t.find("NVIDIA driver 550.54.15, CUDA 12.4\n"), std::string::npos) << t;
  EXPECT_NE(t.find("0 / 81559 MiB"), std::string::npos) << t;
  EXPECT_NE(t.find("Topology:"), std::string::npos) << t;
  EXPECT_NE(t.find("GPU0  X     NV18"), std::string::npos) << t;
  EXPECT_NE(t.find("GPU1  NV18  X"), std::string::npos) << t;
}

TEST(TableExportTest, NoGpusSaysSoPlainly) {
  NodeInfo n;
  n.hostname = "cpu-only";
  n.diagnostics = {{"nvml", "libnvidia-ml.so.1 not found"}};
  EXPECT_EQ(ExportTable(n),
            "No GPUs found on cpu-only\n\nDiagnostics:\n  [nvml] libnvidia-ml.so.1 not found\n");
}

TEST(TableExportTest, ControlCharactersCannotForgeLines) {
  NodeInfo n = TwoH100();
  n.gpus[0].name = "H100\n  9  fake row\x1b[31m";
  const std::string t = ExportTable(n);
  EXPECT_EQ(t.find('\x1b'), std::string::npos);
  EXPECT_NE(t.find("H100?  9  fake row?[31m"), std::string::npos) << t;
}

TEST(TableExportTest, AmdPartitionsAreListedWhereKnown) {
  NodeInfo n = TwoH100();
  EXPECT_EQ(ExportTable(n).find("AMD partitions"), std::string::npos);
  GpuInfo a;
  a.vendor = Vendor::kAmd;
  a.index = 0;
  a.compute_partition = "CPX";
  a.memory_partition = "NPS4";
  a.compute_units = 38;
  n.gpus.push_back(a);
  const std::string t = ExportTable(n);
  EXPECT_NE(t.find("AMD partitions (each partition is its own device):\n"
                   "  GPU   COMPUTE  MEMORY  CUS\n"
                   "  AMD0  CPX      NPS4    38\n"),
            std::string::npos)
      << t;
}

TEST(TableExportTest, UnknownValuesShowAsDash) {
  NodeInfo n;
  n.gpus.push_back(GpuInfo{});
  const std::string t = ExportTable(n);
  EXPECT_NE(t.find("-    unknown  -     0 / 0 MiB"), std::string::npos) << t;
}

}  // namespace
}  // namespace gpupool::gpu
