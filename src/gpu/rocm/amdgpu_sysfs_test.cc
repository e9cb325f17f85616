// The ROCm backend's sysfs/KFD fallback, driven through the real backend with a library
// path that does not exist.
#include "gpu/rocm/amdgpu_sysfs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "common/strings.h"
#include "gpu/rocm/amd_test_node.h"
#include "gpu/rocm/rocm_smi_backend.h"

namespace gpupool::gpu {
namespace {

using testing::AddAmdGpu;
using testing::AddKfdCpuNode;
using testing::FakeSysfsTree;

constexpr char kMissingLibrary[] = "/nonexistent/librocm_smi64.so";

// What the backend reads for the ROCm version without a library beside a ROCm install.
std::string HostRocmVersion() {
  std::ifstream in("/opt/rocm/.info/version");
  std::stringstream s;
  s << in.rdbuf();
  return std::string(Trim(s.str()));
}

bool HasDiagnosticContaining(const NodeInfo& node, std::string_view text) {
  return std::any_of(node.diagnostics.begin(), node.diagnostics.end(), [&](const Diagnostic& d) {
    return d.message.find(text) != std::string::npos;
  });
}

// Two MI210-like GPUs on two sockets, linked by XGMI, plus an NVIDIA card in class/drm.
void BuildTwoGpuNode(const FakeSysfsTree& tree) {
  AddKfdCpuNode(tree, 0);
  AddKfdCpuNode(tree, 3);
  AddAmdGpu(tree, "0000:83:00.0", 2, 129, 1, "32-63", 2, 90400);
  AddAmdGpu(tree, "0000:03:00.0", 1, 128, 0, "0-31", 1, 90010);
  const std::string d0 = FakeSysfsTree::DeviceDir("0000:03:00.0");
  const std::string d1 = FakeSysfsTree::DeviceDir("0000:83:00.0");
  tree.Write(d0 + "/product_name", "AMD Instinct MI210\n");
  tree.Write(d0 + "/mem_info_vram_total", "68702699520\n");
  tree.Write(d0 + "/mem_info_vram_used", "11124736\n");
  tree.Write(d0 + "/gpu_busy_percent", "37\n");
  tree.Write(d0 + "/unique_id", "6a3a5c0d1f4e2b81\n");
  tree.Write(d0 + "/hwmon/hwmon3/temp1_input", "41000\n");
  tree.Write(d0 + "/hwmon/hwmon3/power1_average", "42000000\n");
  tree.Write(d1 + "/mem_info_vram_total", "68702699520\n");
  tree.Write(d1 + "/mem_info_vram_used", "0\n");
  tree.Write(d1 + "/gpu_busy_percent", "0\n");
  tree.AddKfdIoLink(1, 0, 2, 0);   // PCIe to the CPU
  tree.AddKfdIoLink(1, 1, 11, 2);  // XGMI to the other GPU
  tree.AddKfdIoLink(2, 0, 2, 3);
  tree.AddKfdIoLink(2, 1, 11, 1);
  tree.AddPciDevice("0000:41:00.0", "0x10de", "0x2330", "0x030200", "0", "0-31");
  tree.AddDrm("0000:41:00.0", 0, 130);
  tree.MakeDir("class/drm/card1-DP-1");  // a connector, not a card
  tree.Write("class/drm/version", "drm 1.1.0 20060810\n");
  tree.Write("module/amdgpu/version", "6.3.6\n");
  tree.Write("dev/kfd", "");
}

DiscoveryOptions FallbackOptions(const FakeSysfsTree& tree) {
  DiscoveryOptions o;
  o.rocm_smi_library = kMissingLibrary;
  o.sysfs_root = tree.root();
  o.dev_root = tree.Path("dev");
  return o;
}

TEST(AmdSysfsFallbackTest, ListsGpusWithEveryFieldSysfsHas) {
  FakeSysfsTree tree;
  BuildTwoGpuNode(tree);
  tree.Write("pci.ids", "1002  Advanced Micro Devices, Inc. [AMD/ATI]\n\t740c  Aldebaran/MI200\n");
  auto backend = NewRocmSmiBackendWithPciIds(FallbackOptions(tree), {tree.Path("pci.ids")});
  Result<NodeInfo> node = backend->Discover();
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  ASSERT_EQ(node->gpus.size(), 2u);

  const GpuInfo& a = node->gpus[0];
  EXPECT_EQ(a.vendor, Vendor::kAmd);
  EXPECT_EQ(a.backend, "rocm-smi");
  EXPECT_EQ(a.index, 0);
  EXPECT_EQ(a.name, "AMD Instinct MI210");
  EXPECT_EQ(a.uuid, "0x6a3a5c0d1f4e2b81");
  EXPECT_EQ(a.pci_bus_id, "0000:03:00.0");
  EXPECT_EQ(a.memory_total_bytes, 68702699520u);
  EXPECT_EQ(a.memory_used_bytes, 11124736u);
  EXPECT_EQ(a.utilization_percent, 37);
  EXPECT_EQ(a.gfx_target, "gfx90a");
  EXPECT_EQ(a.minor_number, 128);
  EXPECT_EQ(a.device_nodes, (std::vector<std::string>{"/dev/dri/renderD128", "/dev/dri/card1"}));
  EXPECT_EQ(a.numa_node, 0);
  EXPECT_EQ(a.cpu_affinity, "0-31");
  EXPECT_EQ(a.temperature_celsius, 41);
  EXPECT_EQ(a.power_watts, 42.0);
  EXPECT_FALSE(a.compute_capability.has_value());

  const GpuInfo& b = node->gpus[1];
  EXPECT_EQ(b.index, 1);
  EXPECT_EQ(b.name, "AMD Aldebaran/MI200");  // no product_name: pci.ids
  EXPECT_EQ(b.uuid, "0x00000000000003ea");   // KFD unique_id 1002, as no sysfs unique_id
  EXPECT_EQ(b.pci_bus_id, "0000:83:00.0");
  EXPECT_EQ(b.gfx_target, "gfx940");
  EXPECT_EQ(b.minor_number, 129);
  EXPECT_EQ(b.device_nodes, (std::vector<std::string>{"/dev/dri/renderD129", "/dev/dri/card2"}));
  EXPECT_EQ(b.numa_node, 1);
  EXPECT_EQ(b.utilization_percent, 0);
  EXPECT_FALSE(b.temperature_celsius.has_value());

  ASSERT_EQ(node->links.size(), 1u);
  EXPECT_EQ(node->links[0].a, "0000:03:00.0");
  EXPECT_EQ(node->links[0].b, "0000:83:00.0");
  EXPECT_EQ(node->links[0].xgmi_count, 1);
  EXPECT_EQ(node->links[0].pcie_level, PcieLevel::kSystem);

  ASSERT_TRUE(node->amd.has_value());
  EXPECT_EQ(node->amd->version, "6.3.6");
  EXPECT_EQ(node->amd->runtime_version, HostRocmVersion());
  EXPECT_EQ(node->amd->control_nodes, (std::vector<std::string>{"/dev/kfd"}));
  EXPECT_TRUE(node->amd->libraries.empty());
  EXPECT_FALSE(node->nvidia.has_value());

  ASSERT_EQ(node->diagnostics.size(), 1u);
  EXPECT_EQ(node->diagnostics[0].backend, "rocm-smi");
  EXPECT_NE(node->diagnostics[0].message.find(kMissingLibrary), std::string::npos);
  EXPECT_NE(node->diagnostics[0].message.find("could not be loaded"), std::string::npos);
  EXPECT_NE(node->diagnostics[0].message.find("sysfs files and KFD topology instead"),
            std::string::npos);
  EXPECT_NE(node->diagnostics[0].message.find("install ROCm SMI (Debian: librocm-smi64-1)"),
            std::string::npos);
}

TEST(AmdSysfsFallbackTest, NoKfdNoControlNode) {
  FakeSysfsTree tree;
  tree.AddPciDevice("0000:03:00.0", "0x1002", "0x73bf", "0x030000", "-1", "");
  tree.AddDrm("0000:03:00.0", 0, -1);
  Result<NodeInfo> node = NewRocmSmiBackendWithPciIds(FallbackOptions(tree), {})->Discover();
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  ASSERT_EQ(node->gpus.size(), 1u);
  EXPECT_EQ(node->gpus[0].name, "AMD GPU [1002:73bf]");
  EXPECT_EQ(node->gpus[0].gfx_target, "");
  EXPECT_EQ(node->gpus[0].minor_number, -1);
  EXPECT_EQ(node->gpus[0].device_nodes, (std::vector<std::string>{"/dev/dri/card0"}));
  EXPECT_TRUE(node->links.empty());
  ASSERT_TRUE(node->amd.has_value());
  EXPECT_TRUE(node->amd->control_nodes.empty());
  EXPECT_EQ(node->amd->version, "");
}

TEST(AmdSysfsFallbackTest, NoLibraryAndNoGpuIsUnavailable) {
  FakeSysfsTree tree;
  tree.AddPciDevice("0000:41:00.0", "0x10de", "0x2330", "0x030200", "0", "0-31");
  tree.AddDrm("0000:41:00.0", 0, 128);
  Result<NodeInfo> node = NewRocmSmiBackendWithPciIds(FallbackOptions(tree), {})->Discover();
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(node.status().message().find(kMissingLibrary), std::string::npos);
  EXPECT_NE(node.status().message().find("no AMD GPU found in " + tree.Path("class/drm")),
            std::string::npos)
      << node.status().message();
}

TEST(AmdSysfsFallbackTest, GarbledFilesGiveDiagnosticsNotCrashes) {
  FakeSysfsTree tree;
  AddKfdCpuNode(tree, 0);
  AddAmdGpu(tree, "0000:03:00.0", 1, 128, 0, "0-31", 1, 90010);
  const std::string d = FakeSysfsTree::DeviceDir("0000:03:00.0");
  tree.Write(d + "/mem_info_vram_total", "lots\n");
  tree.Write(d + "/mem_info_vram_used", "99999999999999999999999\n");
  tree.Write(d + "/gpu_busy_percent", "\n");
  tree.Write(d + "/unique_id", "zz-top\n");
  tree.Write(d + "/numa_node", "12345678901\n");
  tree.Write(d + "/product_name", std::string("MI\xff\xfe 210", 8));
  tree.Write(d + "/hwmon/hwmon0/temp1_input", "-999999999\n");
  tree.Write(FakeSysfsTree::KfdNodeDir(1) + "/io_links/0/properties", "type 11\nnode_to 77\n");
  Result<NodeInfo> node = NewRocmSmiBackendWithPciIds(FallbackOptions(tree), {})->Discover();
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  ASSERT_EQ(node->gpus.size(), 1u);
  const GpuInfo& g = node->gpus[0];
  EXPECT_EQ(g.name, "MI?? 210");
  EXPECT_EQ(g.memory_total_bytes, 0u);
  EXPECT_EQ(g.memory_used_bytes, 0u);
  EXPECT_FALSE(g.utilization_percent.has_value());
  EXPECT_EQ(g.uuid, "0x00000000000003e9");  // falls back to KFD's unique_id
  EXPECT_EQ(g.numa_node, -1);
  EXPECT_FALSE(g.temperature_celsius.has_value());
  EXPECT_EQ(g.gfx_target, "gfx90a");
  EXPECT_TRUE(node->links.empty());  // the XGMI link points at no GPU
  EXPECT_TRUE(HasDiagnosticContaining(*node, "mem_info_vram_total: 'lots' is not a number"));
  EXPECT_TRUE(HasDiagnosticContaining(*node, "mem_info_vram_used"));
  EXPECT_TRUE(HasDiagnosticContaining(*node, "gpu_busy_percent: '' is not a number"));
  EXPECT_TRUE(HasDiagnosticContaining(*node, "unique_id: 'zz-top'"));
  EXPECT_TRUE(HasDiagnosticContaining(*node, "numa_node"));
  EXPECT_TRUE(HasDiagnosticContaining(*node, "temp1_input"));
}

TEST(AmdSysfsFallbackTest, UsedAboveTotalIsReported) {
  FakeSysfsTree tree;
  AddAmdGpu(tree, "0000:03:00.0", 1, 128, 0, "0-31", 1, 90010);
  const std::string d = FakeSysfsTree::DeviceDir("0000:03:00.0");
  tree.Write(d + "/mem_info_vram_total", "1000\n");
  tree.Write(d + "/mem_info_vram_used", "2000\n");
  Result<NodeInfo> node = NewRocmSmiBackendWithPciIds(FallbackOptions(tree), {})->Discover();
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  EXPECT_EQ(node->gpus[0].memory_total_bytes, 1000u);
  EXPECT_EQ(node->gpus[0].memory_used_bytes, 0u);
  EXPECT_TRUE(HasDiagnosticContaining(*node, "exceeds mem_info_vram_total"));
}

TEST(AmdSysfsLinksTest, XgmiCountsNeedOnlyOneDirection) {
  FakeSysfsTree tree;
  AddAmdGpu(tree, "0000:03:00.0", 1, 128, 0, "0-31", 1, 90010);
  AddAmdGpu(tree, "0000:04:00.0", 2, 129, 0, "0-31", 2, 90010);
  AddAmdGpu(tree, "0000:05:00.0", 3, 130, -1, "", 3, 90010);
  tree.AddKfdIoLink(2, 0, 11, 1);  // listed by node 2 only
  SysfsReader reader(tree.root());
  DiagnosticSink sink("rocm-smi");
  const auto kfd = rocm::ReadKfdTopology(reader, &sink);
  const auto counts = rocm::XgmiCountsFromKfd(kfd);
  ASSERT_EQ(counts.size(), 1u);
  EXPECT_EQ(counts.begin()->first,
            std::make_pair(std::string("0000:03:00.0"), std::string("0000:04:00.0")));
  const auto gpus = rocm::ReadAmdGpusFromSysfs(reader, kfd, {}, &sink);
  ASSERT_EQ(gpus.size(), 3u);
  const auto links = rocm::BuildAmdLinks(gpus, counts);
  // 03<->04: XGMI, same NUMA node; pairs with 05 have no NUMA node and no XGMI.
  ASSERT_EQ(links.size(), 1u);
  EXPECT_EQ(links[0].xgmi_count, 1);
  EXPECT_EQ(links[0].pcie_level, PcieLevel::kNode);
}

// An MI300X in CPX/NPS4 (docs/sharing.md, "AMD"): the physical GPU 0000:0c:00.0 holds
// the mode files; its partitions are KFD nodes of 38 CUs each (152 SIMDs, 4 per CU), the
// second one's location carrying its number in the function bits (gfx 9.4.3 kernels).
void BuildCpxGpu(const FakeSysfsTree& tree, const std::string& compute, const std::string& memory) {
  tree.AddPciDevice("0000:0c:00.0", "0x1002", "0x74a1", "0x120000", "0", "0-47");
  tree.AddDrm("0000:0c:00.0", 1, 128);
  const std::string dir = FakeSysfsTree::DeviceDir("0000:0c:00.0");
  if (!compute.empty()) tree.Write(dir + "/current_compute_partition", compute + "\n");
  tree.Write(dir + "/available_compute_partition", "SPX, DPX, QPX, CPX\n");
  if (!memory.empty()) tree.Write(dir + "/current_memory_partition", memory + "\n");
  for (int p = 0; p < 2; ++p) {
    tree.AddKfdNode(2 + p,
                    "cpu_cores_count 0\nsimd_count 152\nsimd_per_cu 4\n"
                    "gfx_target_version 90402\nlocation_id " +
                        std::to_string((0x0c << 8) | p) + "\ndomain 0\ndrm_render_minor " +
                        std::to_string(128 + p) + "\nunique_id " + std::to_string(1001 + p) + "\n");
  }
}

GpuInfo PartitionOf(const FakeSysfsTree& tree, const std::string& bus, DiagnosticSink* sink) {
  SysfsReader reader(tree.root());
  const auto kfd = rocm::ReadKfdTopology(reader, sink);
  GpuInfo g;
  g.vendor = Vendor::kAmd;
  g.pci_bus_id = bus;
  rocm::AddPartitionDetails(reader, kfd, &g, sink);
  return g;
}

TEST(AmdPartitionTest, ReadsTheModesTheAdminSetAndEachPartitionsCus) {
  FakeSysfsTree tree;
  BuildCpxGpu(tree, "CPX", "NPS4");
  DiagnosticSink sink("rocm-smi");
  for (const std::string bus : {"0000:0c:00.0", "0000:0c:00.1"}) {
    SCOPED_TRACE(bus);
    GpuInfo g = PartitionOf(tree, bus, &sink);
    EXPECT_EQ(g.compute_partition, "CPX");
    EXPECT_EQ(g.memory_partition, "NPS4");
    EXPECT_EQ(g.compute_units, 38);
  }
  EXPECT_TRUE(sink.Take().empty());
}

TEST(AmdPartitionTest, MissingFilesAreUnknownWithoutComplaint) {
  FakeSysfsTree tree;
  BuildCpxGpu(tree, "", "");
  DiagnosticSink sink("rocm-smi");
  GpuInfo g = PartitionOf(tree, "0000:0c:00.0", &sink);
  EXPECT_EQ(g.compute_partition, "");
  EXPECT_EQ(g.memory_partition, "");
  EXPECT_EQ(g.compute_units, 38);
  // A GPU that is neither in sysfs nor in KFD: nothing known, nothing said.
  GpuInfo none = PartitionOf(tree, "0000:99:00.0", &sink);
  EXPECT_EQ(none.compute_partition, "");
  EXPECT_EQ(none.compute_units, 0);
  EXPECT_TRUE(sink.Take().empty());
}

TEST(AmdPartitionTest, UnknownContentIsNamedAndLeftOut) {
  FakeSysfsTree tree;
  BuildCpxGpu(tree, "HEXA", "NPS3");
  DiagnosticSink sink("rocm-smi");
  GpuInfo g = PartitionOf(tree, "0000:0c:00.0", &sink);
  EXPECT_EQ(g.compute_partition, "");
  EXPECT_EQ(g.memory_partition, "");
  std::vector<Diagnostic> d = sink.Take();
  ASSERT_EQ(d.size(), 2u);
  EXPECT_NE(d[0].message.find("current_compute_partition: 'HEXA'"), std::string::npos)
      << d[0].message;
  EXPECT_NE(d[1].message.find("current_memory_partition: 'NPS3'"), std::string::npos)
      << d[1].message;
}

// The fallback lists the physical GPU with its partitioning (partitions other than the
// first are platform devices without a PCI vendor file: only ROCm SMI lists them).
TEST(AmdPartitionTest, FallbackDiscoveryReportsThePartitioning) {
  FakeSysfsTree tree;
  AddKfdCpuNode(tree, 0);
  BuildCpxGpu(tree, "CPX", "NPS4");
  auto backend = NewRocmSmiBackendWithPciIds(FallbackOptions(tree), {});
  Result<NodeInfo> node = backend->Discover();
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  ASSERT_EQ(node->gpus.size(), 1u);
  EXPECT_EQ(node->gpus[0].compute_partition, "CPX");
  EXPECT_EQ(node->gpus[0].memory_partition, "NPS4");
  EXPECT_EQ(node->gpus[0].compute_units, 38);
}

}  // namespace
}  // namespace gpupool::gpu
