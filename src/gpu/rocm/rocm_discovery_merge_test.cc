// DiscoverNode with the real rocm-smi and sysfs backends: the same GPU is listed once,
// and the sysfs backend's "library missing" note is dropped when rocm-smi worked.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>

#include "common/json.h"
#include "gpu/gpu_backend.h"
#include "gpu/rocm/amd_test_node.h"
#include "gpu/sysfs/sysfs_backend.h"

namespace gpupool::gpu {
namespace {

using testing::AddAmdGpu;
using testing::AddKfdCpuNode;
using testing::FakeSysfsTree;

class RocmDiscoveryMergeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    AddKfdCpuNode(tree_, 0);
    AddAmdGpu(tree_, "0000:c1:00.0", 1, 128, 0, "0-15", 1, 90010);
    AddAmdGpu(tree_, "0000:c6:00.0", 2, 129, 0, "0-15", 2, 90010);
    tree_.AddKfdIoLink(1, 0, 11, 2);
    tree_.AddKfdIoLink(2, 0, 11, 1);
    tree_.AddPciDevice("0000:3b:00.0", "0x10de", "0x2330", "0x030200", "1", "16-31");
    Json scenario = {{"devices",
                      {{{"name", "AMD Instinct MI250X"}, {"bdfid", 0xc100}, {"numa_node", 0}},
                       {{"name", "AMD Instinct MI250X"}, {"bdfid", 0xc600}, {"numa_node", 0}}}},
                     {"xgmi_all_pairs", true}};
    tree_.Write("scenario.json", scenario.dump());
    setenv("GPUPOOL_FAKE_ROCM_SMI_SCENARIO", tree_.Path("scenario.json").c_str(), 1);
    options_.sysfs_root = tree_.root();
    options_.dev_root = tree_.Path("dev");
    options_.nvml_library = "/nonexistent/libnvidia-ml.so.1";
    options_.rocm_smi_library = GPUPOOL_FAKE_ROCM_SMI;
  }
  void TearDown() override { unsetenv("GPUPOOL_FAKE_ROCM_SMI_SCENARIO"); }

  static int CountMissingLibraryNotes(const NodeInfo& node, Vendor vendor) {
    return static_cast<int>(
        std::count_if(node.diagnostics.begin(), node.diagnostics.end(),
                      [&](const Diagnostic& d) { return IsMissingLibraryDiagnostic(d, vendor); }));
  }

  FakeSysfsTree tree_;
  DiscoveryOptions options_;
};

TEST_F(RocmDiscoveryMergeTest, LibraryAndSysfsListEachGpuOnce) {
  Result<NodeInfo> node = DiscoverNode(options_);
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  ASSERT_EQ(node->gpus.size(), 3u);
  // Sorted by vendor then index: NVIDIA from sysfs, then the two AMD GPUs from rocm-smi.
  EXPECT_EQ(node->gpus[0].vendor, Vendor::kNvidia);
  EXPECT_EQ(node->gpus[0].backend, "sysfs");
  EXPECT_EQ(node->gpus[1].pci_bus_id, "0000:c1:00.0");
  EXPECT_EQ(node->gpus[1].backend, "rocm-smi");
  EXPECT_EQ(node->gpus[1].name, "AMD Instinct MI250X");
  EXPECT_EQ(node->gpus[1].gfx_target, "gfx90a");
  EXPECT_EQ(node->gpus[2].pci_bus_id, "0000:c6:00.0");
  EXPECT_EQ(node->gpus[2].backend, "rocm-smi");
  // rocm-smi came first, so its XGMI link wins over sysfs's plain PCIe one.
  ASSERT_EQ(node->links.size(), 1u);
  EXPECT_EQ(node->links[0].xgmi_count, 1);
  ASSERT_TRUE(node->amd.has_value());
  EXPECT_EQ(node->amd->libraries, (std::vector<std::string>{GPUPOOL_FAKE_ROCM_SMI}));
  EXPECT_EQ(CountMissingLibraryNotes(*node, Vendor::kAmd), 0);
  EXPECT_EQ(CountMissingLibraryNotes(*node, Vendor::kNvidia), 1);  // NVML is really missing
}

TEST_F(RocmDiscoveryMergeTest, FallbackSuccessDropsTheSysfsAmdNoteWhenProbing) {
  options_.rocm_smi_library = "/nonexistent/librocm_smi64.so";
  Result<NodeInfo> node = DiscoverNode(options_);
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  ASSERT_EQ(node->gpus.size(), 3u);
  EXPECT_EQ(node->gpus[1].backend, "rocm-smi");
  EXPECT_EQ(node->gpus[2].backend, "rocm-smi");
  // rocm-smi already says that it fell back; the sysfs echo of it is dropped.
  EXPECT_EQ(CountMissingLibraryNotes(*node, Vendor::kAmd), 0);
  EXPECT_EQ(CountMissingLibraryNotes(*node, Vendor::kNvidia), 1);
  EXPECT_TRUE(std::any_of(node->diagnostics.begin(), node->diagnostics.end(), [](const auto& d) {
    return d.backend == "rocm-smi" && d.message.find("instead") != std::string::npos;
  }));
}

TEST_F(RocmDiscoveryMergeTest, ExplicitBackendsKeepEveryNote) {
  options_.rocm_smi_library = "/nonexistent/librocm_smi64.so";
  options_.backends = {"rocm-smi", "sysfs"};
  Result<NodeInfo> node = DiscoverNode(options_);
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  EXPECT_EQ(node->gpus.size(), 3u);
  EXPECT_EQ(CountMissingLibraryNotes(*node, Vendor::kAmd), 1);
}

TEST_F(RocmDiscoveryMergeTest, ProbingWithoutAnyAmdBackendKeepsTheNote) {
  // rocm-smi cannot run (no library, and its fallback finds no GPU under class/drm),
  // so the sysfs note is the user's only hint.
  std::filesystem::remove_all(tree_.Path("class/drm"));
  options_.rocm_smi_library = "/nonexistent/librocm_smi64.so";
  Result<NodeInfo> node = DiscoverNode(options_);
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  EXPECT_EQ(CountMissingLibraryNotes(*node, Vendor::kAmd), 1);
  EXPECT_TRUE(std::any_of(node->diagnostics.begin(), node->diagnostics.end(),
                          [](const auto& d) { return d.backend == "rocm-smi"; }));
  for (const GpuInfo& g : node->gpus) EXPECT_EQ(g.backend, "sysfs");
}

TEST(DiscoveryNotesTest, NoVendorGpuMeansNoNoteAboutItsMissingLibrary) {
  // A machine with one Intel GPU and neither vendor library: the NVML and ROCm backends
  // cannot run, and that is expected, so neither may leave a warning.
  FakeSysfsTree tree;
  tree.AddPciDevice("0000:00:02.0", "0x8086", "0x46a6", "0x030000", "0", "0-7");
  DiscoveryOptions options;
  options.sysfs_root = tree.root();
  options.dev_root = tree.Path("dev");
  options.nvml_library = "/nonexistent/libnvidia-ml.so.1";
  options.rocm_smi_library = "/nonexistent/librocm_smi64.so";
  Result<NodeInfo> node = DiscoverNode(options);
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  ASSERT_EQ(node->gpus.size(), 1u);
  for (const Diagnostic& d : node->diagnostics) {
    EXPECT_NE(d.backend, "nvml") << d.message;
    EXPECT_NE(d.backend, "rocm-smi") << d.message;
  }
}

}  // namespace
}  // namespace gpupool::gpu
