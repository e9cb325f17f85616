// The samplers that need no vendor library: the fake node's profile and amdgpu sysfs.
#include "gpu/telemetry.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "gpu/gpu_backend.h"

namespace gpupool::gpu {
namespace {

namespace fs = std::filesystem;

class TelemetryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "telemetry_test.XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  std::string Write(const std::string& name, const std::string& text) {
    const fs::path p = root_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }
  static constexpr const char* kNode = R"({"schema": "gpupool.node/v1", "hostname": "n1",
    "gpus": [{"vendor": "nvidia", "index": 0, "name": "Fake", "uuid": "GPU-a",
              "pci_bus_id": "0000:01:00.0", "memory_total_bytes": 8589934592,
              "memory_used_bytes": 1048576, "utilization_percent": 7},
             {"vendor": "nvidia", "index": 1, "name": "Fake", "uuid": "GPU-b",
              "pci_bus_id": "0000:02:00.0", "memory_total_bytes": 8589934592}])";
  fs::path root_;
};

TEST_F(TelemetryTest, FakeProfileStepsThroughItsSeriesByTheCallersClock) {
  std::string text = kNode;
  text += R"(, "telemetry": {"step_s": 10, "gpus": {"1": {"util_pct": [10, 90, 50],
             "mem_used_mib": 100, "power_w": [200.5], "temp_c": [40], "xid_errors": [0, 2], "xid_count": [0, 1]}}}})";
  const std::string file = Write("node.json", text);
  DiscoveryOptions o;
  o.backends = {"fake"};
  o.fake_node_file = file;
  // The node file with a profile still reads as a node.
  Result<NodeInfo> node = DiscoverNode(o);
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  Result<std::unique_ptr<TelemetrySampler>> sampler = CreateTelemetrySampler(o, *node);
  ASSERT_TRUE(sampler.ok()) << sampler.status().ToString();
  EXPECT_EQ((*sampler)->name(), "fake");
  auto at = [&](int64_t seconds) {
    Result<std::vector<GpuSample>> s = (*sampler)->Sample(seconds * 1'000'000);
    EXPECT_TRUE(s.ok());
    return *s;
  };
  std::vector<GpuSample> s = at(0);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].util_pct, 7);  // no profile: the node's static figures
  EXPECT_EQ(s[0].mem_used_mib, 1);
  EXPECT_EQ(s[0].mem_total_mib, 8192);
  EXPECT_EQ(s[1].util_pct, 10);
  EXPECT_EQ(s[1].mem_used_mib, 100);
  EXPECT_EQ(s[1].power_w, 200.5);
  EXPECT_EQ(s[1].xid_errors, 0);
  EXPECT_EQ(at(15)[1].util_pct, 90);
  EXPECT_EQ(at(15)[1].xid_errors, 2);
  EXPECT_EQ(at(25)[1].util_pct, 50);
  EXPECT_EQ(at(35)[1].util_pct, 10);  // wraps round
  // The Xid counts alone, as the agent's Xid watch reads them between samples: the GPUs
  // whose profile scripts them.
  EXPECT_EQ((*sampler)->XidCounts(0), (std::map<int, int64_t>{{1, 0}}));
  EXPECT_EQ((*sampler)->XidCounts(15'000'000), (std::map<int, int64_t>{{1, 1}}));
  EXPECT_EQ(at(15)[1].xid_count, 1);
}

TEST_F(TelemetryTest, BadProfilesAreErrorsNamingTheField) {
  struct Case {
    const char* profile;
    const char* error;
  };
  const Case cases[] = {
      {R"("telemetry": 3)", "telemetry: expected an object"},
      {R"("telemetry": {"step_s": 0})", "step_s"},
      {R"("telemetry": {"gpus": {"x": {}}})", "telemetry.gpus.x: the key must be a GPU index"},
      {R"("telemetry": {"gpus": {"0": {"util": [1]}}})", "telemetry.gpus.0.util: unknown field"},
      {R"("telemetry": {"gpus": {"0": {"util_pct": ["a"]}}})", "telemetry.gpus.0.util_pct"},
      {R"("telemetry": {"gpus": {"0": {"util_pct": []}}})", "expected 1 to 100000 numbers"},
      {R"("telemetry": {"gpus": {"0": {"power_w": [-1]}}})", "non-negative"},
  };
  for (const Case& c : cases) {
    std::string text = kNode;
    text += std::string(", ") + c.profile + "}";
    const std::string file = Write("bad.json", text);
    Result<NodeInfo> node = NodeInfo{};
    Result<std::unique_ptr<TelemetrySampler>> s = NewFakeSampler(file, NodeInfo{});
    ASSERT_FALSE(s.ok()) << c.profile;
    EXPECT_NE(s.status().message().find(c.error), std::string::npos)
        << c.profile << " -> " << s.status().message();
  }
}

TEST_F(TelemetryTest, AmdSysfsReadsBusyMemoryPowerAndTemperature) {
  const std::string dev = "bus/pci/devices/0000:03:00.0";
  Write(dev + "/gpu_busy_percent", "42\n");
  Write(dev + "/mem_info_vram_used", "1073741824\n");
  Write(dev + "/mem_info_vram_total", "68719476736\n");
  Write(dev + "/hwmon/hwmon3/power1_average", "215000000\n");
  Write(dev + "/hwmon/hwmon3/temp1_input", "55500\n");
  NodeInfo node;
  GpuInfo g;
  g.vendor = Vendor::kAmd;
  g.index = 0;
  g.pci_bus_id = "0000:03:00.0";
  node.gpus.push_back(g);
  std::unique_ptr<TelemetrySampler> s = NewAmdSysfsSampler(root_.string(), node);
  Result<std::vector<GpuSample>> r = s->Sample(0);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].util_pct, 42);
  EXPECT_EQ((*r)[0].mem_used_mib, 1024);
  EXPECT_EQ((*r)[0].mem_total_mib, 65536);
  EXPECT_EQ((*r)[0].power_w, 215);
  EXPECT_EQ((*r)[0].temp_c, 55.5);

  // Garbage and absent files leave fields unset; no readable busy figure is an error.
  Write(dev + "/gpu_busy_percent", "lots\n");
  Write(dev + "/mem_info_vram_used", "-5\n");
  r = s->Sample(0);
  EXPECT_FALSE(r.ok());
  Write(dev + "/gpu_busy_percent", "3\n");
  r = s->Sample(0);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE((*r)[0].mem_used_mib.has_value());
}

// Issue 29: AMD RAS faults injected into a fake amdgpu sysfs tree (uncorrected errors in
// the RAS blocks' counts that grow, bad VRAM pages that grow, a pending bad page) show in the
// sample's fields, and the health policy puts each GPU in the state its table row says.
TEST_F(TelemetryTest, AmdRasCountsAndBadPagesReachThePolicysStates) {
  NodeInfo node;
  for (int i = 0; i < 4; ++i) {
    GpuInfo g;
    g.vendor = Vendor::kAmd;
    g.index = i;
    g.pci_bus_id = "0000:0" + std::to_string(i + 3) + ":00.0";
    node.gpus.push_back(g);
    const std::string dev = "bus/pci/devices/" + g.pci_bus_id;
    Write(dev + "/gpu_busy_percent", "1\n");
    if (i == 3) continue;  // GPU 3: a kernel without RAS
    Write(dev + "/ras/umc_err_count", "ue: 0\nce: 0\n");
    Write(dev + "/ras/gfx_err_count", "ue: 0\nce: 4\n");
    Write(dev + "/ras/features", "feature mask: 0x3fff\n");
    Write(dev + "/ras/gpu_vram_bad_pages", "");
  }
  const auto dev = [&](int i) { return "bus/pci/devices/" + node.gpus[i].pci_bus_id; };
  std::unique_ptr<TelemetrySampler> sampler = NewAmdSysfsSampler(root_.string(), node);
  const HealthPolicy policy = HealthPolicy::Create().value();
  std::vector<GpuHealth> health(node.gpus.size());
  auto step = [&] {
    Result<std::vector<GpuSample>> s = sampler->Sample(0);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (!s.ok()) return std::vector<GpuSample>{};
    for (size_t i = 0; i < s->size(); ++i) {
      const GpuSample& g = (*s)[i];
      health[i] = OnReadings(health[i], HealthReadings(g.hw, g.ecc_uncorrected), 0, policy).next;
    }
    return *s;
  };
  std::vector<GpuSample> s = step();
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0].ecc_uncorrected, 0);
  EXPECT_EQ(s[0].hw.retired_pages, 0);
  EXPECT_EQ(s[0].hw.retired_pages_pending, false);
  EXPECT_FALSE(s[3].ecc_uncorrected.has_value());  // no RAS: nothing said
  EXPECT_EQ(s[3].hw, HardwareHealth{});
  // GPU 0: an uncorrected error in the memory block, then in gfx too (3 in all).
  Write(dev(0) + "/ras/umc_err_count", "ue: 1\nce: 9\n");
  // GPU 1: bad pages grow past the suspect threshold (a malformed line is skipped).
  std::string pages;
  for (int p = 0; p < 10; ++p) pages += "0x0000" + std::to_string(100 + p) + " : 0x00001000 : R\n";
  Write(dev(1) + "/ras/gpu_vram_bad_pages", pages + "garbage\n");
  // GPU 2: a bad page waits to be reserved.
  Write(dev(2) + "/ras/gpu_vram_bad_pages", "0x00000001 : 0x00001000 : P\n");
  s = step();
  EXPECT_EQ(s[0].ecc_uncorrected, 1);
  EXPECT_EQ(s[1].hw.retired_pages, 10);
  EXPECT_EQ(s[2].hw.retired_pages_pending, true);
  using S = GpuHealthState;
  EXPECT_EQ(health[0].state, S::kSuspect);
  EXPECT_EQ(health[1].state, S::kSuspect);
  EXPECT_EQ(health[2].state, S::kCordoned);
  EXPECT_EQ(health[3].state, S::kHealthy);
  Write(dev(0) + "/ras/gfx_err_count", "ue: 2\nce: 4\nde: 0\n");
  for (int p = 10; p < 60; ++p) pages += "0x000" + std::to_string(1000 + p) + " : 0x00001000 : R\n";
  Write(dev(1) + "/ras/gpu_vram_bad_pages", pages);
  s = step();
  EXPECT_EQ(s[0].ecc_uncorrected, 3);
  EXPECT_EQ(s[1].hw.retired_pages, 60);
  EXPECT_EQ(health[0].state, S::kCordoned) << health[0].reason;
  EXPECT_EQ(health[1].state, S::kCordoned) << health[1].reason;
  EXPECT_NE(health[1].reason.find("retired-pages"), std::string::npos);
}

// ROCm SMI's samples get the same RAS fields from sysfs; other GPUs' samples are left as
// they were.
TEST_F(TelemetryTest, TheRasOverlayAddsSysfsRasToAnotherSamplersSamples) {
  class Fixed final : public TelemetrySampler {
   public:
    std::string_view name() const override { return "fixed"; }
    Result<std::vector<GpuSample>> Sample(int64_t) override {
      GpuSample a, b;
      a.index = 0;
      b.index = 1;
      return std::vector<GpuSample>{a, b};
    }
  };
  NodeInfo node;
  GpuInfo amd;
  amd.vendor = Vendor::kAmd;
  amd.index = 0;
  amd.pci_bus_id = "0000:c1:00.0";
  GpuInfo nv;
  nv.vendor = Vendor::kNvidia;
  nv.index = 1;
  nv.pci_bus_id = "0000:c2:00.0";
  node.gpus = {amd, nv};
  Write("bus/pci/devices/0000:c1:00.0/ras/umc_err_count", "ue: 4\nce: 0\n");
  Write("bus/pci/devices/0000:c2:00.0/ras/umc_err_count", "ue: 9\nce: 0\n");
  std::unique_ptr<TelemetrySampler> s =
      NewAmdRasOverlay(std::make_unique<Fixed>(), root_.string(), node);
  Result<std::vector<GpuSample>> r = s->Sample(0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].ecc_uncorrected, 4);
  EXPECT_FALSE((*r)[1].ecc_uncorrected.has_value());
  EXPECT_EQ(s->name(), "fixed");
}

// The fake node's profile scripts the hardware health fields too.
TEST_F(TelemetryTest, FakeProfileScriptsHardwareHealth) {
  const std::string node = Write("node.json", std::string(kNode) + R"(, "telemetry": {"step_s": 10,
      "gpus": {"1": {"remapped_rows_failed": [0, 1], "retired_pages": 12, "hw_slowdown": 1,
      "remapped_rows": 3, "remapped_rows_pending": 0, "retired_pages_pending": [1, 0]}}}})");
  DiscoveryOptions o;
  o.backends = {"fake"};
  o.fake_node_file = node;
  Result<NodeInfo> info = DiscoverNode(o);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  Result<std::unique_ptr<TelemetrySampler>> s = CreateTelemetrySampler(o, *info);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<GpuSample> r = (*s)->Sample(0).value();
  EXPECT_EQ(r[0].hw, HardwareHealth{});
  EXPECT_EQ(r[1].hw.remapped_rows_failed, false);
  EXPECT_EQ(r[1].hw.retired_pages_pending, true);
  EXPECT_EQ(r[1].hw.retired_pages, 12);
  EXPECT_EQ(r[1].hw.remapped_rows, 3);
  EXPECT_EQ(r[1].hw.remapped_rows_pending, false);
  EXPECT_EQ(r[1].hw.hw_slowdown, true);
  r = (*s)->Sample(10'000'000).value();
  EXPECT_EQ(r[1].hw.remapped_rows_failed, true);
  EXPECT_EQ(r[1].hw.retired_pages_pending, false);
}

TEST_F(TelemetryTest, NoGpusNoSampler) {
  DiscoveryOptions o;
  Result<std::unique_ptr<TelemetrySampler>> s = CreateTelemetrySampler(o, NodeInfo{});
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace gpupool::gpu
