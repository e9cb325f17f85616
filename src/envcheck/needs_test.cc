#include "envcheck/needs.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "envcheck/device_code.h"

namespace gpupool::envcheck {
namespace {

gpu::NodeInfo NvidiaNode(const std::string& driver, const std::string& cuda, int major, int minor) {
  gpu::NodeInfo n;
  n.hostname = "b07";
  n.nvidia = gpu::DriverInfo{driver, cuda, {}, {}};
  gpu::GpuInfo g;
  g.vendor = gpu::Vendor::kNvidia;
  g.compute_capability = gpu::ComputeCapability{major, minor};
  n.gpus = {g, g};
  return n;
}

jobs::EnvNeeds Cuda124(std::vector<std::string> sass, std::vector<std::string> ptx = {}) {
  jobs::EnvNeeds n;
  n.source = "image x";
  n.cuda = "12.4";
  n.min_driver = "550.54.14";
  n.min_driver_minor_compat = "525.60.13";
  n.sass = std::move(sass);
  n.ptx = std::move(ptx);
  return n;
}

TEST(CudaCodeNameTest, ParsesWhatItPrints) {
  for (const char* name : {"sm_70", "sm_90a", "sm_100f", "compute_80", "compute_120"}) {
    std::optional<CudaCode> c = ParseCudaCodeName(name);
    ASSERT_TRUE(c) << name;
    EXPECT_EQ(CudaCodeName(*c), name);
  }
  for (const char* bad : {"", "sm_", "sm_9", "sm_90b", "compute_x", "gfx90a", "sm_99999"}) {
    EXPECT_FALSE(ParseCudaCodeName(bad)) << bad;
  }
}

TEST(OfferFromNodeTest, TakesDriverCapabilitiesAndTargets) {
  gpu::NodeInfo n = NvidiaNode("535.104.05", "12.2", 8, 0);
  gpu::GpuInfo amd;
  amd.vendor = gpu::Vendor::kAmd;
  amd.gfx_target = "gfx90a";
  n.gpus.push_back(amd);
  NodeOffer o = OfferFromNode(n, "");
  EXPECT_EQ(o.name, "b07");
  EXPECT_EQ(o.driver_version, "535.104.05");
  EXPECT_EQ(o.cuda_driver_version, "12.2");
  ASSERT_EQ(o.capabilities.size(), 1u);  // two equal GPUs, one capability
  EXPECT_EQ(o.gfx_targets, std::vector<std::string>{"gfx90a"});
  EXPECT_EQ(OfferFromNode(n, "other").name, "other");
}

TEST(CheckNeedsTest, DriverTooOldNamesBothVersionsAndTheFix) {
  Status s =
      CheckNeeds(Cuda124({"sm_80"}), OfferFromNode(NvidiaNode("535.104.05", "12.2", 8, 0), ""));
  ASSERT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "needs CUDA 12.4 -> driver >= 550.54.14; node b07 has 535.104.05: upgrade the node's "
            "driver or use an image built for CUDA 12.2 or older");
  EXPECT_TRUE(
      CheckNeeds(Cuda124({"sm_80"}), OfferFromNode(NvidiaNode("550.54.14", "12.4", 8, 0), ""))
          .ok());
}

TEST(CheckNeedsTest, ArchitectureRules) {
  const NodeOffer a100 = OfferFromNode(NvidiaNode("580.95.05", "13.0", 8, 0), "");
  const NodeOffer h100 = OfferFromNode(NvidiaNode("580.95.05", "13.0", 9, 0), "");
  EXPECT_TRUE(CheckNeeds(Cuda124({"sm_80"}), h100).code() == StatusCode::kFailedPrecondition);
  EXPECT_TRUE(CheckNeeds(Cuda124({"sm_80"}, {"compute_80"}), h100).ok());  // PTX JIT
  EXPECT_TRUE(CheckNeeds(Cuda124({"sm_90a"}), h100).ok());
  EXPECT_FALSE(CheckNeeds(Cuda124({"sm_90a"}), a100).ok());
  EXPECT_TRUE(CheckNeeds(Cuda124({"sm_80"}), a100).ok());
  Status s = CheckNeeds(Cuda124({"sm_90"}), a100);
  EXPECT_EQ(s.message(),
            "carries GPU code for sm_90 only; node b07 has compute capability 8.0: rebuild with "
            "-gencode for it, or with PTX");
}

TEST(CheckNeedsTest, EmptyNeedsRunAnywhereAndCudaNeedsADriver) {
  gpu::NodeInfo cpu_only;
  cpu_only.hostname = "c01";
  EXPECT_TRUE(CheckNeeds({}, OfferFromNode(cpu_only, "")).ok());
  jobs::EnvNeeds plain;
  plain.source = "directory /opt/env";  // inspected, needs nothing
  EXPECT_TRUE(CheckNeeds(plain, OfferFromNode(cpu_only, "")).ok());
  Status s = CheckNeeds(Cuda124({"sm_80"}), OfferFromNode(cpu_only, ""));
  EXPECT_EQ(s.message(), "needs CUDA 12.4; node c01 has no NVIDIA driver");
}

TEST(CheckNeedsTest, AmdTargets) {
  gpu::NodeInfo n;
  n.hostname = "m01";
  gpu::GpuInfo g;
  g.vendor = gpu::Vendor::kAmd;
  g.gfx_target = "gfx90a";
  n.gpus = {g};
  jobs::EnvNeeds needs;
  needs.source = "image rocm";
  needs.gfx_targets = {"gfx942"};
  EXPECT_EQ(CheckNeeds(needs, OfferFromNode(n, "")).message(),
            "carries AMD code for gfx942; node m01 has gfx90a");
  needs.gfx_targets = {"gfx90a:xnack+", "gfx942"};
  EXPECT_TRUE(CheckNeeds(needs, OfferFromNode(n, "")).ok());
}

TEST(RunCaptureTest, OutputAndFailures) {
  Result<std::string> ok = RunCapture({"sh", "-c", "echo out; echo err >&2"});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(*ok, "out\n");
  Result<std::string> bad = RunCapture({"sh", "-c", "echo why >&2; exit 3"});
  EXPECT_EQ(bad.status().message(), "sh -c failed: why");
  EXPECT_EQ(RunCapture({"/nonexistent/tool"}).status().code(), StatusCode::kUnavailable);
}

TEST(InspectDirNeedsTest, ReportsWhatTheTreeCarries) {
  char tmpl[] = "/tmp/gpupool-needs-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  ASSERT_EQ(::mkdir((dir + "/lib").c_str(), 0755), 0);
  FILE* f = std::fopen((dir + "/lib/libcudart.so.12.4.127").c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  Result<jobs::EnvNeeds> n = InspectDirNeeds(dir);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(n->source, "directory " + dir);
  EXPECT_EQ(n->cuda, "12.4");
  EXPECT_EQ(n->min_driver, "550.54.14");
  EXPECT_EQ(InspectDirNeeds(dir + "/missing").status().code(), StatusCode::kNotFound);
  std::remove((dir + "/lib/libcudart.so.12.4.127").c_str());
  ::rmdir((dir + "/lib").c_str());
  ::rmdir(dir.c_str());
}

TEST(ImageIdTest, MissingImageSaysHowToLoadIt) {
  if (RunCapture({"podman", "--version"}).status().code() != StatusCode::kOk) {
    GTEST_SKIP() << "podman is not installed";
  }
  Result<std::string> id =
      ImageId("localhost/gpupool-no-such-image:never",
              {"--storage-driver", "vfs", "--root", "/tmp/gpupool-needs-noroot", "--runroot",
               "/tmp/gpupool-needs-norun"});
  std::error_code ec;
  std::filesystem::remove_all("/tmp/gpupool-needs-noroot", ec);
  std::filesystem::remove_all("/tmp/gpupool-needs-norun", ec);
  ASSERT_EQ(id.status().code(), StatusCode::kNotFound);
  EXPECT_NE(id.status().message().find("podman load"), std::string::npos) << id.status().message();
}

}  // namespace
}  // namespace gpupool::envcheck
