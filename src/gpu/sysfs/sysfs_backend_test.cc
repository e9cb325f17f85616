#include "gpu/sysfs/sysfs_backend.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "gpu/sysfs/fake_sysfs_tree.h"

namespace gpupool::gpu {
namespace {

using testing::FakeSysfsTree;

constexpr char kMissingNvml[] = "/nonexistent/libnvidia-ml.so.1";
constexpr char kMissingRocm[] = "/nonexistent/librocm_smi64.so";

// An NVIDIA H100 pair, an AMD MI250X, an Intel Arc, plus devices that are not GPUs.
void BuildMixedNode(const FakeSysfsTree& tree) {
  tree.AddPciDevice("0000:86:00.0", "0x10de", "0x2330", "0x030200", "1", "24-47");
  tree.AddPciDevice("0000:3b:00.0", "0x10de", "0x2330", "0x030200", "0", "0-23");
  tree.AddPciDevice("0000:3b:00.1", "0x10de", "0x22a3", "0x040300", "0", "0-23");  // audio
  tree.AddPciDevice("0000:c1:00.0", "0x1002", "0x740c", "0x038000", "3", "48-63");
  tree.AddDrm("0000:c1:00.0", 1, 129);
  tree.AddPciDevice("0000:00:02.0", "0x8086", "0x56a0", "0x030000", "-1", "");
  tree.AddDrm("0000:00:02.0", 0, 128);
  tree.AddPciDevice("0000:5e:00.0", "0x15b3", "0x1021", "0x020000", "0", "0-23");  // NIC
  tree.AddPciDevice("0000:07:00.0", "0x1a03", "0x2000", "0x030000", "0", "0-23");  // BMC VGA
}

DiscoveryOptions OptionsFor(const FakeSysfsTree& tree) {
  DiscoveryOptions o;
  o.sysfs_root = tree.root();
  o.nvml_library = kMissingNvml;
  o.rocm_smi_library = kMissingRocm;
  return o;
}

bool HasDiagnosticContaining(const NodeInfo& node, std::string_view text) {
  return std::any_of(node.diagnostics.begin(), node.diagnostics.end(), [&](const Diagnostic& d) {
    return d.message.find(text) != std::string::npos;
  });
}

TEST(SysfsBackendTest, ListsGpusOfKnownVendorsInBusOrder) {
  FakeSysfsTree tree;
  BuildMixedNode(tree);
  tree.Write("pci.ids", "10de  NVIDIA Corporation\n\t2330  GH100 [H100 SXM5 80GB]\n");
  auto backend = NewSysfsBackendWithPciIds(OptionsFor(tree), {tree.Path("pci.ids")});
  EXPECT_EQ(backend->name(), "sysfs");
  Result<NodeInfo> node = backend->Discover();
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  ASSERT_EQ(node->gpus.size(), 4u);

  // Bus-id order: 0000:00:02.0, 0000:3b:00.0, 0000:86:00.0, 0000:c1:00.0.
  const GpuInfo& intel = node->gpus[0];
  EXPECT_EQ(intel.vendor, Vendor::kIntel);
  EXPECT_EQ(intel.index, 0);
  EXPECT_EQ(intel.pci_bus_id, "0000:00:02.0");
  EXPECT_EQ(intel.name, "Intel GPU [8086:56a0]");
  EXPECT_EQ(intel.numa_node, -1);
  EXPECT_EQ(intel.cpu_affinity, "");
  EXPECT_EQ(intel.minor_number, 128);
  EXPECT_EQ(intel.device_nodes,
            (std::vector<std::string>{"/dev/dri/renderD128", "/dev/dri/card0"}));
  EXPECT_EQ(intel.backend, "sysfs");

  const GpuInfo& nv0 = node->gpus[1];
  EXPECT_EQ(nv0.vendor, Vendor::kNvidia);
  EXPECT_EQ(nv0.index, 0);
  EXPECT_EQ(nv0.pci_bus_id, "0000:3b:00.0");
  EXPECT_EQ(nv0.name, "NVIDIA GH100 [H100 SXM5 80GB]");
  EXPECT_EQ(nv0.numa_node, 0);
  EXPECT_EQ(nv0.cpu_affinity, "0-23");
  EXPECT_EQ(nv0.minor_number, -1);
  EXPECT_TRUE(nv0.device_nodes.empty());
  EXPECT_EQ(nv0.uuid, "");
  EXPECT_EQ(nv0.memory_total_bytes, 0u);

  const GpuInfo& nv1 = node->gpus[2];
  EXPECT_EQ(nv1.index, 1);
  EXPECT_EQ(nv1.pci_bus_id, "0000:86:00.0");
  EXPECT_EQ(nv1.numa_node, 1);

  const GpuInfo& amd = node->gpus[3];
  EXPECT_EQ(amd.vendor, Vendor::kAmd);
  EXPECT_EQ(amd.index, 0);
  EXPECT_EQ(amd.name, "AMD GPU [1002:740c]");
  EXPECT_EQ(amd.numa_node, 3);
  EXPECT_EQ(amd.minor_number, 129);
  EXPECT_EQ(amd.device_nodes, (std::vector<std::string>{"/dev/dri/renderD129", "/dev/dri/card1"}));

  // Only the NVIDIA pair is a same-vendor pair with known NUMA nodes.
  ASSERT_EQ(node->links.size(), 1u);
  EXPECT_EQ(node->links[0].a, "0000:3b:00.0");
  EXPECT_EQ(node->links[0].b, "0000:86:00.0");
  EXPECT_EQ(node->links[0].pcie_level, PcieLevel::kSystem);
  EXPECT_EQ(node->links[0].nvlink_count, 0);
}

TEST(SysfsBackendTest, SaysWhichLibraryIsMissingPerVendor) {
  FakeSysfsTree tree;
  BuildMixedNode(tree);
  Result<NodeInfo> node = NewSysfsBackendWithPciIds(OptionsFor(tree), {})->Discover();
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  ASSERT_EQ(node->diagnostics.size(), 2u);
  EXPECT_EQ(node->diagnostics[0].backend, "sysfs");
  EXPECT_EQ(node->diagnostics[0].message,
            "found 2 NVIDIA GPUs but /nonexistent/libnvidia-ml.so.1 could not be loaded: install "
            "the NVIDIA driver (Debian: nvidia-driver / libnvidia-ml1)");
  EXPECT_EQ(node->diagnostics[1].message,
            "found 1 AMD GPU but /nonexistent/librocm_smi64.so could not be loaded: install ROCm "
            "SMI (Debian: librocm-smi64-1)");
  EXPECT_TRUE(IsMissingLibraryDiagnostic(node->diagnostics[0], Vendor::kNvidia));
  EXPECT_FALSE(IsMissingLibraryDiagnostic(node->diagnostics[0], Vendor::kAmd));
  EXPECT_TRUE(IsMissingLibraryDiagnostic(node->diagnostics[1], Vendor::kAmd));
  EXPECT_FALSE(
      IsMissingLibraryDiagnostic({"rocm-smi", node->diagnostics[1].message}, Vendor::kAmd));
}

TEST(SysfsBackendTest, NoDiagnosticWhenTheLibraryLoads) {
  FakeSysfsTree tree;
  BuildMixedNode(tree);
  DiscoveryOptions o = OptionsFor(tree);
  o.rocm_smi_library = GPUPOOL_FAKE_ROCM_SMI;  // loadable: the AMD GPU needs no note
  Result<NodeInfo> node = NewSysfsBackendWithPciIds(o, {})->Discover();
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  EXPECT_TRUE(HasDiagnosticContaining(*node, "NVIDIA"));
  EXPECT_FALSE(HasDiagnosticContaining(*node, "AMD"));
}

TEST(SysfsBackendTest, GarbledFilesBecomeDiagnostics) {
  FakeSysfsTree tree;
  tree.AddPciDevice("0000:3b:00.0", "0x10de", "0x2330", "0x030200", "not-a-node", "0-3,x");
  tree.AddPciDevice("0000:3c:00.0", "0x10de", "0x2330", "0x030200", "99999999999999999999", "");
  tree.AddPciDevice("0000:3d:00.0", "0x10de", "", "0x030200", "", "");         // empty device id
  tree.AddPciDevice("0000:3e:00.0", "garbage", "0x2330", "0x030200", "", "");  // skipped
  tree.AddPciDevice("0000:3f:00.0", "0x10de", "0x2330", "", "", "");           // skipped
  tree.Write("devices/pci0000:00/0000:3b:00.0/drm/renderDx/.keep", "");
  Result<NodeInfo> node = NewSysfsBackendWithPciIds(OptionsFor(tree), {})->Discover();
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  ASSERT_EQ(node->gpus.size(), 3u);
  EXPECT_EQ(node->gpus[0].numa_node, -1);
  EXPECT_EQ(node->gpus[0].cpu_affinity, "");
  EXPECT_TRUE(node->gpus[0].device_nodes.empty());
  EXPECT_EQ(node->gpus[1].numa_node, -1);
  EXPECT_EQ(node->gpus[2].name, "NVIDIA GPU [10de:0000]");
  EXPECT_TRUE(HasDiagnosticContaining(*node, "'not-a-node' is not a number"));
  EXPECT_TRUE(HasDiagnosticContaining(*node, "'0-3,x' is not a CPU list"));
  EXPECT_TRUE(HasDiagnosticContaining(*node, "0000:3c:00.0/numa_node"));
  EXPECT_TRUE(HasDiagnosticContaining(*node, "0000:3d:00.0/device"));
}

TEST(SysfsBackendTest, NoPciDirectoryIsUnavailable) {
  FakeSysfsTree tree;
  Result<NodeInfo> node = NewSysfsBackendWithPciIds(OptionsFor(tree), {})->Discover();
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(node.status().message().find(tree.Path("bus/pci/devices")), std::string::npos);
}

TEST(SysfsBackendTest, NodeWithoutGpusIsEmptyAndQuiet) {
  FakeSysfsTree tree;
  tree.AddPciDevice("0000:5e:00.0", "0x15b3", "0x1021", "0x020000", "0", "0-23");
  Result<NodeInfo> node = NewSysfsBackendWithPciIds(OptionsFor(tree), {})->Discover();
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  EXPECT_TRUE(node->gpus.empty());
  EXPECT_TRUE(node->diagnostics.empty());
}

}  // namespace
}  // namespace gpupool::gpu
