#include <gtest/gtest.h>

#include "gpu/export/exporters.h"
#include "gpu/export/test_nodes.h"

namespace gpupool::gpu {
namespace {

using testing::AmdGpu;
using testing::NvidiaGpu;
using testing::TwoH100;

TEST(ClassAdExportTest, NestedFormHoistsSharedAttributesIntoCommon) {
  EXPECT_EQ(ExportClassAd(TwoH100(), false),
            "DetectedGPUs=\"GPU-11111111, GPU-aaaaaaaa\"\n"
            "Common=[ Capability=9.0; DeviceName=\"NVIDIA H100 80GB HBM3\"; DriverVersion=12.4; "
            "ECCEnabled=true; GlobalMemoryMb=81559; MaxSupportedVersion=12040; ]\n"
            "GPU_11111111=[ id=\"GPU-11111111\"; DevicePciBusId=\"0000:18:00.0\"; "
            "DeviceUuid=\"GPU-11111111-2222-3333-4444-555555555555\"; ]\n"
            "GPU_aaaaaaaa=[ id=\"GPU-aaaaaaaa\"; DevicePciBusId=\"0000:2A:00.0\"; "
            "DeviceUuid=\"GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee\"; ]\n");
}

TEST(ClassAdExportTest, AttributesThatDifferStayPerGpu) {
  NodeInfo n = TwoH100();
  n.gpus[1].ecc_enabled = false;
  n.gpus[1].memory_total_bytes = 0;  // unknown: left out, so not common either
  const std::string ad = ExportClassAd(n, false);
  EXPECT_NE(ad.find("GPU_11111111=[ id=\"GPU-11111111\"; DevicePciBusId=\"0000:18:00.0\"; "
                    "DeviceUuid=\"GPU-11111111-2222-3333-4444-555555555555\"; ECCEnabled=true; "
                    "GlobalMemoryMb=81559; ]"),
            std::string::npos)
      << ad;
  EXPECT_NE(ad.find("ECCEnabled=false; ]"), std::string::npos) << ad;
}

TEST(ClassAdExportTest, LegacyFormIsFlatAndByIndex) {
  EXPECT_EQ(ExportClassAd(TwoH100(), true),
            "DetectedGPUs=\"CUDA0, CUDA1\"\n"
            "CUDACapability=9.0\n"
            "CUDADeviceName=\"NVIDIA H100 80GB HBM3\"\n"
            "CUDADriverVersion=12.4\n"
            "CUDAECCEnabled=true\n"
            "CUDAGlobalMemoryMb=81559\n"
            "CUDAMaxSupportedVersion=12040\n"
            "CUDA0DevicePciBusId=\"0000:18:00.0\"\n"
            "CUDA0DeviceUuid=\"11111111-2222-3333-4444-555555555555\"\n"
            "CUDA1DevicePciBusId=\"0000:2A:00.0\"\n"
            "CUDA1DeviceUuid=\"aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee\"\n");
}

TEST(ClassAdExportTest, StringsAreEscaped) {
  NodeInfo n = TwoH100();
  n.gpus.resize(1);
  n.gpus[0].name = std::string("Evil\" GPU\\ \n\x01 \xc3\xbc \xff");
  const std::string ad = ExportClassAd(n, false);
  EXPECT_NE(ad.find(R"(DeviceName="Evil\" GPU\\ \n\001 ü ?")"), std::string::npos) << ad;
  // No raw newline may escape into a new attribute line.
  EXPECT_EQ(std::count(ad.begin(), ad.end(), '\n'), 3) << ad;
}

TEST(ClassAdExportTest, AmdGpusGetGfxTargetAndNoCapability) {
  NodeInfo n;
  n.amd = DriverInfo{"6.3.6", "6.0.2", {}, {"/dev/kfd"}};
  n.gpus = {AmdGpu(0, "0x1a2b3c4d5e6f7081", "0000:c1:00.0")};
  EXPECT_EQ(ExportClassAd(n, false),
            "DetectedGPUs=\"AMD-1a2b3c4d\"\n"
            "Common=[ AmdgpuVersion=\"6.3.6\"; DeviceName=\"AMD Instinct MI250X\"; "
            "GfxTarget=\"gfx90a\"; GlobalMemoryMb=65520; ROCmVersion=\"6.0.2\"; ]\n"
            "AMD_1a2b3c4d=[ id=\"AMD-1a2b3c4d\"; DevicePciBusId=\"0000:C1:00.0\"; "
            "DeviceUuid=\"0x1a2b3c4d5e6f7081\"; ]\n");
}

TEST(ClassAdExportTest, MigDevicesReplaceTheirParent) {
  NodeInfo n = TwoH100();
  n.gpus[0].mig_enabled = true;
  n.gpus[0].mig_devices = {
      MigDevice{"MIG-0caf1ce3-fcd4-59da-8564-764000e3ace9", "3g.40gb", 2, 0, 40192ULL << 20, {}}};
  const std::string ad = ExportClassAd(n, false);
  EXPECT_NE(ad.find("DetectedGPUs=\"MIG-0caf1ce3-fcd4-59da-8564-764000e3ace9, GPU-aaaaaaaa\""),
            std::string::npos)
      << ad;
  EXPECT_NE(ad.find("MIG_0caf1ce3_fcd4_59da_8564_764000e3ace9=[ id=\"MIG-0caf1ce3-fcd4-59da-"
                    "8564-764000e3ace9\"; DeviceName=\"NVIDIA H100 80GB HBM3 MIG 3g.40gb\"; "
                    "DevicePciBusId=\"0000:18:00.0\"; DeviceUuid=\"MIG-0caf1ce3-fcd4-59da-8564-"
                    "764000e3ace9\"; GlobalMemoryMb=40192; ]"),
            std::string::npos)
      << ad;
  EXPECT_EQ(ad.find("GPU_11111111"), std::string::npos) << ad;
}

TEST(ClassAdExportTest, CollidingShortIdsFallBackToFullIds) {
  NodeInfo n = TwoH100();
  n.gpus[1].uuid = "GPU-11111111-9999-9999-9999-999999999999";
  const std::string ad = ExportClassAd(n, false);
  EXPECT_NE(ad.find("DetectedGPUs=\"GPU-11111111-2222-3333-4444-555555555555, "
                    "GPU-11111111-9999-9999-9999-999999999999\""),
            std::string::npos)
      << ad;
}

TEST(ClassAdExportTest, NoGpusIsZero) {
  EXPECT_EQ(ExportClassAd(NodeInfo{}, false), "DetectedGPUs=0\n");
}

}  // namespace
}  // namespace gpupool::gpu
