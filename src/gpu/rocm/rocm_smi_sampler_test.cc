// The ROCm SMI telemetry sampler against the fake librocm_smi64.so, with values the test
// rewrites while the sampler keeps the library initialised.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "gpu/telemetry.h"

namespace gpupool::gpu {
namespace {

namespace fs = std::filesystem;
using Scenario = nlohmann::json;

class RocmSmiSamplerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "rsmi_sampler.XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    unsetenv("GPUPOOL_FAKE_ROCM_SMI_SCENARIO");
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // Written beside and renamed into place: the fake never reads half a file.
  void Use(const Scenario& s) {
    std::ofstream(dir_ / "next.json") << s.dump();
    fs::rename(dir_ / "next.json", dir_ / "scenario.json");
    setenv("GPUPOOL_FAKE_ROCM_SMI_SCENARIO", (dir_ / "scenario.json").c_str(), 1);
  }
  static Scenario Devices(unsigned busy) {
    Scenario devices = Scenario::array();
    for (unsigned i = 0; i < 2; ++i) {
      devices.push_back({{"bdfid", (0xc1u + i) << 8},
                         {"vram_total", 68719476736ull},
                         {"vram_used", 1073741824ull * (i + 1)},
                         {"busy_percent", busy + i},
                         {"temp_edge_mc", 45500},
                         {"power_uw", 215000000}});
    }
    return {{"devices", devices}};
  }
  static NodeInfo Node() {
    NodeInfo n;
    for (int i = 0; i < 2; ++i) {
      GpuInfo g;
      g.vendor = Vendor::kAmd;
      g.index = i;
      g.pci_bus_id = i == 0 ? "0000:c1:00.0" : "0000:c2:00.0";
      n.gpus.push_back(g);
    }
    return n;
  }
  fs::path dir_;
};

TEST_F(RocmSmiSamplerTest, ReadsBusyMemoryPowerTemperatureAndFollowsChanges) {
  Use(Devices(30));
  Result<std::unique_ptr<TelemetrySampler>> s = NewRocmSmiSampler(GPUPOOL_FAKE_ROCM_SMI, Node());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Result<std::vector<GpuSample>> r = (*s)->Sample(0);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[1].index, 1);
  EXPECT_EQ((*r)[1].util_pct, 31);
  EXPECT_EQ((*r)[1].mem_used_mib, 2048);
  EXPECT_EQ((*r)[1].mem_total_mib, 65536);
  EXPECT_EQ((*r)[1].power_w, 215);
  EXPECT_EQ((*r)[1].temp_c, 45.5);
  EXPECT_FALSE((*r)[1].xid_errors.has_value());
  Use(Devices(90));
  r = (*s)->Sample(0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].util_pct, 90);
}

TEST_F(RocmSmiSamplerTest, AbsentFiguresAndUnknownGpus) {
  Use({{"devices", {{{"bdfid", 0xc1u << 8}, {"busy_percent", 5}}}}});
  Result<std::unique_ptr<TelemetrySampler>> s = NewRocmSmiSampler(GPUPOOL_FAKE_ROCM_SMI, Node());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Result<std::vector<GpuSample>> r = (*s)->Sample(0);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 1u);  // the second GPU is not there
  EXPECT_EQ((*r)[0].util_pct, 5);
  EXPECT_FALSE((*r)[0].power_w.has_value());
  EXPECT_FALSE((*r)[0].mem_used_mib.has_value());
  // Without a busy figure for any GPU a sample is an error.
  Use({{"devices", {{{"bdfid", 0xc1u << 8}}}}});
  EXPECT_FALSE((*s)->Sample(0).ok());
  // No GPU of the node known to the library; no library.
  NodeInfo other = Node();
  for (GpuInfo& g : other.gpus) g.pci_bus_id = "0000:01:00.0";
  EXPECT_FALSE(NewRocmSmiSampler(GPUPOOL_FAKE_ROCM_SMI, other).ok());
  EXPECT_FALSE(NewRocmSmiSampler("/nonexistent/librocm_smi64.so", Node()).ok());
}

// Processes as KFD lists them: pids from rsmi_compute_process_info_get, their devices
// from rsmi_compute_process_gpus_get, each listed on the bound GPUs it uses with its VRAM
// there. The node's GPU 0 is the library's device 1 and GPU 1 its device 0 (bound by bus
// id, not by index).
class RocmSmiProcessesTest : public RocmSmiSamplerTest {
 protected:
  static constexpr uint64_t kMiB = 1 << 20;
  static NodeInfo Swapped() {
    NodeInfo n = Node();
    std::swap(n.gpus[0].pci_bus_id, n.gpus[1].pci_bus_id);
    return n;
  }
  // 4242 on device 1 (3 GiB), 4243 on both (1 GiB on 0, 2 GiB on 1), 4244 on device 7,
  // which the node does not have, 4245 with 512 MiB on device 0 but no queues there
  // (rsmi_compute_process_gpus_get does not list it).
  static Scenario WithProcesses() {
    Scenario s = Devices(10);
    s["processes"] = {
        {{"pid", 4242}, {"devices", {1}}, {"vram", {3072 * kMiB}}},
        {{"pid", 4243}, {"devices", {0, 1}}, {"vram", {1024 * kMiB, 2048 * kMiB}}},
        {{"pid", 4244}, {"devices", {7}}, {"vram", {kMiB}}},
        {{"pid", 4245}, {"devices", {0}}, {"vram", {512 * kMiB}}, {"queues", Scenario::array()}}};
    return s;
  }
  // Each GPU's processes, by GPU index: {pid, MiB (-1: unknown)}.
  std::map<int, std::vector<std::pair<int64_t, int64_t>>> Listed(const char* library) {
    Result<std::unique_ptr<TelemetrySampler>> s = NewRocmSmiSampler(library, Swapped());
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (!s.ok()) return {};
    Result<std::vector<GpuSample>> r = (*s)->Sample(0);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return {};
    std::map<int, std::vector<std::pair<int64_t, int64_t>>> out;
    for (const GpuSample& g : *r) {
      for (const ProcessSample& p : g.processes) {
        out[g.index].emplace_back(p.pid, p.used_mib.value_or(-1));
      }
    }
    return out;
  }
};

TEST_F(RocmSmiProcessesTest, EachGpuListsItsProcessesWithTheirVramThere) {
  Use(WithProcesses());
  using Listing = std::map<int, std::vector<std::pair<int64_t, int64_t>>>;
  EXPECT_EQ(Listed(GPUPOOL_FAKE_ROCM_SMI),
            (Listing{{0, {{4242, 3072}, {4243, 2048}}}, {1, {{4243, 1024}, {4245, 512}}}}));
}

TEST_F(RocmSmiProcessesTest, BeforeRocm57OnlyAOneGpuProcessHasItsMemory) {
  // Without rsmi_compute_process_info_by_device_get only the total over the process's GPUs
  // is known: 4243's 3 GiB on two GPUs is not split; and only the GPUs with the process's
  // queues are known: 4245, holding memory without queues, is not seen.
  Use(WithProcesses());
  using Listing = std::map<int, std::vector<std::pair<int64_t, int64_t>>>;
  EXPECT_EQ(Listed(GPUPOOL_FAKE_ROCM_SMI_WITHOUT_BY_DEVICE),
            (Listing{{0, {{4242, 3072}, {4243, -1}}}, {1, {{4243, -1}}}}));
}

TEST_F(RocmSmiProcessesTest, ManyProcessesAndFailingCallsAndNoProcessCalls) {
  // More processes than the first buffer holds: all listed.
  Scenario many = Devices(10);
  for (int pid = 5000; pid < 5040; ++pid) {
    many["processes"].push_back({{"pid", pid}, {"devices", {0}}, {"vram", {kMiB}}});
  }
  Use(many);
  EXPECT_EQ(Listed(GPUPOOL_FAKE_ROCM_SMI)[1].size(), 40u);
  // A failing list call lists nothing. A failing queue call loses nothing the per-device
  // call sees; a failing per-device call leaves a process with queues on one GPU its
  // total, one on several its memory unknown, and memory without queues unseen.
  using Listing = std::map<int, std::vector<std::pair<int64_t, int64_t>>>;
  Scenario failing = WithProcesses();
  failing["process_errors"] = {{"rsmi_compute_process_info_get", 4}};
  Use(failing);
  EXPECT_TRUE(Listed(GPUPOOL_FAKE_ROCM_SMI).empty());
  failing["process_errors"] = {{"rsmi_compute_process_gpus_get", 10}};
  Use(failing);
  EXPECT_EQ(Listed(GPUPOOL_FAKE_ROCM_SMI),
            (Listing{{0, {{4242, 3072}, {4243, 2048}}}, {1, {{4243, 1024}, {4245, 512}}}}));
  EXPECT_TRUE(Listed(GPUPOOL_FAKE_ROCM_SMI_WITHOUT_BY_DEVICE).empty());
  failing["process_errors"] = {{"rsmi_compute_process_info_by_device_get", 2}};
  Use(failing);
  EXPECT_EQ(Listed(GPUPOOL_FAKE_ROCM_SMI),
            (Listing{{0, {{4242, 3072}, {4243, -1}}}, {1, {{4243, -1}}}}));
  // A library without the process calls still samples, and lists none.
  Use(WithProcesses());
  Result<std::unique_ptr<TelemetrySampler>> s =
      NewRocmSmiSampler(GPUPOOL_FAKE_ROCM_SMI_WITHOUT_PROCESSES, Swapped());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Result<std::vector<GpuSample>> r = (*s)->Sample(0);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].util_pct, 11);  // device 1's
  EXPECT_TRUE((*r)[0].processes.empty());
  EXPECT_TRUE((*r)[1].processes.empty());
}

}  // namespace
}  // namespace gpupool::gpu
