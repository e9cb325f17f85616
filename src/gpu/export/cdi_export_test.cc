#include <gtest/gtest.h>

#include "common/json.h"
#include "gpu/export/exporters.h"
#include "gpu/export/test_nodes.h"

namespace gpupool::gpu {
namespace {

using testing::AmdGpu;
using testing::TwoH100;

Json Spec(const NodeInfo& n, const CdiOptions& o = {}) {
  Result<std::string> text = ExportCdi(n, o);
  EXPECT_TRUE(text.ok()) << text.status().message();
  if (!text.ok()) return Json();
  Result<Json> j = ParseJson(*text, "cdi");
  EXPECT_TRUE(j.ok());
  return j.ok() ? *j : Json();
}

const Json* Device(const Json& spec, const std::string& name) {
  for (const Json& d : spec["devices"]) {
    if (d["name"] == name) return &d;
  }
  return nullptr;
}

TEST(CdiExportTest, OneDevicePerGpuByIndexAndUuidPlusAll) {
  const Json spec = Spec(TwoH100());
  EXPECT_EQ(spec["cdiVersion"], "0.5.0");
  EXPECT_EQ(spec["kind"], "nvidia.com/gpu");
  std::vector<std::string> names;
  for (const Json& d : spec["devices"]) names.push_back(d["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"0", "GPU-11111111-2222-3333-4444-555555555555", "1",
                                             "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", "all"}));
  const Json* one = Device(spec, "1");
  ASSERT_NE(one, nullptr);
  EXPECT_EQ((*one)["containerEdits"]["deviceNodes"],
            Json::parse(R"([{"path": "/dev/nvidia1", "hostPath": "/dev/nvidia1"}])"));
  EXPECT_EQ((*one)["containerEdits"]["env"],
            Json::parse(R"(["GPUPOOL_GPU_1=GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"])"));
  EXPECT_EQ((*Device(spec, "all"))["containerEdits"]["deviceNodes"].size(), 2u);
}

TEST(CdiExportTest, TopLevelEditsCarryControlNodesAndReadOnlyLibraries) {
  CdiOptions o;
  o.host_dev_root = "/tmp/stand-in/dev/";
  const Json spec = Spec(TwoH100(), o);
  const Json& top = spec["containerEdits"];
  EXPECT_EQ(
      top["deviceNodes"][0],
      Json::parse(R"({"path": "/dev/nvidiactl", "hostPath": "/tmp/stand-in/dev/nvidiactl"})"));
  EXPECT_EQ(top["mounts"][0]["options"], Json::parse(R"(["ro", "nosuid", "nodev", "bind"])"));
  EXPECT_EQ(top["mounts"][0]["hostPath"], top["mounts"][0]["containerPath"]);
  EXPECT_EQ(top["env"], Json::parse(R"(["GPUPOOL_CDI_KIND=nvidia.com/gpu"])"));
  EXPECT_EQ((*Device(spec, "0"))["containerEdits"]["deviceNodes"][0]["hostPath"],
            "/tmp/stand-in/dev/nvidia0");
}

TEST(CdiExportTest, MigDevicesAddTheirCapabilityNodes) {
  NodeInfo n = TwoH100();
  n.gpus[0].mig_enabled = true;
  n.gpus[0].mig_devices = {
      MigDevice{"MIG-1234",
                "1g.10gb",
                9,
                0,
                1,
                {"/dev/nvidia-caps/nvidia-cap36", "/dev/nvidia-caps/nvidia-cap37"}}};
  const Json spec = Spec(n);
  const Json* mig = Device(spec, "0:0");
  ASSERT_NE(mig, nullptr);
  EXPECT_EQ((*mig)["containerEdits"]["deviceNodes"].size(), 3u);
  EXPECT_EQ((*mig)["containerEdits"]["env"], Json::parse(R"(["GPUPOOL_MIG_0_0=MIG-1234"])"));
  EXPECT_NE(Device(spec, "MIG-1234"), nullptr);
}

TEST(CdiExportTest, VendorIsChosenOrAskedFor) {
  NodeInfo n = TwoH100();
  n.gpus.push_back(AmdGpu(0, "0x1a2b", "0000:c1:00.0"));
  n.amd = DriverInfo{"", "", {}, {"/dev/kfd"}};
  Result<std::string> both = ExportCdi(n, {});
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("--cdi-vendor nvidia or --cdi-vendor amd"),
            std::string::npos);
  CdiOptions amd;
  amd.vendor = Vendor::kAmd;
  const Json spec = Spec(n, amd);
  EXPECT_EQ(spec["kind"], "amd.com/gpu");
  EXPECT_EQ((*Device(spec, "0"))["containerEdits"]["deviceNodes"].size(), 2u);  // card + render
  EXPECT_EQ(spec["containerEdits"]["deviceNodes"][0]["path"], "/dev/kfd");
  EXPECT_EQ(Device(spec, "GPU-11111111-2222-3333-4444-555555555555"), nullptr);
}

TEST(CdiExportTest, FailsClearlyWithoutGpusOrDeviceNodes) {
  Result<std::string> none = ExportCdi(NodeInfo{}, {});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("nothing to put in a CDI spec"), std::string::npos);
  NodeInfo n = TwoH100();
  n.gpus[1].device_nodes.clear();
  n.gpus[1].minor_number = -1;
  Result<std::string> nodeless = ExportCdi(n, {});
  ASSERT_FALSE(nodeless.ok());
  EXPECT_NE(nodeless.status().message().find("GPU 1 (0000:2a:00.0) has no device node"),
            std::string::npos);
  CdiOptions amd;
  amd.vendor = Vendor::kAmd;
  EXPECT_EQ(ExportCdi(TwoH100(), amd).status().code(), StatusCode::kNotFound);
}

TEST(CdiExportTest, NvidiaNodeFallsBackToTheMinorNumber) {
  NodeInfo n = TwoH100();
  n.gpus[0].device_nodes.clear();
  n.gpus[0].minor_number = 5;
  const Json spec = Spec(n);
  EXPECT_EQ((*Device(spec, "0"))["containerEdits"]["deviceNodes"][0]["path"], "/dev/nvidia5");
}

TEST(CdiExportTest, KindIsConfigurable) {
  CdiOptions o;
  o.kind = "gpupool.local/gpu";
  const Json spec = Spec(TwoH100(), o);
  EXPECT_EQ(spec["kind"], "gpupool.local/gpu");
  EXPECT_EQ(spec["containerEdits"]["env"][0], "GPUPOOL_CDI_KIND=gpupool.local/gpu");
  // The devices do not change with the kind.
  EXPECT_EQ(spec["devices"], Spec(TwoH100())["devices"]);
}

TEST(CdiExportTest, InvalidKindIsRefused) {
  for (const char* bad :
       {"gpu", "/gpu", "vendor/", "ven dor/gpu", "vendor/g/pu", "-x.com/gpu", "x_y.com/gpu"}) {
    CdiOptions o;
    o.kind = bad;
    Result<std::string> r = ExportCdi(TwoH100(), o);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("not a CDI kind"), std::string::npos) << bad;
  }
  CdiOptions ok;
  ok.kind = "gpupool-test-123.example/gpu_x.1";
  EXPECT_TRUE(ExportCdi(TwoH100(), ok).ok());
}

// Issue 15 A.1, "stock CUDA images would not find the driver in a container": the spec
// runs gpupool's hook on the mounted libraries, so libcuda.so.1 and libnvidia-ml.so.1
// exist and are in the container's linker cache.
TEST(CdiExportTest, StockCudaImagesFindTheDriver_HookLinksTheMountedLibraries) {
  NodeInfo n = TwoH100();
  n.nvidia->libraries.push_back("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15");
  CdiOptions o;
  o.hook_path = "/usr/local/bin/gpupool";
  const Json spec = Spec(n, o);
  EXPECT_EQ(spec["cdiVersion"], "0.5.0");  // the newest podman 4.3 accepts
  const Json& hooks = spec["containerEdits"]["hooks"];
  ASSERT_EQ(hooks.size(), 1u);
  EXPECT_EQ(hooks[0], Json::parse(R"({"hookName": "createContainer",
      "path": "/usr/local/bin/gpupool",
      "args": ["gpupool", "cdi-hook",
               "--library", "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15",
               "--library", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15"]})"));
  // Without a hook binary (a library caller that has none) the spec has no hooks.
  EXPECT_FALSE(Spec(n)["containerEdits"].contains("hooks"));
  // Nor without libraries to link.
  n.nvidia->libraries.clear();
  EXPECT_FALSE(Spec(n, o)["containerEdits"].contains("hooks"));
  o.hook_path = "gpupool";
  Result<std::string> relative = ExportCdi(TwoH100(), o);
  EXPECT_EQ(relative.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(relative.status().message().find("absolute"), std::string::npos);
}

// Issue 15 A.1, "include the tools ... CUDA needs": driver files the caller found are
// mounted read-only beside the libraries, all from under host_file_root when one is set.
TEST(CdiExportTest, StockCudaImagesGetTheDriversFilesMountedReadOnly) {
  CdiOptions o;
  o.driver_files = {"/usr/bin/nvidia-smi", "/lib/firmware/nvidia/550.54.15/gsp_ga10x.bin",
                    "relative/ignored", "/usr/bin/nvidia-smi"};
  o.host_file_root = "/var/lib/gpupool/agent/stand-in-driver/";
  const Json spec = Spec(TwoH100(), o);
  const Json& mounts = spec["containerEdits"]["mounts"];
  ASSERT_EQ(mounts.size(), 3u);  // the library, then each driver file once
  EXPECT_EQ(mounts[0]["hostPath"],
            "/var/lib/gpupool/agent/stand-in-driver/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15");
  EXPECT_EQ(mounts[0]["containerPath"], "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15");
  EXPECT_EQ(mounts[1], Json::parse(R"({
      "hostPath": "/var/lib/gpupool/agent/stand-in-driver/usr/bin/nvidia-smi",
      "containerPath": "/usr/bin/nvidia-smi", "options": ["ro", "nosuid", "nodev", "bind"]})"));
  EXPECT_EQ(mounts[2]["containerPath"], "/lib/firmware/nvidia/550.54.15/gsp_ga10x.bin");
}

// Issue 15 A.1, "do the same for ROCm": /dev/kfd and the GPU's /dev/dri nodes, and no
// host ROCm libraries (the image's own ROCm matches what it was built with), so no hook.
TEST(CdiExportTest, RocmSpecsGiveKfdAndRenderNodesButNoHostLibraries) {
  NodeInfo n;
  n.gpus.push_back(AmdGpu(0, "0x1a2b", "0000:c1:00.0"));
  n.amd =
      DriverInfo{"6.0.2", "6.0", {"/opt/rocm-6.0.2/lib/libamdhip64.so.6.0.60002"}, {"/dev/kfd"}};
  CdiOptions o;
  o.hook_path = "/usr/local/bin/gpupool";
  o.driver_files = {"/usr/bin/nvidia-smi"};
  const Json spec = Spec(n, o);
  EXPECT_EQ(spec["containerEdits"]["deviceNodes"][0]["path"], "/dev/kfd");
  const Json& nodes = (*Device(spec, "0"))["containerEdits"]["deviceNodes"];
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[1]["path"], "/dev/dri/renderD128");
  EXPECT_FALSE(spec["containerEdits"].contains("mounts"));
  EXPECT_FALSE(spec["containerEdits"].contains("hooks"));
}

}  // namespace
}  // namespace gpupool::gpu
