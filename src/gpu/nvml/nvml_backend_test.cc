// The NVML backend against healthy fake nodes: every field it reports, the driver
// libraries and nodes for CDI, and the topology. Failure paths: nvml_failure_test.cc.
#include <gtest/gtest.h>

#include <iostream>

#include "gpu/nvml/nvml_driver.h"
#include "gpu/nvml/nvml_test_fixture.h"

namespace gpupool::gpu {
namespace {

const std::vector<std::string> kH100Buses = {"0000:1b:00.0", "0000:43:00.0", "0000:52:00.0",
                                             "0000:61:00.0", "0000:9d:00.0", "0000:c3:00.0",
                                             "0000:d1:00.0", "0000:df:00.0"};

std::vector<std::string> FakeDriverLibraries(const std::string& dir, const std::string& version) {
  std::vector<std::string> out;
  for (const char* lib :
       {"libcuda", "libcudadebugger", "libnvidia-allocator", "libnvidia-cfg", "libnvidia-ml",
        "libnvidia-nvvm", "libnvidia-opencl", "libnvidia-ptxjitcompiler"}) {
    out.push_back(dir + "/" + lib + ".so." + version);
  }
  return out;  // already in sorted order
}

const GpuLink* FindLink(const NodeInfo& node, const std::string& a, const std::string& b) {
  for (const GpuLink& l : node.links) {
    if ((l.a == a && l.b == b) || (l.a == b && l.b == a)) return &l;
  }
  return nullptr;
}

TEST_F(NvmlBackendTest, HgxH100ReportsEveryField) {
  WriteFile("dev/nvidiactl", "");
  WriteFile("dev/nvidia-uvm", "");
  auto found = Run("h100_hgx_8gpu.json");
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  const NodeInfo& node = *found;
  EXPECT_TRUE(node.diagnostics.empty()) << AllDiagnostics(node);
  EXPECT_FALSE(node.hostname.empty());

  ASSERT_TRUE(node.nvidia.has_value());
  EXPECT_EQ(node.nvidia->version, "550.54.15");
  EXPECT_EQ(node.nvidia->runtime_version, "12.4");
  EXPECT_EQ(node.nvidia->libraries, FakeDriverLibraries(FakeDir(), "550.54.15"));
  // Reported as container paths, though they exist only under our dev_root.
  EXPECT_EQ(node.nvidia->control_nodes,
            (std::vector<std::string>{"/dev/nvidiactl", "/dev/nvidia-uvm"}));
  EXPECT_FALSE(node.amd.has_value());

  ASSERT_EQ(node.gpus.size(), 8u);
  GpuInfo want;
  want.vendor = Vendor::kNvidia;
  want.index = 0;
  want.name = "NVIDIA H100 80GB HBM3";
  want.uuid = "GPU-5e1ec7ed-1b2c-3d4e-5f60-7182930a4b00";
  want.pci_bus_id = "0000:1b:00.0";
  want.memory_total_bytes = 85520809984;
  want.memory_used_bytes = 565444608;
  want.compute_capability = ComputeCapability{9, 0};
  want.minor_number = 0;
  want.device_nodes = {"/dev/nvidia0"};
  want.numa_node = 0;
  want.cpu_affinity = "0-55,112-167";
  want.mig_enabled = false;
  want.ecc_enabled = true;
  want.utilization_percent = 0;
  want.temperature_celsius = 30;
  want.power_watts = 70.0;
  want.power_limit_watts = 700.0;
  want.backend = "nvml";
  EXPECT_EQ(node.gpus[0], want);

  for (int i = 0; i < 8; ++i) {
    const GpuInfo& g = node.gpus[i];
    SCOPED_TRACE("GPU " + std::to_string(i));
    EXPECT_EQ(g.index, i);
    EXPECT_EQ(g.pci_bus_id, kH100Buses[i]);
    EXPECT_EQ(g.minor_number, i);
    EXPECT_EQ(g.device_nodes, std::vector<std::string>{"/dev/nvidia" + std::to_string(i)});
    EXPECT_EQ(g.numa_node, i < 4 ? 0 : 1);
    EXPECT_EQ(g.cpu_affinity, i < 4 ? "0-55,112-167" : "56-111,168-223");
    EXPECT_EQ(g.memory_used_bytes, 565444608u + static_cast<uint64_t>(i) * 1048576u);
    EXPECT_EQ(g.utilization_percent, 10 * i);
    EXPECT_EQ(g.temperature_celsius, 30 + i);
    EXPECT_DOUBLE_EQ(*g.power_watts, 70.0 + 1.5 * i);
    EXPECT_TRUE(g.mig_devices.empty());
  }

  // Every pair sees 18 NVLinks through the four NVSwitches, and the socket split on PCIe.
  ASSERT_EQ(node.links.size(), 28u);
  for (int a = 0; a < 8; ++a) {
    for (int b = a + 1; b < 8; ++b) {
      const GpuLink* l = FindLink(node, kH100Buses[a], kH100Buses[b]);
      ASSERT_NE(l, nullptr) << a << "-" << b;
      EXPECT_EQ(l->nvlink_count, 18) << a << "-" << b;
      EXPECT_EQ(l->xgmi_count, 0);
      EXPECT_EQ(l->pcie_level, (a < 4) == (b < 4) ? PcieLevel::kNode : PcieLevel::kSystem)
          << a << "-" << b;
    }
  }
  EXPECT_EQ(Called("nvmlDeviceGetPciInfo_v3"), 1);
  EXPECT_EQ(Called("nvmlSystemGetCudaDriverVersion_v2"), 1);
  ExpectCleanExit();
}

TEST_F(NvmlBackendTest, A100MigDevicesAndDirectNvLinks) {
  WriteA100MigMinors();
  auto found = Run("a100_mig.json");
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  const NodeInfo& node = *found;
  EXPECT_TRUE(node.diagnostics.empty()) << AllDiagnostics(node);
  EXPECT_EQ(node.nvidia->version, "535.129.03");
  EXPECT_EQ(node.nvidia->runtime_version, "12.2");
  // Only what belongs to this driver version: the fake's directory holds a 535 libcuda
  // and nothing else of 535.
  EXPECT_EQ(node.nvidia->libraries, std::vector<std::string>{FakeDir() + "/libcuda.so.535.129.03"});
  EXPECT_TRUE(node.nvidia->control_nodes.empty());  // our dev_root is empty

  ASSERT_EQ(node.gpus.size(), 2u);
  const GpuInfo& mig = node.gpus[0];
  EXPECT_EQ(mig.mig_enabled, true);
  const std::vector<MigDevice> want_migs = {
      {"MIG-11111111-2222-5333-8444-555555555555",
       "3g.20gb",
       1,
       0,
       20937965568,
       {"/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap13"}},
      {"MIG-22222222-3333-5444-8555-666666666666",
       "2g.10gb",
       5,
       0,
       10468982784,
       {"/dev/nvidia-caps/nvidia-cap48", "/dev/nvidia-caps/nvidia-cap49"}},
      {"MIG-33333333-4444-5555-8666-777777777777",
       "1g.5gb",
       13,
       0,
       5100273664,
       {"/dev/nvidia-caps/nvidia-cap120", "/dev/nvidia-caps/nvidia-cap121"}},
  };
  EXPECT_EQ(mig.mig_devices, want_migs);
  EXPECT_EQ(mig.compute_capability, (ComputeCapability{8, 0}));
  EXPECT_EQ(mig.cpu_affinity, "0-31");

  // MIG pending is not MIG current.
  const GpuInfo& plain = node.gpus[1];
  EXPECT_EQ(plain.mig_enabled, false);
  EXPECT_TRUE(plain.mig_devices.empty());
  EXPECT_EQ(plain.memory_used_bytes, 3ull << 30);
  EXPECT_EQ(plain.utilization_percent, 99);
  EXPECT_DOUBLE_EQ(*plain.power_watts, 301.5);

  ASSERT_EQ(node.links.size(), 1u);
  EXPECT_EQ(node.links[0], (GpuLink{"0000:07:00.0", "0000:0f:00.0", 12, 0, PcieLevel::kMultiple}));
  ExpectCleanExit();
}

// Issue 15 A.4, "MIG devices wrong on real nodes": discovery never read the MIG
// capability minors, so every MIG device had no /dev/nvidia-caps nodes; gres.conf then
// printed `MultipleFiles=/dev/nvidia0` once per MIG device and the CDI spec gave each
// MIG device only /dev/nvidia0, with no warning.
TEST_F(NvmlBackendTest, MigDevicesGetTheirNvidiaCapsNodesFromMigMinors) {
  WriteA100MigMinors();
  auto found = Run("a100_mig.json");
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_TRUE(found->diagnostics.empty()) << AllDiagnostics(*found);
  const std::vector<MigDevice>& migs = found->gpus[0].mig_devices;
  ASSERT_EQ(migs.size(), 3u);
  // GPU instance 1 -> gpu0/gi1/access 12, its compute instance 0 -> gpu0/gi1/ci0/access 13.
  EXPECT_EQ(migs[0].device_nodes, (std::vector<std::string>{"/dev/nvidia-caps/nvidia-cap12",
                                                            "/dev/nvidia-caps/nvidia-cap13"}));
  EXPECT_EQ(migs[2].device_nodes, (std::vector<std::string>{"/dev/nvidia-caps/nvidia-cap120",
                                                            "/dev/nvidia-caps/nvidia-cap121"}));
  // The other GPU is not in MIG mode: nothing of gpu1's lines is used.
  EXPECT_TRUE(found->gpus[1].mig_devices.empty());
  ExpectCleanExit();
}

TEST_F(NvmlBackendTest, MigDevicesWithoutNvidiaCapsNodesAreReported) {
  // No mig-minors file at all (a driver without nvidia-caps, /proc not mounted).
  auto found = Run("a100_mig.json");
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  for (const MigDevice& m : found->gpus[0].mig_devices) EXPECT_TRUE(m.device_nodes.empty());
  ASSERT_EQ(found->diagnostics.size(), 1u) << AllDiagnostics(*found);
  EXPECT_EQ(CountDiagnostics(*found, (root_ / "proc/driver/nvidia-caps/mig-minors").string()), 1)
      << AllDiagnostics(*found);
  EXPECT_EQ(CountDiagnostics(*found, "the 3 MIG devices of GPU 0 have no /dev/nvidia-caps nodes"),
            1)
      << AllDiagnostics(*found);

  // A file that lacks one device's compute instance: that device alone is reported.
  WriteFile("proc/driver/nvidia-caps/mig-minors",
            "gpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n"
            "gpu0/gi5/access 48\n"
            "gpu0/gi13/access 120\ngpu0/gi13/ci0/access 121\n"
            "garbage\ngpu0/gi13/ci1/access many\n");
  found = Run("a100_mig.json");
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  const std::vector<MigDevice>& migs = found->gpus[0].mig_devices;
  EXPECT_EQ(migs[0].device_nodes.size(), 2u);
  EXPECT_TRUE(migs[1].device_nodes.empty());
  EXPECT_EQ(migs[2].device_nodes.size(), 2u);
  ASSERT_EQ(found->diagnostics.size(), 1u) << AllDiagnostics(*found);
  EXPECT_EQ(found->diagnostics[0].message,
            "GPU 0: MIG device MIG-22222222-3333-5444-8555-666666666666 has no "
            "/dev/nvidia-caps nodes (gpu0/gi5[/ci0]/access is not in " +
                (root_ / "proc/driver/nvidia-caps/mig-minors").string() +
                "), so Slurm and containers cannot be given it alone");
}

TEST_F(NvmlBackendTest, WorkstationMapsEveryPcieLevelAndBridges) {
  auto found = Run("workstation_pcie_levels.json");
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  const NodeInfo& node = *found;
  // NOT_SUPPORTED for MIG and ECC is an answer, not a problem.
  EXPECT_TRUE(node.diagnostics.empty()) << AllDiagnostics(node);
  ASSERT_EQ(node.gpus.size(), 4u);
  for (const GpuInfo& g : node.gpus) EXPECT_EQ(g.mig_enabled, false) << g.index;
  EXPECT_EQ(node.gpus[0].ecc_enabled, false);
  EXPECT_EQ(node.gpus[1].ecc_enabled, true);
  EXPECT_EQ(node.gpus[3].ecc_enabled, false);

  const std::string g0 = "0000:01:00.0", g1 = "0000:02:00.0", g2 = "0000:81:00.0",
                    g3 = "0000:82:00.0";
  const std::vector<GpuLink> want = {
      {g0, g1, 4, 0, PcieLevel::kSingle},     {g0, g2, 0, 0, PcieLevel::kMultiple},
      {g0, g3, 0, 0, PcieLevel::kHostBridge}, {g1, g2, 0, 0, PcieLevel::kNode},
      {g1, g3, 0, 0, PcieLevel::kSystem},     {g2, g3, 3, 0, PcieLevel::kSameBoard},
  };
  EXPECT_EQ(node.links, want);  // the fourth link of 2-3 is down
  ExpectCleanExit();
}

TEST_F(NvmlBackendTest, NodeWithoutGpusStillReportsTheDriver) {
  auto found = Run("no_gpus.json");
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_TRUE(found->gpus.empty());
  EXPECT_TRUE(found->links.empty());
  EXPECT_TRUE(found->diagnostics.empty()) << AllDiagnostics(*found);
  ASSERT_TRUE(found->nvidia.has_value());
  EXPECT_EQ(found->nvidia->version, "550.54.15");
  ExpectCleanExit();
}

TEST_F(NvmlBackendTest, DiscoverNodeRunsTheNvmlBackendByName) {
  setenv("FAKE_NVML_SCENARIO", Scenario("a100_mig.json").c_str(), 1);
  auto node = DiscoverNode(Options());
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  ASSERT_EQ(node->gpus.size(), 2u);
  EXPECT_EQ(node->gpus[0].backend, "nvml");
  EXPECT_EQ(node->gpus[1].pci_bus_id, "0000:0f:00.0");
  EXPECT_FALSE(node->hostname.empty());
  EXPECT_EQ(node->nvidia->runtime_version, "12.2");
  EXPECT_EQ(node->links.size(), 1u);
  ExpectCleanExit();
}

TEST_F(NvmlBackendTest, DiscoverNodeFailsWhenTheChosenNvmlBackendCannotRun) {
  setenv("FAKE_NVML_SCENARIO", Scenario("driver_not_loaded.json").c_str(), 1);
  auto node = DiscoverNode(Options());
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(node.status().message().find("nvml: the NVIDIA kernel driver is not loaded"),
            std::string::npos)
      << node.status().message();
}

TEST_F(NvmlBackendTest, TwoDiscoveriesInOneProcessEachStartAndStopNvml) {
  ASSERT_TRUE(Run("a100_mig.json").ok());
  auto second = Run("h100_hgx_8gpu.json");
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->gpus.size(), 8u);  // the fake re-read its scenario: nothing was cached
  ExpectCleanExit(FAKE_NVML_LIBRARY, /*expected_sessions=*/2);
}

TEST_F(NvmlBackendTest, ControlNodesAreThoseUnderDevRootInContainerNames) {
  WriteFile("dev/nvidia-uvm-tools", "");
  WriteFile("dev/nvidia-modeset", "");
  WriteFile("dev/nvidia-something-else", "");
  EXPECT_EQ(nvml::ListControlNodes((root_ / "dev").string()),
            (std::vector<std::string>{"/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"}));
  EXPECT_TRUE(nvml::ListControlNodes((root_ / "absent").string()).empty());
}

TEST_F(NvmlBackendTest, DriverLibrariesWithoutAVersionAreRealFilesOnly) {
  const std::string dir = (root_ / "lib").string();
  WriteFile("lib/libcuda.so.550.1", "");
  WriteFile("lib/libnvidia-cfg.so.550.1", "");
  WriteFile("lib/libnvidia-glcore.so.550.1", "");  // not a compute library
  WriteFile("lib/libcuda.so.", "");                // no version at all
  std::filesystem::create_symlink("libcuda.so.550.1", root_ / "lib/libcuda.so.1");
  std::filesystem::create_directories(root_ / "lib/libnvidia-ml.so.7");  // a directory
  EXPECT_EQ(nvml::ListDriverLibraries(dir, ""),
            (std::vector<std::string>{dir + "/libcuda.so.550.1", dir + "/libnvidia-cfg.so.550.1"}));
  // A version that could walk out of the directory is not used in file names.
  EXPECT_EQ(nvml::ListDriverLibraries(dir, "../../etc"), nvml::ListDriverLibraries(dir, ""));
  EXPECT_EQ(nvml::ListDriverLibraries(dir, "550.1"),
            (std::vector<std::string>{dir + "/libcuda.so.550.1", dir + "/libnvidia-cfg.so.550.1"}));
  EXPECT_TRUE(nvml::ListDriverLibraries((root_ / "absent").string(), "550.1").empty());
  EXPECT_TRUE(nvml::ListDriverLibraries("", "550.1").empty());
}

// On a machine with an NVIDIA driver this checks our ABI declarations against the real
// library; elsewhere it skips.
TEST(NvmlRealDriverTest, RealLibraryAnswersSanelyWhenPresent) {
  DiscoveryOptions options;  // the real libnvidia-ml.so.1, /sys and /dev
  auto found = NewNvmlBackend(options)->Discover();
  if (!found.ok()) {
    ASSERT_EQ(found.status().code(), StatusCode::kUnavailable) << found.status().ToString();
    GTEST_SKIP() << "no usable NVIDIA driver here: " << found.status().message();
  }
  ASSERT_TRUE(found->nvidia.has_value());
  EXPECT_FALSE(found->nvidia->version.empty());
  for (const GpuInfo& g : found->gpus) {
    SCOPED_TRACE("GPU " + std::to_string(g.index));
    EXPECT_EQ(g.uuid.rfind("GPU-", 0), 0u) << g.uuid;
    EXPECT_EQ(g.pci_bus_id.size(), 12u) << g.pci_bus_id;
    EXPECT_GT(g.memory_total_bytes, 0u);
    EXPECT_LE(g.memory_used_bytes, g.memory_total_bytes);
    EXPECT_TRUE(g.compute_capability.has_value());
    EXPECT_GE(g.minor_number, 0);
  }
  for (const Diagnostic& d : found->diagnostics) std::cout << "note: " << d.message << "\n";
}

}  // namespace
}  // namespace gpupool::gpu
