// The ROCm SMI telemetry sampler against the fake librocm_smi64.so, with values the test
// rewrites while the sampler keeps the library initialised.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
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

}  // namespace
}  // namespace gpupool::gpu
