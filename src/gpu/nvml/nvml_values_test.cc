// Unit tests of the pure conversions in nvml_values.h and the level mapping.
#include "gpu/nvml/nvml_values.h"

#include <gtest/gtest.h>

#include <cstring>

#include "gpu/nvml/nvml_topology.h"

namespace gpupool::gpu::nvml {
namespace {

TEST(NvmlValuesTest, BoundedStringStopsAtCapacityWithoutTerminator) {
  char buf[4] = {'a', 'b', 'c', 'd'};
  EXPECT_EQ(BoundedString(buf, sizeof buf), "abcd");
  char nul[4] = {'a', '\0', 'c', 'd'};
  EXPECT_EQ(BoundedString(nul, sizeof nul), "a");
  const char bad[] = {'N', static_cast<char>(0xff), 'X', '\0'};
  EXPECT_EQ(BoundedString(bad, sizeof bad), "N?X");
}

TEST(NvmlValuesTest, PciBusIdPrefersLongFormThenLegacyThenNumbers) {
  PciInfo info{};
  std::strcpy(info.bus_id, "00000000:3B:00.0");
  std::strcpy(info.bus_id_legacy, "0000:99:00.0");
  EXPECT_EQ(PciBusIdFromInfo(info, false), "0000:3b:00.0");
  EXPECT_EQ(PciBusIdFromInfo(info, true), "0000:99:00.0");  // v1 layout: no long form

  std::strcpy(info.bus_id, "garbage");
  EXPECT_EQ(PciBusIdFromInfo(info, false), "0000:99:00.0");

  std::strcpy(info.bus_id_legacy, "junk");
  info.domain = 1;
  info.bus = 0x41;
  info.device = 3;
  EXPECT_EQ(PciBusIdFromInfo(info, false), "0001:41:03.0");

  info.bus = 0x100;  // out of range
  EXPECT_EQ(PciBusIdFromInfo(info, false), std::nullopt);
  PciInfo zero{};
  EXPECT_EQ(PciBusIdFromInfo(zero, false), std::nullopt);
}

TEST(NvmlValuesTest, IsCanonicalPciBusId) {
  EXPECT_TRUE(IsCanonicalPciBusId("0000:3b:00.0"));
  EXPECT_FALSE(IsCanonicalPciBusId("0000:3B:00.0"));
  EXPECT_FALSE(IsCanonicalPciBusId("00000000:3b:00.0"));
  EXPECT_FALSE(IsCanonicalPciBusId("not a bus id"));
}

TEST(NvmlValuesTest, CpuListFromMask) {
  unsigned long mask[4] = {};
  EXPECT_EQ(CpuListFromMask(mask, 4), "");
  mask[0] = 0xffffff;  // 0-23
  EXPECT_EQ(CpuListFromMask(mask, 4), "0-23");
  mask[0] |= 1ul << 30;  // a lone CPU
  mask[1] = ~0ul;        // 64-127, across the word boundary into the next
  mask[2] = 1ul;         // 128
  EXPECT_EQ(CpuListFromMask(mask, 4), "0-23,30,64-128");
  unsigned long last[1] = {1ul << 63};
  EXPECT_EQ(CpuListFromMask(last, 1), "63");
}

TEST(NvmlValuesTest, IsCpuList) {
  EXPECT_TRUE(IsCpuList("0-23,48-71"));
  EXPECT_TRUE(IsCpuList("5"));
  EXPECT_FALSE(IsCpuList(""));
  EXPECT_FALSE(IsCpuList("3-1"));
  EXPECT_FALSE(IsCpuList("a-b"));
  EXPECT_FALSE(IsCpuList("1,,2"));
}

TEST(NvmlValuesTest, CudaVersionString) {
  EXPECT_EQ(CudaVersionString(12040), "12.4");
  EXPECT_EQ(CudaVersionString(13000), "13.0");
  EXPECT_EQ(CudaVersionString(11080), "11.8");
  EXPECT_EQ(CudaVersionString(0), "");
  EXPECT_EQ(CudaVersionString(-1), "");
}

TEST(NvmlValuesTest, MigProfileFromName) {
  EXPECT_EQ(MigProfileFromName("NVIDIA A100-SXM4-80GB MIG 1g.10gb"), "1g.10gb");
  EXPECT_EQ(MigProfileFromName("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me"), "1g.10gb+me");
  EXPECT_EQ(MigProfileFromName("NVIDIA A100-SXM4-80GB"), "");
}

TEST(NvmlValuesTest, PcieLevelFromNvmlCoversEveryDefinedLevel) {
  EXPECT_EQ(PcieLevelFromNvml(0), PcieLevel::kSameBoard);
  EXPECT_EQ(PcieLevelFromNvml(10), PcieLevel::kSingle);
  EXPECT_EQ(PcieLevelFromNvml(20), PcieLevel::kMultiple);
  EXPECT_EQ(PcieLevelFromNvml(30), PcieLevel::kHostBridge);
  EXPECT_EQ(PcieLevelFromNvml(40), PcieLevel::kNode);
  EXPECT_EQ(PcieLevelFromNvml(50), PcieLevel::kSystem);
  EXPECT_EQ(PcieLevelFromNvml(35), PcieLevel::kUnknown);
  EXPECT_EQ(PcieLevelFromNvml(-1), PcieLevel::kUnknown);
}

}  // namespace
}  // namespace gpupool::gpu::nvml
