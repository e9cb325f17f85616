// The CDI hook's pieces without a container runtime: the OCI state as a runtime writes it,
// and a container root file system built in a temporary directory.
#include "agent/cdi_hook.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/file_util.h"
#include "common/subprocess.h"
#include "gpu/fake/stand_in_library.h"

namespace gpupool::agent {
namespace {

namespace fs = std::filesystem;

const char kCudaDir[] = "/usr/lib/x86_64-linux-gnu";
const char kCuda[] = "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15";
const char kNvml[] = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15";

class CdiHookTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpupool-cdi-hook-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    root_ = dir_ + "/bundle/rootfs";
    fs::create_directories(root_ + "/etc");
    fs::create_directories(root_ + kCudaDir);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // A bundle whose config.json names `root_path`, and the state a runtime would write.
  std::string State(const std::string& root_path) {
    std::ofstream(dir_ + "/bundle/config.json")
        << R"({"ociVersion": "1.0.2", "root": {"path": ")" << root_path << R"("}})";
    return R"({"ociVersion": "1.0.2", "id": "c1", "status": "creating", "pid": 1, "bundle": ")" +
           dir_ + R"(/bundle", "annotations": {}})";
  }

  static bool CanChroot() { return ::geteuid() == 0 && ::access("/sbin/ldconfig", X_OK) == 0; }

  std::string dir_;
  std::string root_;
};

TEST_F(CdiHookTest, RootComesFromTheBundlesConfig) {
  Result<std::string> root = ContainerRootFromState(State("rootfs"));  // relative to the bundle
  ASSERT_TRUE(root.ok()) << root.status().message();
  EXPECT_EQ(*root, fs::canonical(root_).string());
  root = ContainerRootFromState(State(root_));
  ASSERT_TRUE(root.ok()) << root.status().message();
  EXPECT_EQ(*root, fs::canonical(root_).string());
}

TEST_F(CdiHookTest, MalformedStateGivesAClearError) {
  struct Case {
    std::string state;
    StatusCode code;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"", StatusCode::kInvalidArgument, "container state"},
      {"not json", StatusCode::kInvalidArgument, "container state"},
      {"[1, 2]", StatusCode::kInvalidArgument, "no \"bundle\""},
      {R"({"bundle": 7})", StatusCode::kInvalidArgument, "no \"bundle\""},
      {R"({"bundle": "relative/dir"})", StatusCode::kInvalidArgument, "not an absolute path"},
      {R"({"bundle": "/nonexistent/gpupool-bundle"})", StatusCode::kNotFound, "OCI config"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.state);
    Result<std::string> root = ContainerRootFromState(c.state);
    ASSERT_FALSE(root.ok());
    EXPECT_EQ(root.status().code(), c.code) << root.status().message();
    EXPECT_NE(root.status().message().find(c.says), std::string::npos) << root.status().message();
  }
}

TEST_F(CdiHookTest, BadConfigsAndTheHostRootAreRefused) {
  const std::string state = State("rootfs");
  std::ofstream(dir_ + "/bundle/config.json") << R"({"root": {}})";
  EXPECT_EQ(ContainerRootFromState(state).status().code(), StatusCode::kInvalidArgument);
  std::ofstream(dir_ + "/bundle/config.json") << "{\"root\": ";
  EXPECT_EQ(ContainerRootFromState(state).status().code(), StatusCode::kInvalidArgument);
  std::ofstream(dir_ + "/bundle/config.json") << R"({"root": {"path": "missing"}})";
  EXPECT_EQ(ContainerRootFromState(state).status().code(), StatusCode::kNotFound);
  // The host's own root, also reached through "..": never the container's.
  Result<std::string> host = ContainerRootFromState(State("/"));
  EXPECT_EQ(host.status().code(), StatusCode::kFailedPrecondition) << host.status().message();
  host = ContainerRootFromState(State("../../../../../../../../.."));
  EXPECT_EQ(host.status().code(), StatusCode::kFailedPrecondition) << host.status().message();
}

// Issue 15 A.1, "stock CUDA images would not find the driver in a container": the hook
// links libcuda.so.1 and libnvidia-ml.so.1 to the mounted versioned libraries and puts
// them in the container's linker cache, where `ldconfig -p` (and so dlopen) finds them.
TEST_F(CdiHookTest, StockCudaImagesFindTheDriver_SonameLinksAndLinkerCache) {
  if (!CanChroot()) GTEST_SKIP() << "needs root and /sbin/ldconfig (ldconfig -r chroots)";
  ASSERT_TRUE(gpu::WriteStandInLibrary(root_ + kCuda).ok());
  ASSERT_TRUE(gpu::WriteStandInLibrary(root_ + kNvml).ok());
  Result<std::vector<std::string>> notes =
      UpdateContainerLinker(root_, CdiHookOptions{{kCuda, kNvml}, ""});
  ASSERT_TRUE(notes.ok()) << notes.status().message();
  EXPECT_TRUE(notes->empty()) << notes->front();

  std::error_code ec;
  EXPECT_EQ(fs::read_symlink(root_ + kCudaDir + "/libcuda.so.1", ec), "libcuda.so.550.54.15");
  EXPECT_EQ(fs::read_symlink(root_ + kCudaDir + "/libnvidia-ml.so.1", ec),
            "libnvidia-ml.so.550.54.15");
  // The image had no ld.so.conf: it gets the usual one, and the drop-in names the directory.
  EXPECT_EQ(ReadFileToString(root_ + "/etc/ld.so.conf").value_or(""),
            "include /etc/ld.so.conf.d/*.conf\n");
  const std::string drop_in =
      ReadFileToString(root_ + "/etc/ld.so.conf.d/00-gpupool-cdi.conf").value_or("");
  EXPECT_NE(drop_in.find(std::string(kCudaDir) + "\n"), std::string::npos) << drop_in;
  EXPECT_EQ(
      fs::status(root_ + "/etc/ld.so.conf.d/00-gpupool-cdi.conf").permissions() & fs::perms::all,
      fs::perms(0644));

  Result<CommandResult> cache =
      RunCommandCapture({"/sbin/ldconfig", "-p", "-C", root_ + "/etc/ld.so.cache"}, 30'000);
  ASSERT_TRUE(cache.ok() && cache->Succeeded()) << (cache.ok() ? cache->err : "");
  EXPECT_NE(cache->out.find("libcuda.so.1 (libc6,"), std::string::npos) << cache->out;
  EXPECT_NE(cache->out.find(") => " + std::string(kCudaDir) + "/libcuda.so.1\n"), std::string::npos)
      << cache->out;
  EXPECT_NE(cache->out.find("libnvidia-ml.so.1"), std::string::npos) << cache->out;

  // A second start of the same container (podman restart) finds everything in place.
  notes = UpdateContainerLinker(root_, CdiHookOptions{{kCuda, kNvml}, ""});
  ASSERT_TRUE(notes.ok()) << notes.status().message();
}

TEST_F(CdiHookTest, ADriverCopyBakedIntoTheImageIsReplacedByTheLink) {
  if (!CanChroot()) GTEST_SKIP() << "needs root and /sbin/ldconfig (ldconfig -r chroots)";
  ASSERT_TRUE(gpu::WriteStandInLibrary(root_ + kCuda).ok());
  std::ofstream(root_ + kCudaDir + "/libcuda.so.1") << "an old driver's libcuda\n";
  Result<std::vector<std::string>> notes =
      UpdateContainerLinker(root_, CdiHookOptions{{kCuda}, ""});
  ASSERT_TRUE(notes.ok()) << notes.status().message();
  std::error_code ec;
  EXPECT_EQ(fs::read_symlink(root_ + kCudaDir + "/libcuda.so.1", ec), "libcuda.so.550.54.15");
}

TEST_F(CdiHookTest, FilesThatAreNotLibrariesAreNotedAndSkipped) {
  if (!CanChroot()) GTEST_SKIP() << "needs root and /sbin/ldconfig (ldconfig -r chroots)";
  std::ofstream(root_ + kCuda) << "not an ELF file\n";
  Result<std::vector<std::string>> notes =
      UpdateContainerLinker(root_, CdiHookOptions{{kCuda, "/usr/lib/missing/libx.so.1"}, ""});
  ASSERT_TRUE(notes.ok()) << notes.status().message();
  ASSERT_EQ(notes->size(), 2u);
  EXPECT_NE((*notes)[0].find("not a shared library with a SONAME"), std::string::npos);
  EXPECT_NE((*notes)[1].find("skipped /usr/lib/missing/libx.so.1"), std::string::npos);
  EXPECT_FALSE(fs::exists(fs::symlink_status(root_ + kCudaDir + "/libcuda.so.1")));
}

// The image's author controls every path in the root: absolute links to host directories
// must resolve inside the root, so the hook never writes a host file.
TEST_F(CdiHookTest, LinksInTheImageCannotPointTheHookAtHostFiles) {
  const std::string outside = dir_ + "/host";
  fs::create_directories(outside + "/lib");
  fs::create_directories(outside + "/etc");
  ASSERT_TRUE(gpu::WriteStandInLibrary(outside + "/lib/libcuda.so.550.54.15").ok());
  fs::create_directories(root_ + "/usr");
  fs::create_symlink(outside + "/lib", root_ + "/usr/lib64");  // absolute, to the host
  fs::create_symlink("../../../../../../../../../../" + outside + "/lib", root_ + "/usr/libdots");
  fs::remove_all(root_ + "/etc");
  fs::create_symlink(outside + "/etc", root_ + "/etc");
  Result<std::vector<std::string>> notes = UpdateContainerLinker(
      root_,
      CdiHookOptions{{"/usr/lib64/libcuda.so.550.54.15", "/usr/libdots/libcuda.so.550.54.15"},
                     "/nonexistent/ldconfig"});
  ASSERT_TRUE(notes.ok()) << notes.status().message();
  EXPECT_FALSE(fs::exists(fs::symlink_status(outside + "/lib/libcuda.so.1")));
  EXPECT_FALSE(fs::exists(outside + "/etc/ld.so.conf.d"));
  EXPECT_FALSE(fs::exists(outside + "/etc/ld.so.conf"));
  ASSERT_EQ(notes->size(), 3u);
  EXPECT_NE(notes->back().find("no /etc"), std::string::npos) << notes->back();
}

TEST_F(CdiHookTest, BadArgumentsAndAMissingLdconfigAreErrors) {
  EXPECT_EQ(
      UpdateContainerLinker(root_, CdiHookOptions{{"relative/libcuda.so.1"}, ""}).status().code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(UpdateContainerLinker(root_, CdiHookOptions{{"/usr/lib/.."}, ""}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(UpdateContainerLinker(dir_ + "/missing", CdiHookOptions{}).status().code(),
            StatusCode::kNotFound);
  Result<std::vector<std::string>> r =
      UpdateContainerLinker(root_, CdiHookOptions{{}, "/nonexistent/ldconfig"});
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("/nonexistent/ldconfig"), std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace gpupool::agent
