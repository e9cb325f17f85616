#include "gpu/gpu_info.h"

#include <gtest/gtest.h>

namespace gpupool::gpu {
namespace {

TEST(GpuInfoTest, CanonicalPciBusId) {
  EXPECT_EQ(CanonicalPciBusId("00000000:3B:00.0"), "0000:3b:00.0");
  EXPECT_EQ(CanonicalPciBusId("0000:c1:00.0"), "0000:c1:00.0");
  EXPECT_EQ(CanonicalPciBusId("3b:00.1"), "0000:3b:00.1");
  EXPECT_EQ(CanonicalPciBusId("not a bus"), "not a bus");
  EXPECT_EQ(CanonicalPciBusId("0000:3b:00.0junk"), "0000:3b:00.0junk");
}

TEST(GpuInfoTest, NamesRoundTrip) {
  for (Vendor v : {Vendor::kNvidia, Vendor::kAmd, Vendor::kIntel, Vendor::kUnknown}) {
    EXPECT_EQ(ParseVendor(VendorName(v)), v);
  }
  EXPECT_EQ(ParseVendor("NVIDIA"), Vendor::kNvidia);
  EXPECT_EQ(ParseVendor("matrox"), std::nullopt);
  EXPECT_EQ(ParsePcieLevel(PcieLevelName(PcieLevel::kHostBridge)), PcieLevel::kHostBridge);
  EXPECT_EQ(ParsePcieLevel("nope"), std::nullopt);
}

}  // namespace
}  // namespace gpupool::gpu
