#include "gpu/fake/stand_in_library.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <span>

#include "common/file_util.h"
#include "common/subprocess.h"
#include "envcheck/elf_file.h"

namespace gpupool::gpu {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/gpupool-stand-in-XXXXXX";
    path_ = ::mkdtemp(tmpl) != nullptr ? tmpl : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(StandInLibraryTest, SonamesFollowTheDriversNaming) {
  EXPECT_EQ(StandInSoname("libcuda.so.550.54.15"), "libcuda.so.1");
  EXPECT_EQ(StandInSoname("libnvidia-ml.so.580.95.05"), "libnvidia-ml.so.1");
  EXPECT_EQ(StandInSoname("libnvidia-nvvm.so.550.54.15"), "libnvidia-nvvm.so.4");
  EXPECT_EQ(StandInSoname("libamdhip64.so.6.0.60002"), "libamdhip64.so.6");
  EXPECT_EQ(StandInSoname("libhsa-runtime64.so.1.12.60002"), "libhsa-runtime64.so.1");
  EXPECT_EQ(StandInSoname("libfoo.so"), "libfoo.so");
  EXPECT_EQ(StandInSoname("libcuda.so.1"), "libcuda.so.1");
}

TEST(StandInLibraryTest, BadSonamesAreRefused) {
  EXPECT_EQ(StandInLibrary("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(StandInLibrary("../libcuda.so.1").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(StandInLibrary(std::string("lib\0x.so", 8)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(StandInLibrary(std::string(256, 'a')).status().code(), StatusCode::kInvalidArgument);
}

// Issue 15 A.1, "fake nodes used with --dev-root also get stand-in libraries": what the
// agent writes for a fake node is a real shared object with the SONAME a driver's has.
TEST(StandInLibraryTest, FakeNodeStandInLibraryLoadsAndCarriesItsSoname) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string path = dir.path() + "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15";
  ASSERT_TRUE(WriteStandInLibrary(path).ok());
  EXPECT_EQ(fs::status(path).permissions() & fs::perms::all, fs::perms(0644));

  Result<std::string> bytes = ReadFileToString(path);
  ASSERT_TRUE(bytes.ok());
  Result<envcheck::ElfFile> elf = envcheck::ParseElf(Bytes(*bytes), path);
  ASSERT_TRUE(elf.ok()) << elf.status().message();
  EXPECT_EQ(elf->soname, "libcuda.so.1");
  EXPECT_EQ(elf->type, 3);  // ET_DYN

  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << ::dlerror();
  EXPECT_EQ(::dlsym(handle, "cuInit"), nullptr);  // a stand-in, not a driver
  ::dlclose(handle);
}

TEST(StandInLibraryTest, LdconfigLinksTheSonameToTheStandIn) {
  const char* ldconfig = ::access("/sbin/ldconfig", X_OK) == 0 ? "/sbin/ldconfig" : nullptr;
  if (ldconfig == nullptr) GTEST_SKIP() << "no /sbin/ldconfig on this machine (not glibc?)";
  TempDir dir;
  ASSERT_TRUE(WriteStandInLibrary(dir.path() + "/libnvidia-ml.so.550.54.15").ok());
  // -n: only the named directory, links only, no cache: needs no root.
  Result<CommandResult> r = RunCommandCapture({ldconfig, "-n", dir.path()}, 30'000);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_TRUE(r->Succeeded()) << r->err;
  std::error_code ec;
  EXPECT_EQ(fs::read_symlink(dir.path() + "/libnvidia-ml.so.1", ec).string(),
            "libnvidia-ml.so.550.54.15")
      << ec.message();
}

}  // namespace
}  // namespace gpupool::gpu
