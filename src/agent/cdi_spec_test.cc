// The agent's CDI spec on a host built in a temporary directory: tools, firmware and
// /proc under a stand-in host root, device nodes under a stand-in /dev.
#include "agent/cdi_spec.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/file_util.h"
#include "common/json.h"
#include "envcheck/elf_file.h"

namespace gpupool::agent {
namespace {

namespace fs = std::filesystem;

// Not a directory any machine has, so the library is missing on every host.
const char kLib[] = "/usr/lib/gpupool-test-no-such-dir/libcuda.so.550.54.15";

class CdiSpecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpupool-cdi-spec-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    dev_ = dir_ + "/dev";
    host_ = dir_ + "/host";
    fs::create_directories(dev_);
    fs::create_directories(host_ + "/proc");
    // The spec writer checks only that host paths exist: plain files stand in for nodes.
    for (const char* n : {"nvidia0", "nvidiactl"}) std::ofstream(dev_ + "/" + n) << "";
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  gpu::NodeInfo Node() const {
    gpu::NodeInfo n;
    n.hostname = "test";
    n.nvidia = gpu::DriverInfo{"550.54.15", "12.4", {kLib}, {"/dev/nvidiactl"}};
    gpu::GpuInfo g;
    g.vendor = gpu::Vendor::kNvidia;
    g.index = 0;
    g.uuid = "GPU-11111111-2222-3333-4444-555555555555";
    g.device_nodes = {"/dev/nvidia0"};
    n.gpus.push_back(g);
    return n;
  }

  CdiSpecOptions Options() const {
    CdiSpecOptions o;
    o.kind = "gpupool-test.example/gpu";
    o.dev_root = dev_;
    o.cdi_dir = dir_ + "/cdi";
    o.hook_path = "/usr/local/bin/gpupool";
    o.stand_in_root = dir_ + "/stand-in";
    o.host_root = host_;
    return o;
  }

  void Executable(const std::string& path) {
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path) << "#!/bin/sh\n";
    fs::permissions(path, fs::perms(0755));
  }

  std::string dir_;
  std::string dev_;
  std::string host_;
};

// Issue 15 A.1, "include the tools and nodes CUDA needs": nvidia-smi and the other
// tools NVIDIA's spec mounts, and the driver's GSP firmware.
TEST_F(CdiSpecTest, StockCudaImagesGetTheDriversToolsAndFirmware) {
  Executable(host_ + "/usr/bin/nvidia-smi");
  Executable(host_ + "/bin/nvidia-debugdump");
  Executable(host_ + "/usr/bin/nvidia-cuda-mps-control");
  std::ofstream(host_ + "/usr/bin/nvidia-persistenced") << "not executable";
  fs::create_directories(host_ + "/lib/firmware/nvidia/550.54.15");
  fs::create_directories(host_ + "/lib/firmware/nvidia/535.104.05");
  for (const char* f : {"gsp_ga10x.bin", "gsp_tu10x.bin", "README"}) {
    std::ofstream(host_ + "/lib/firmware/nvidia/550.54.15/" + f) << "fw";
  }
  std::ofstream(host_ + "/lib/firmware/nvidia/535.104.05/gsp_ga10x.bin") << "another driver's";
  EXPECT_EQ(FindNvidiaDriverFiles("550.54.15", host_),
            (std::vector<std::string>{"/bin/nvidia-debugdump",
                                      "/lib/firmware/nvidia/550.54.15/gsp_ga10x.bin",
                                      "/lib/firmware/nvidia/550.54.15/gsp_tu10x.bin",
                                      "/usr/bin/nvidia-cuda-mps-control", "/usr/bin/nvidia-smi"}));
  // A version that could walk out of the firmware directory is not used in a path.
  EXPECT_EQ(FindNvidiaDriverFiles("../nvidia/550.54.15", host_).size(), 3u);

  // In the spec: mounted read-only from the host root, beside the libraries.
  gpu::NodeInfo node = Node();
  fs::create_directories(host_ + fs::path(kLib).parent_path().string());
  std::ofstream(host_ + kLib) << "lib";
  Result<gpu::CdiOptions> cdi = HostCdiOptions(&node, Options());
  ASSERT_TRUE(cdi.ok()) << cdi.status().message();
  EXPECT_EQ(cdi->driver_files.size(), 5u);
  EXPECT_EQ(cdi->host_file_root, host_);
  EXPECT_EQ(cdi->hook_path, "/usr/local/bin/gpupool");
}

// Issue 15 A.1, "/dev/nvidia-uvm ... missing": a loaded nvidia-uvm module whose nodes
// no CUDA program has created yet gets them, and the spec names them.
TEST_F(CdiSpecTest, StockCudaImagesGetTheUnifiedMemoryNodes) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (mknod)";
  std::ofstream(host_ + "/proc/devices") << "Character devices:\n  1 mem\n195 nvidia-frontend\n"
                                            "508 nvidia-uvm\n\nBlock devices:\n509 nvidia-uvm\n";
  gpu::NodeInfo node = Node();
  std::vector<std::string> notes;
  Result<gpu::CdiOptions> cdi = HostCdiOptions(&node, Options(), &notes);
  ASSERT_TRUE(cdi.ok()) << cdi.status().message();
  struct stat st;
  ASSERT_EQ(::stat((dev_ + "/nvidia-uvm").c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  EXPECT_EQ(major(st.st_rdev), 508u);
  EXPECT_EQ(minor(st.st_rdev), 0u);
  EXPECT_EQ(st.st_mode & 0777, 0666u);
  ASSERT_EQ(::stat((dev_ + "/nvidia-uvm-tools").c_str(), &st), 0);
  EXPECT_EQ(minor(st.st_rdev), 1u);
  EXPECT_EQ(
      node.nvidia->control_nodes,
      (std::vector<std::string>{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}));
  EXPECT_EQ(notes.size(), 2u);
}

TEST_F(CdiSpecTest, WithoutTheUvmModuleTheAgentSaysWhatToDo) {
  std::ofstream(host_ + "/proc/devices") << "Character devices:\n195 nvidia-frontend\n";
  const std::vector<std::string> notes = EnsureNvidiaUvmNodes(dev_, host_);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("modprobe nvidia-uvm"), std::string::npos) << notes[0];
  EXPECT_FALSE(fs::exists(dev_ + "/nvidia-uvm"));
}

// Issue 15 A.1, "fake nodes used with --dev-root also get stand-in libraries": the
// spec mounts stand-ins (real shared objects with the driver's SONAMEs) at the paths the
// node file names, instead of host files that do not exist.
TEST_F(CdiSpecTest, FakeNodeWithDevRootGetsStandInLibraries) {
  CdiSpecOptions o = Options();
  o.fake_node = true;
  std::vector<std::string> notes;
  Result<std::string> path = WriteNodeCdiSpec(Node(), o, &notes);
  ASSERT_TRUE(path.ok()) << path.status().message();
  EXPECT_EQ(*path, dir_ + "/cdi/gpupool-gpupool-test.example_gpu.json");
  Result<Json> spec = ReadJsonFile(*path);
  ASSERT_TRUE(spec.ok());
  const Json& edits = (*spec)["containerEdits"];
  ASSERT_EQ(edits["mounts"].size(), 1u);
  EXPECT_EQ(edits["mounts"][0]["containerPath"], kLib);
  const std::string stand_in = dir_ + "/stand-in" + kLib;
  EXPECT_EQ(edits["mounts"][0]["hostPath"], stand_in);
  EXPECT_EQ(edits["hooks"][0]["path"], "/usr/local/bin/gpupool");
  EXPECT_EQ(edits["hooks"][0]["args"],
            Json::parse(R"(["gpupool", "cdi-hook", "--library", ")" + std::string(kLib) + "\"]"));
  Result<std::string> bytes = ReadFileToString(stand_in);
  ASSERT_TRUE(bytes.ok());
  Result<envcheck::ElfFile> elf = envcheck::ParseElf(
      {reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size()}, stand_in);
  ASSERT_TRUE(elf.ok()) << elf.status().message();
  EXPECT_EQ(elf->soname, "libcuda.so.1");
  // A fake node's driver is not this host's: no tools, no firmware, no nodes created.
  EXPECT_FALSE(fs::exists(dev_ + "/nvidia-uvm"));
  EXPECT_EQ(notes.size(), 1u);
}

// Before, such a spec was written and every GPU container then failed with "command 'sh'
// not found in image"; now no spec is written and the agent says which file is missing.
TEST_F(CdiSpecTest, MissingDriverLibraryOfARealNodeIsNamed) {
  Result<std::string> path = WriteNodeCdiSpec(Node(), Options());
  ASSERT_FALSE(path.ok());
  EXPECT_EQ(path.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(path.status().message().find(host_ + kLib), std::string::npos)
      << path.status().message();
  EXPECT_FALSE(fs::exists(dir_ + "/cdi"));
}

TEST_F(CdiSpecTest, MissingDeviceNodeIsNamed) {
  fs::remove(dev_ + "/nvidia0");
  CdiSpecOptions o = Options();
  o.fake_node = true;
  Result<std::string> path = WriteNodeCdiSpec(Node(), o);
  ASSERT_FALSE(path.ok());
  EXPECT_NE(path.status().message().find(dev_ + "/nvidia0"), std::string::npos)
      << path.status().message();
}

TEST_F(CdiSpecTest, SpecPathsNameTheKind) {
  EXPECT_EQ(CdiSpecPath("/var/run/cdi", "gpupool.local/gpu"),
            "/var/run/cdi/gpupool-gpupool.local_gpu.json");
}

}  // namespace
}  // namespace gpupool::agent
