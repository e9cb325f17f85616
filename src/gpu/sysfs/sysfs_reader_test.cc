#include "gpu/sysfs/sysfs_reader.h"

#include <gtest/gtest.h>

#include "gpu/sysfs/fake_sysfs_tree.h"
#include "gpu/sysfs/pci_device.h"
#include "gpu/sysfs/pci_ids.h"

namespace gpupool::gpu {
namespace {

using testing::FakeSysfsTree;

TEST(ParseHexUint64Test, AcceptsKernelForms) {
  EXPECT_EQ(ParseHexUint64("0x10de"), 0x10de);
  EXPECT_EQ(ParseHexUint64("030200\n"), 0x030200);
  EXPECT_EQ(ParseHexUint64("6a3a5c0d1f4e2b81"), 0x6a3a5c0d1f4e2b81u);
  EXPECT_EQ(ParseHexUint64(""), std::nullopt);
  EXPECT_EQ(ParseHexUint64("0x"), std::nullopt);
  EXPECT_EQ(ParseHexUint64("zz"), std::nullopt);
  EXPECT_EQ(ParseHexUint64("1ffffffffffffffff"), std::nullopt);  // overflow
}

TEST(SysfsReaderTest, AbsentFilesAreSilentGarbledOnesAreReported) {
  FakeSysfsTree tree;
  tree.Write("a/number", "42\n");
  tree.Write("a/empty", "");
  tree.Write("a/words", "lots of memory\n");
  tree.Write("a/huge", "99999999999999999999999999\n");
  tree.Write("a/negative", "-1\n");
  SysfsReader reader(tree.root() + "/");
  DiagnosticSink sink("test");

  EXPECT_EQ(reader.ReadUint("a/number", &sink), 42u);
  EXPECT_EQ(reader.ReadUint("a/absent", &sink), std::nullopt);
  EXPECT_EQ(sink.size(), 0u);
  EXPECT_EQ(reader.ReadUint("a/empty", &sink), std::nullopt);
  EXPECT_EQ(reader.ReadUint("a/words", &sink), std::nullopt);
  EXPECT_EQ(reader.ReadUint("a/huge", &sink), std::nullopt);
  EXPECT_EQ(reader.ReadUint("a/number", &sink, 10), std::nullopt);  // above max
  EXPECT_EQ(reader.ReadInt("a/negative", &sink, -1, 5), -1);
  EXPECT_EQ(reader.ReadInt("a/negative", &sink, 0, 5), std::nullopt);
  std::vector<Diagnostic> d = sink.Take();
  ASSERT_EQ(d.size(), 5u);
  EXPECT_EQ(d[0].backend, "test");
  EXPECT_NE(d[0].message.find(tree.Path("a/empty")), std::string::npos) << d[0].message;
  EXPECT_NE(d[1].message.find("'lots of memory'"), std::string::npos) << d[1].message;
}

TEST(SysfsReaderTest, KeyValuesAndDirectories) {
  FakeSysfsTree tree;
  tree.Write("p", "simd_count 104\n  gfx_target_version\t90010 \nnovalue\n\n");
  tree.MakeDir("d/b");
  tree.MakeDir("d/a");
  SysfsReader reader(tree.root());
  auto kv = reader.ReadKeyValues("p");
  ASSERT_TRUE(kv.has_value());
  EXPECT_EQ(kv->at("simd_count"), "104");
  EXPECT_EQ(kv->at("gfx_target_version"), "90010");
  EXPECT_EQ(kv->count("novalue"), 0u);
  EXPECT_FALSE(reader.ReadKeyValues("absent").has_value());
  EXPECT_EQ(reader.ListDir("d"), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(reader.ListDir("absent").empty());
}

TEST(DiagnosticSinkTest, KeepsALimitAndSummarisesTheRest) {
  DiagnosticSink sink("rocm-smi", 3);
  for (int i = 0; i < 10; ++i) sink.Add("problem " + std::to_string(i));
  EXPECT_EQ(sink.size(), 10u);
  std::vector<Diagnostic> d = sink.Take();
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[2].message, "problem 2");
  EXPECT_EQ(d[3].message, "7 more problems of the same kind were not listed");
  EXPECT_TRUE(sink.Take().empty());
}

TEST(PciDeviceTest, ParsesBusIdsAndClasses) {
  EXPECT_EQ(ParsePciBusId("0000:3B:00.0"), "0000:3b:00.0");
  EXPECT_EQ(ParsePciBusId("00000000:3b:00.0"), "0000:3b:00.0");
  EXPECT_EQ(ParsePciBusId("card0"), std::nullopt);
  EXPECT_EQ(ParsePciBusId("0000:3b:00"), std::nullopt);
  EXPECT_TRUE(IsDisplayController(0x030000));
  EXPECT_TRUE(IsDisplayController(0x030200));
  EXPECT_TRUE(IsDisplayController(0x038000));
  EXPECT_FALSE(IsDisplayController(0x040300));  // HD audio function of a GPU
  EXPECT_FALSE(IsDisplayController(0x020000));  // network
  EXPECT_EQ(PcieLevelFromNuma(0, 0), PcieLevel::kNode);
  EXPECT_EQ(PcieLevelFromNuma(0, 1), PcieLevel::kSystem);
  EXPECT_EQ(PcieLevelFromNuma(-1, 1), PcieLevel::kUnknown);
}

TEST(PciDeviceTest, ReadsAttributesAndDrmNodes) {
  FakeSysfsTree tree;
  tree.AddPciDevice("0000:c1:00.0", "0x1002", "0x740c", "0x038000", "3", "48-63,112-127");
  tree.AddDrm("0000:c1:00.0", 1, 128);
  SysfsReader reader(tree.root());
  DiagnosticSink sink("test");
  PciDevice d = ReadPciDevice(reader, "bus/pci/devices/0000:c1:00.0", "0000:c1:00.0", &sink);
  EXPECT_EQ(d.vendor_id, 0x1002u);
  EXPECT_EQ(d.device_id, 0x740cu);
  EXPECT_EQ(d.class_code, 0x038000u);
  EXPECT_EQ(d.numa_node, 3);
  EXPECT_EQ(d.cpu_affinity, "48-63,112-127");
  EXPECT_EQ(d.card_node, "/dev/dri/card1");
  EXPECT_EQ(d.render_node, "/dev/dri/renderD128");
  EXPECT_EQ(d.render_minor, 128);
  EXPECT_EQ(sink.size(), 0u);
  EXPECT_EQ(PciBusIdOfDir(reader, "class/drm/card1/device"), "0000:c1:00.0");
}

TEST(PciDeviceTest, BusIdFromUeventWhenTheDirectoryIsNotNamedByIt) {
  FakeSysfsTree tree;
  tree.Write("odd/uevent", "DRIVER=amdgpu\nPCI_SLOT_NAME=0000:03:00.0\n");
  tree.Write("bad/uevent", "DRIVER=amdgpu\n");
  SysfsReader reader(tree.root());
  EXPECT_EQ(PciBusIdOfDir(reader, "odd"), "0000:03:00.0");
  EXPECT_EQ(PciBusIdOfDir(reader, "bad"), std::nullopt);
  EXPECT_EQ(PciBusIdOfDir(reader, "absent"), std::nullopt);
}

TEST(PciIdsTest, LooksUpDevicesOfWantedVendorsOnly) {
  FakeSysfsTree tree;
  tree.Write("pci.ids",
             "# comment\n"
             "10de  NVIDIA Corporation\n"
             "\t2330  GH100 [H100 SXM5 80GB]\n"
             "\t\t10de 16c1  H100 SXM5 80GB\n"
             "\t2331  GH100 [H100 PCIe]\n"
             "1002  Advanced Micro Devices, Inc. [AMD/ATI]\n"
             "\t740c  Aldebaran/MI200 [Instinct MI250X/MI250]\n"
             "C 03  Display controller\n"
             "\t2330  not a device\n");
  auto names = LookupPciDeviceNames({tree.Path("absent.ids"), tree.Path("pci.ids")},
                                    {{0x10de, 0x2330}, {0x1002, 0x740c}, {0x8086, 0x56a0}});
  EXPECT_EQ(names.size(), 2u);
  EXPECT_EQ(names[PciId(0x10de, 0x2330)], "GH100 [H100 SXM5 80GB]");
  EXPECT_EQ(GpuNameFromPciIds(0x10de, 0x2330, names), "NVIDIA GH100 [H100 SXM5 80GB]");
  EXPECT_EQ(GpuNameFromPciIds(0x1002, 0x740c, names),
            "AMD Aldebaran/MI200 [Instinct MI250X/MI250]");
  EXPECT_EQ(GpuNameFromPciIds(0x8086, 0x56a0, names), "Intel GPU [8086:56a0]");
  EXPECT_TRUE(LookupPciDeviceNames({tree.Path("absent.ids")}, {{0x10de, 0x2330}}).empty());
}

}  // namespace
}  // namespace gpupool::gpu
