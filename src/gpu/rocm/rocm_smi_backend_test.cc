// The ROCm backend driven through its real dlopen code against the fake librocm_smi64.so
// (tests/fakelib/rocm_smi), scripted per test by a scenario file.
#include "gpu/rocm/rocm_smi_backend.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/json.h"
#include "gpu/rocm/amd_test_node.h"

namespace gpupool::gpu {
namespace {

using testing::AddAmdGpu;
using testing::AddKfdCpuNode;
using testing::FakeSysfsTree;

constexpr unsigned kMi250xBuses[] = {0xc1, 0xc6, 0xc9, 0xce, 0xd1, 0xd6, 0xd9, 0xde};
constexpr uint64_t kVram = 68702699520;  // 64 GiB HBM2e per GCD

// Keeps the first `n` scripted devices.
Json FirstDevices(Json scenario, size_t n) {
  Json kept = Json::array();
  for (size_t i = 0; i < n && i < scenario["devices"].size(); ++i) {
    kept.push_back(scenario["devices"][i]);
  }
  scenario["devices"] = kept;
  return scenario;
}

std::string BusId(unsigned bus) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0000:%02x:00.0", bus);
  return buf;
}

class RocmSmiBackendTest : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv("GPUPOOL_FAKE_ROCM_SMI_SCENARIO"); }

  // Writes the scenario and points the fake library at it.
  void UseScenario(const Json& scenario) {
    Json s = scenario;
    s["call_log"] = tree_.Path("calls.log");
    tree_.Write("scenario.json", s.dump());
    setenv("GPUPOOL_FAKE_ROCM_SMI_SCENARIO", tree_.Path("scenario.json").c_str(), 1);
  }

  DiscoveryOptions Options(const std::string& library = GPUPOOL_FAKE_ROCM_SMI) const {
    DiscoveryOptions o;
    o.rocm_smi_library = library;
    o.sysfs_root = tree_.root();
    o.dev_root = tree_.Path("dev");
    return o;
  }

  Result<NodeInfo> Discover(const std::string& library = GPUPOOL_FAKE_ROCM_SMI) {
    return NewRocmSmiBackendWithPciIds(Options(library), {})->Discover();
  }

  std::string CallLog() const {
    std::ifstream in(tree_.Path("calls.log"));
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  bool HasDiagnosticContaining(const NodeInfo& node, std::string_view text) const {
    return std::any_of(node.diagnostics.begin(), node.diagnostics.end(), [&](const Diagnostic& d) {
      return d.message.find(text) != std::string::npos;
    });
  }

  // An 8-GCD MI250X node: library answers plus the matching sysfs and KFD topology.
  Json Mi250xScenario() const {
    Json devices = Json::array();
    for (unsigned i = 0; i < 8; ++i) {
      devices.push_back({{"name", "AMD Instinct MI250X"},
                         {"bdfid", kMi250xBuses[i] << 8},
                         {"unique_id", 0x1000000000000000ull + i},
                         {"vram_total", kVram},
                         {"vram_used", 10485760 * (i + 1)},
                         {"busy_percent", 10 * i},
                         {"numa_node", i / 2},
                         {"render_minor", 128 + i},
                         {"temp_junction_mc", 40000 + 1000 * i},
                         {"power_uw", 90000000 + 1000000 * i}});
    }
    return {{"driver_version", "6.2.4"}, {"xgmi_all_pairs", true}, {"devices", devices}};
  }
  void BuildMi250xSysfs() const {
    AddKfdCpuNode(tree_, 0);
    for (unsigned i = 0; i < 8; ++i) {
      AddAmdGpu(tree_, BusId(kMi250xBuses[i]), static_cast<int>(i + 1), static_cast<int>(128 + i),
                static_cast<int>(i / 2),
                std::to_string(16 * (i / 2)) + "-" + std::to_string(16 * (i / 2) + 15),
                static_cast<int>(i + 1), 90010);
    }
    tree_.Write("dev/kfd", "");
  }

  FakeSysfsTree tree_;
};

TEST_F(RocmSmiBackendTest, EightGpuMi250xNodeEveryField) {
  BuildMi250xSysfs();
  UseScenario(Mi250xScenario());
  auto backend = NewRocmSmiBackendWithPciIds(Options(), {});
  EXPECT_EQ(backend->name(), "rocm-smi");
  Result<NodeInfo> node = backend->Discover();
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  ASSERT_EQ(node->gpus.size(), 8u);
  for (unsigned i = 0; i < 8; ++i) {
    SCOPED_TRACE("GPU " + std::to_string(i));
    const GpuInfo& g = node->gpus[i];
    EXPECT_EQ(g.vendor, Vendor::kAmd);
    EXPECT_EQ(g.backend, "rocm-smi");
    EXPECT_EQ(g.index, static_cast<int>(i));
    EXPECT_EQ(g.name, "AMD Instinct MI250X");
    char uuid[32];
    std::snprintf(uuid, sizeof uuid, "0x10000000000000%02x", i);
    EXPECT_EQ(g.uuid, uuid);
    EXPECT_EQ(g.pci_bus_id, BusId(kMi250xBuses[i]));
    EXPECT_EQ(g.memory_total_bytes, kVram);
    EXPECT_EQ(g.memory_used_bytes, 10485760u * (i + 1));
    EXPECT_EQ(g.utilization_percent, static_cast<int>(10 * i));
    EXPECT_EQ(g.gfx_target, "gfx90a");
    EXPECT_EQ(g.minor_number, static_cast<int>(128 + i));
    EXPECT_EQ(g.device_nodes,
              (std::vector<std::string>{"/dev/dri/renderD" + std::to_string(128 + i),
                                        "/dev/dri/card" + std::to_string(i + 1)}));
    EXPECT_EQ(g.numa_node, static_cast<int>(i / 2));
    EXPECT_EQ(g.cpu_affinity,
              std::to_string(16 * (i / 2)) + "-" + std::to_string(16 * (i / 2) + 15));
    EXPECT_EQ(g.temperature_celsius, static_cast<int>(40 + i));  // junction: no edge sensor
    EXPECT_EQ(g.power_watts, 90.0 + i);
    EXPECT_FALSE(g.compute_capability.has_value());
    EXPECT_FALSE(g.mig_enabled.has_value());
  }
  ASSERT_EQ(node->links.size(), 28u);  // every pair of 8
  for (const GpuLink& l : node->links) {
    EXPECT_EQ(l.xgmi_count, 1) << l.a << " " << l.b;
    const GpuInfo* a = FindGpuByPci(*node, l.a);
    const GpuInfo* b = FindGpuByPci(*node, l.b);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(l.pcie_level, a->numa_node == b->numa_node ? PcieLevel::kNode : PcieLevel::kSystem);
  }
  ASSERT_TRUE(node->amd.has_value());
  EXPECT_EQ(node->amd->version, "6.2.4");
  EXPECT_EQ(node->amd->runtime_version, "5.2.3-fake");  // <lib>/../.info/version
  EXPECT_EQ(node->amd->control_nodes, (std::vector<std::string>{"/dev/kfd"}));
  EXPECT_EQ(node->amd->libraries, (std::vector<std::string>{GPUPOOL_FAKE_ROCM_SMI}));
  EXPECT_TRUE(node->diagnostics.empty()) << node->diagnostics[0].message;
}

TEST_F(RocmSmiBackendTest, ShutsDownAndClosesTheLibrary) {
  UseScenario(Mi250xScenario());
  ASSERT_TRUE(Discover().ok());
  EXPECT_EQ(CallLog(), "init\nshut_down\n");
  // Nothing of ours holds the library any more.
  void* still_loaded = dlopen(GPUPOOL_FAKE_ROCM_SMI, RTLD_NOW | RTLD_NOLOAD);
  EXPECT_EQ(still_loaded, nullptr);
  if (still_loaded != nullptr) dlclose(still_loaded);
}

// An MI300X in DPX mode as ROCm SMI lists it: two devices, the second's BDFID carrying
// its partition number in bits 28-31; each keeps a bus id of its own, and both read the
// physical GPU's partition modes.
TEST_F(RocmSmiBackendTest, PartitionsOfOneGpuKeepBusIdsOfTheirOwn) {
  tree_.AddPciDevice("0000:0c:00.0", "0x1002", "0x74a1", "0x120000", "0", "0-47");
  const std::string dir = FakeSysfsTree::DeviceDir("0000:0c:00.0");
  tree_.Write(dir + "/current_compute_partition", "DPX\n");
  tree_.Write(dir + "/current_memory_partition", "NPS1\n");
  UseScenario({{"devices",
                {{{"name", "AMD Instinct MI300X"}, {"bdfid", 0x0c00}, {"render_minor", 128}},
                 {{"name", "AMD Instinct MI300X"},
                  {"bdfid", 0x0c00 | (1ull << 28)},
                  {"render_minor", 129}}}}});
  Result<NodeInfo> node = Discover();
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  ASSERT_EQ(node->gpus.size(), 2u);
  EXPECT_EQ(node->gpus[0].pci_bus_id, "0000:0c:00.0");
  EXPECT_EQ(node->gpus[1].pci_bus_id, "0000:0c:00.1");
  for (const GpuInfo& g : node->gpus) {
    EXPECT_EQ(g.compute_partition, "DPX");
    EXPECT_EQ(g.memory_partition, "NPS1");
  }
}

TEST_F(RocmSmiBackendTest, OneGpuWithoutSysfs) {
  UseScenario({{"devices",
                {{{"name", "AMD Radeon PRO W7900"},
                  {"bdfid", (3ull << 32) | (0x2d << 8) | (1 << 3) | 1},
                  {"vram_total", 48ull << 30},
                  {"vram_used", 0},
                  {"temp_edge_mc", 35500},
                  {"render_minor", 128}}}}});
  Result<NodeInfo> node = Discover();
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  ASSERT_EQ(node->gpus.size(), 1u);
  const GpuInfo& g = node->gpus[0];
  EXPECT_EQ(g.pci_bus_id, "0003:2d:01.1");
  EXPECT_EQ(g.name, "AMD Radeon PRO W7900");
  EXPECT_EQ(g.uuid, "");  // not supported
  EXPECT_FALSE(g.utilization_percent.has_value());
  EXPECT_EQ(g.numa_node, -1);
  EXPECT_EQ(g.temperature_celsius, 35);  // edge sensor first
  EXPECT_FALSE(g.power_watts.has_value());
  EXPECT_EQ(g.gfx_target, "");  // no KFD topology to read
  EXPECT_EQ(g.cpu_affinity, "");
  EXPECT_EQ(g.device_nodes, (std::vector<std::string>{"/dev/dri/renderD128"}));
  EXPECT_TRUE(node->links.empty());
  ASSERT_TRUE(node->amd.has_value());
  EXPECT_TRUE(node->amd->control_nodes.empty());  // no <dev_root>/kfd
  EXPECT_EQ(node->amd->version, "");
  EXPECT_TRUE(node->diagnostics.empty());  // NOT_SUPPORTED is normal, not worth a note
}

TEST_F(RocmSmiBackendTest, FailingCallsBecomeDiagnostics) {
  Json s = FirstDevices(Mi250xScenario(), 2);
  s["devices"][0]["errors"] = {{"rsmi_dev_busy_percent_get", 4},
                               {"rsmi_dev_memory_total_get", 3},
                               {"rsmi_dev_unique_id_get", 6},
                               {"rsmi_dev_name_get", 4}};
  s["devices"][1]["errors"] = {{"rsmi_dev_pci_id_get", 3}};
  s["link_type_status"] = 4;
  UseScenario(s);
  Result<NodeInfo> node = Discover();
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  ASSERT_EQ(node->gpus.size(), 1u);  // GPU 1 has no bus id and is left out
  const GpuInfo& g = node->gpus[0];
  EXPECT_FALSE(g.utilization_percent.has_value());
  EXPECT_EQ(g.memory_total_bytes, 0u);
  EXPECT_EQ(g.memory_used_bytes, 0u);
  EXPECT_EQ(g.uuid, "");
  EXPECT_EQ(g.name, "AMD GPU");  // neither the library nor sysfs could name it
  EXPECT_TRUE(HasDiagnosticContaining(
      *node,
      "rsmi_dev_busy_percent_get failed for GPU 0: RSMI_STATUS_PERMISSION: fake permission "
      "denied; the value is reported as unknown"));
  EXPECT_TRUE(HasDiagnosticContaining(*node,
                                      "rsmi_dev_memory_total_get failed for GPU 0: "
                                      "RSMI_STATUS_FILE_ERROR"));
  EXPECT_TRUE(HasDiagnosticContaining(*node, "rsmi_dev_unique_id_get failed for GPU 0"));
  EXPECT_TRUE(HasDiagnosticContaining(*node, "rsmi_dev_name_get failed for GPU 0"));
  EXPECT_TRUE(HasDiagnosticContaining(
      *node,
      "rsmi_dev_pci_id_get failed for GPU 1: RSMI_STATUS_FILE_ERROR (fake status); the "
      "GPU is left out"));
  for (const Diagnostic& d : node->diagnostics) EXPECT_EQ(d.backend, "rocm-smi");
  EXPECT_EQ(CallLog(), "init\nshut_down\n");
}

TEST_F(RocmSmiBackendTest, LinkCallFailuresKeepNumaLevels) {
  BuildMi250xSysfs();
  Json s = Mi250xScenario();
  s["link_type_status"] = 4;
  UseScenario(s);
  Result<NodeInfo> node = Discover();
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  ASSERT_EQ(node->links.size(), 28u);
  for (const GpuLink& l : node->links) EXPECT_EQ(l.xgmi_count, 0);
  EXPECT_TRUE(HasDiagnosticContaining(*node, "rsmi_topo_get_link_type failed for GPU 0"));
  EXPECT_EQ(node->diagnostics.size(), 28u);  // one per pair
}

TEST_F(RocmSmiBackendTest, IndirectXgmiIsNotADirectLink) {
  Json s = FirstDevices(Mi250xScenario(), 3);
  s["xgmi_all_pairs"] = false;
  s["links"] = {{{"a", 0}, {"b", 1}, {"type", 2}, {"hops", 1}},
                {{"a", 0}, {"b", 2}, {"type", 2}, {"hops", 2}}};
  UseScenario(s);
  Result<NodeInfo> node = Discover();
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  ASSERT_EQ(node->links.size(), 3u);
  EXPECT_EQ(node->links[0].xgmi_count, 1);  // 0-1 direct
  EXPECT_EQ(node->links[1].xgmi_count, 0);  // 0-2 two hops
  EXPECT_EQ(node->links[2].xgmi_count, 0);  // 1-2 PCIe
}

TEST_F(RocmSmiBackendTest, ZeroAndInconsistentMemory) {
  Json s = FirstDevices(Mi250xScenario(), 2);
  s["devices"][0]["vram_total"] = 0;
  s["devices"][1]["vram_used"] = kVram + 1;
  s["devices"][1]["busy_percent"] = 250;
  s["devices"][1]["numa_node"] = 0xFFFFFFFFu;  // "no NUMA node"
  UseScenario(s);
  Result<NodeInfo> node = Discover();
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  ASSERT_EQ(node->gpus.size(), 2u);
  EXPECT_EQ(node->gpus[0].memory_total_bytes, 0u);
  EXPECT_EQ(node->gpus[0].memory_used_bytes, 0u);
  EXPECT_EQ(node->gpus[1].memory_total_bytes, kVram);
  EXPECT_EQ(node->gpus[1].memory_used_bytes, 0u);
  EXPECT_FALSE(node->gpus[1].utilization_percent.has_value());
  EXPECT_EQ(node->gpus[1].numa_node, -1);
  EXPECT_TRUE(HasDiagnosticContaining(*node, "reported 0 bytes of VRAM for GPU 0"));
  EXPECT_TRUE(HasDiagnosticContaining(*node, "GPU 1 reports 68702699521 bytes of VRAM used"));
  EXPECT_TRUE(HasDiagnosticContaining(*node, "reported 250% for GPU 1"));
}

TEST_F(RocmSmiBackendTest, NonUtf8AndUnterminatedNames) {
  Json s = FirstDevices(Mi250xScenario(), 2);
  s["devices"][0].erase("name");
  s["devices"][0]["name_hex"] = "414d44ff20c3";  // "AMD", a stray 0xff, a cut-off sequence
  s["devices"][1]["name_unterminated"] = true;
  UseScenario(s);
  Result<NodeInfo> node = Discover();
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  ASSERT_EQ(node->gpus.size(), 2u);
  EXPECT_EQ(node->gpus[0].name, "AMD? ?");
  EXPECT_EQ(node->gpus[1].name, std::string(256, 'X'));  // bounded by our buffer
  EXPECT_TRUE(node->diagnostics.empty());
}

TEST_F(RocmSmiBackendTest, HugeDeviceCountIsCapped) {
  Json s = FirstDevices(Mi250xScenario(), 1);
  s["num_devices"] = 4000000000u;
  UseScenario(s);
  Result<NodeInfo> node = Discover();
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  ASSERT_EQ(node->gpus.size(), 1u);
  EXPECT_TRUE(HasDiagnosticContaining(
      *node,
      "rsmi_num_monitor_devices reported 4000000000 GPUs, more than any node has; only "
      "the first 1024 are read"));
  // 1023 indices without a device fail alike: a bounded list and a summary, not 1023 lines.
  EXPECT_EQ(node->diagnostics.size(), 33u);
  EXPECT_EQ(node->diagnostics.back().message, "992 more problems of the same kind were not listed");
}

TEST_F(RocmSmiBackendTest, InitFailureFallsBackToSysfs) {
  BuildMi250xSysfs();
  UseScenario({{"init_status", 8}});
  Result<NodeInfo> node = Discover();
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  ASSERT_EQ(node->gpus.size(), 8u);
  EXPECT_EQ(node->gpus[7].pci_bus_id, BusId(0xde));
  EXPECT_EQ(node->gpus[7].gfx_target, "gfx90a");
  EXPECT_EQ(node->gpus[7].backend, "rocm-smi");
  ASSERT_FALSE(node->diagnostics.empty());
  EXPECT_NE(node->diagnostics[0].message.find(
                "rsmi_init failed: RSMI_STATUS_INIT_ERROR: fake init error"),
            std::string::npos)
      << node->diagnostics[0].message;
  EXPECT_NE(node->diagnostics[0].message.find("instead"), std::string::npos);
  // The library is installed; it is the driver that is not ready, so no install hint.
  EXPECT_EQ(node->diagnostics[0].message.find("install ROCm SMI"), std::string::npos);
  EXPECT_EQ(CallLog(), "init\n");  // no shut down of a library that never started
  ASSERT_TRUE(node->amd.has_value());
  EXPECT_TRUE(node->amd->libraries.empty());
}

TEST_F(RocmSmiBackendTest, InitFailureWithoutSysfsGpusIsUnavailable) {
  UseScenario({{"init_status", 8}});
  Result<NodeInfo> node = Discover();
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(node.status().message().find("rsmi_init failed"), std::string::npos);
}

TEST_F(RocmSmiBackendTest, CountFailureFallsBackAndShutsDown) {
  UseScenario({{"num_devices_status", 3}});
  Result<NodeInfo> node = Discover();
  ASSERT_FALSE(node.ok());
  EXPECT_NE(node.status().message().find("rsmi_num_monitor_devices failed"), std::string::npos);
  EXPECT_EQ(CallLog(), "init\nshut_down\n");
}

TEST_F(RocmSmiBackendTest, WorkingLibraryWithoutGpusIsEmptyAndQuiet) {
  UseScenario({{"devices", Json::array()}});
  Result<NodeInfo> node = Discover();
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  EXPECT_TRUE(node->gpus.empty());
  EXPECT_FALSE(node->amd.has_value());
  EXPECT_TRUE(node->diagnostics.empty());
}

TEST_F(RocmSmiBackendTest, MissingOptionalSymbolsLeaveFieldsUnknownWithOneDiagnostic) {
  BuildMi250xSysfs();
  // KFD knows the XGMI links the library cannot report without rsmi_topo_get_link_type.
  tree_.AddKfdIoLink(1, 0, 11, 2);
  tree_.AddKfdIoLink(2, 0, 11, 1);
  UseScenario(Mi250xScenario());
  Result<NodeInfo> node = Discover(GPUPOOL_FAKE_ROCM_SMI_WITHOUT_OPTIONAL);
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  ASSERT_EQ(node->gpus.size(), 8u);
  for (const GpuInfo& g : node->gpus) {
    EXPECT_FALSE(g.utilization_percent.has_value());
    EXPECT_FALSE(g.power_watts.has_value());
    EXPECT_EQ(g.memory_total_bytes, kVram);  // present symbols still answer
  }
  int xgmi_pairs = 0;
  for (const GpuLink& l : node->links) xgmi_pairs += l.xgmi_count;
  EXPECT_EQ(xgmi_pairs, 1);
  ASSERT_EQ(node->diagnostics.size(), 1u);
  EXPECT_EQ(node->diagnostics[0].message,
            std::string("ROCm SMI (") + GPUPOOL_FAKE_ROCM_SMI_WITHOUT_OPTIONAL +
                ") lacks rsmi_dev_busy_percent_get, rsmi_dev_power_ave_get, "
                "rsmi_topo_get_link_type, rsmi_version_get, rsmi_status_string: those fields are "
                "reported as unknown; a newer ROCm provides them");
}

TEST_F(RocmSmiBackendTest, MissingRequiredSymbolFallsBackOrIsUnavailable) {
  UseScenario(Mi250xScenario());
  Result<NodeInfo> bare = Discover(GPUPOOL_FAKE_ROCM_SMI_WITHOUT_REQUIRED);
  ASSERT_FALSE(bare.ok());
  EXPECT_EQ(bare.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(bare.status().message().find("lacks the required symbol rsmi_num_monitor_devices"),
            std::string::npos)
      << bare.status().message();

  BuildMi250xSysfs();
  Result<NodeInfo> node = Discover(GPUPOOL_FAKE_ROCM_SMI_WITHOUT_REQUIRED);
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  EXPECT_EQ(node->gpus.size(), 8u);
  EXPECT_NE(node->diagnostics[0].message.find("rsmi_num_monitor_devices"), std::string::npos);
  EXPECT_EQ(CallLog(), "");  // never initialised
}

}  // namespace
}  // namespace gpupool::gpu
