#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "envcheck/cuda_compat.h"
#include "envcheck/device_code.h"
#include "envcheck/elf_file.h"
#include "envcheck/inspector.h"

namespace gpupool::envcheck {
namespace {

namespace fs = std::filesystem;

std::string Fixture(const std::string& name) {
  return std::string(GPUPOOL_SOURCE_DIR) + "/tests/fixtures/envcheck/" + name;
}

std::vector<std::string> Codes(const BinaryFound& b) {
  std::vector<std::string> out;
  for (const CudaCode& c : b.cuda) out.push_back(CudaCodeName(c));
  std::sort(out.begin(), out.end());
  return out;
}

TEST(EnvcheckFixtureTest, ReportsEachNvccBuildExactly) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> expected = {
      {"sm75.so", {"sm_75"}},       {"sm80.so", {"sm_80"}},
      {"sm90.so", {"sm_90"}},       {"sm90a.so", {"sm_90a"}},
      {"ptx80.so", {"compute_80"}}, {"mix.so", {"compute_90", "sm_80", "sm_90"}},
      {"sm100f.so", {"sm_100f"}},
  };
  for (const auto& [file, codes] : expected) {
    Result<BinaryFound> b = InspectElfFile(Fixture(file));
    ASSERT_TRUE(b.ok()) << file << ": " << b.status().ToString();
    EXPECT_EQ(Codes(*b), codes) << file;
  }
  Result<BinaryFound> ptx = InspectElfFile(Fixture("ptx80.so"));
  ASSERT_TRUE(ptx.ok());
  ASSERT_EQ(ptx->cuda.size(), 1u);
  EXPECT_EQ(ptx->cuda[0].ptx_major, 9);  // built by CUDA 13.0
  EXPECT_EQ(ptx->cuda[0].ptx_minor, 0);
}

class TreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("gpupool-env-" + std::to_string(getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "usr/lib");
    fs::create_directories(root_ / "opt/app");
  }
  void TearDown() override { fs::remove_all(root_); }
  void Touch(const std::string& rel) { std::ofstream(root_ / rel) << "not an ELF"; }
  fs::path root_;
};

TEST_F(TreeTest, RuntimeDecidesTheDriverAndBakedDriversAreFlagged) {
  Touch("usr/lib/libcudart.so.12.4.127");
  Touch("usr/lib/libcudnn.so.9.1.0");
  Touch("usr/lib/libnccl.so.2.21.5");
  Touch("usr/lib/libcuda.so.550.54.14");
  fs::copy_file(Fixture("mix.so"), root_ / "opt/app/libkernels.so");
  Result<EnvReport> r = InspectTree(root_.string());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->cuda_version, "12.4");
  EXPECT_EQ(r->min_driver, "550.54.14");
  EXPECT_EQ(r->min_driver_minor_compat, "525.60.13");
  EXPECT_EQ(r->sass, (std::vector<std::string>{"sm_80", "sm_90"}));
  EXPECT_EQ(r->ptx, (std::vector<std::string>{"compute_90"}));
  ASSERT_EQ(r->binaries.size(), 1u);
  EXPECT_EQ(r->binaries[0].path, "opt/app/libkernels.so");
  ASSERT_EQ(r->warnings.size(), 1u);
  EXPECT_NE(r->warnings[0].find("usr/lib/libcuda.so.550.54.14 is a host driver library"),
            std::string::npos);
  bool cudnn = false;
  for (const auto& l : r->libraries) cudnn = cudnn || (l.name == "cudnn" && l.version == "9.1.0");
  EXPECT_TRUE(cudnn);

  NodeOffer old{"b07", "535.104.05", "12.2", {{8, 0}}, {}};
  Status s = CheckNode(*r, old);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("needs CUDA 12.4 -> driver >= 550.54.14; node b07 has 535.104.05"),
            std::string::npos)
      << s.message();
  EXPECT_TRUE(CheckNode(*r, {"a01", "550.54.15", "12.4", {{8, 0}}, {}}).ok());
  // Right driver, but a Turing GPU: no SASS for 7.5 and PTX 9.0 needs >= 9.0.
  Status arch = CheckNode(*r, {"t01", "580.65.06", "13.0", {{7, 5}}, {}});
  EXPECT_NE(arch.message().find("compute capability 7.5"), std::string::npos) << arch.message();
  EXPECT_FALSE(CheckNode(*r, {"amd1", "", "", {}, {"gfx90a"}}).ok());
}

TEST_F(TreeTest, WithoutARuntimeThePtxVersionDecides) {
  fs::copy_file(Fixture("ptx80.so"), root_ / "opt/app/k.so");
  Result<EnvReport> r = InspectTree(root_.string());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->cuda_version, "13.0");
  EXPECT_EQ(r->min_driver, "580.65.06");
  EXPECT_NE(r->needs_from.find("PTX ISA 9.0"), std::string::npos);
}

TEST_F(TreeTest, MissingRootIsNotFound) {
  EXPECT_EQ(InspectTree((root_ / "nope").string()).status().code(), StatusCode::kNotFound);
}

TEST(CompatTest, TableAndRules) {
  EXPECT_FALSE(CompatSource().empty());
  EXPECT_EQ(DriverNeedFor("12.4")->min_driver, "550.54.14");
  EXPECT_EQ(DriverNeedFor("12.4.127")->min_driver, "550.54.14");
  EXPECT_EQ(DriverNeedFor("12.7")->min_driver, "560.28.03");  // nearest older release
  EXPECT_EQ(DriverNeedFor("13.0")->min_driver, "580.65.06");
  EXPECT_EQ(DriverNeedFor("11.8")->min_driver_minor_compat, "450.80.02");
  EXPECT_EQ(DriverNeedFor("14.0").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(DriverNeedFor("twelve").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CudaForPtx(8, 4), "12.4");
  EXPECT_EQ(CudaForPtx(9, 0), "13.0");
  EXPECT_LT(*Version::Parse("550.54.14"), *Version::Parse("550.100"));

  CudaCode sm80{CudaCode::Kind::kSass, 80};
  EXPECT_TRUE(RunsOn(sm80, 8, 0));
  EXPECT_TRUE(RunsOn(sm80, 8, 6));
  EXPECT_FALSE(RunsOn(sm80, 9, 0));
  EXPECT_FALSE(RunsOn(sm80, 7, 5));
  CudaCode sm90a{CudaCode::Kind::kSass, 90, "a"};
  EXPECT_TRUE(RunsOn(sm90a, 9, 0));
  EXPECT_FALSE(RunsOn(sm90a, 10, 0));
  CudaCode ptx80{CudaCode::Kind::kPtx, 80};
  EXPECT_TRUE(RunsOn(ptx80, 9, 0));
  EXPECT_TRUE(RunsOn(ptx80, 12, 0));
  EXPECT_FALSE(RunsOn(ptx80, 7, 5));
}

std::vector<uint8_t> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(MalformedTest, TruncatedFilesGiveErrorsNotCrashes) {
  const std::vector<uint8_t> full = ReadAll(Fixture("mix.so"));
  ASSERT_GT(full.size(), 1000u);
  int errors = 0;
  for (size_t len = 0; len < full.size(); len += 97) {
    std::span<const uint8_t> cut(full.data(), len);
    Result<ElfFile> elf = ParseElf(cut, "cut.so");
    if (!elf.ok()) {
      ++errors;
      EXPECT_FALSE(elf.status().message().empty());
    }
  }
  EXPECT_GT(errors, 10);
  Result<ElfFile> header_only = ParseElf(std::span<const uint8_t>(full.data(), 64), "h.so");
  ASSERT_FALSE(header_only.ok());
  EXPECT_NE(header_only.status().message().find("truncated"), std::string::npos);
}

TEST(MalformedTest, CorruptFatbinariesGiveErrorsNotCrashes) {
  const std::vector<uint8_t> full = ReadAll(Fixture("mix.so"));
  Result<ElfFile> elf = ParseElf(full, "mix.so");
  ASSERT_TRUE(elf.ok());
  const ElfSection* fb = elf->Find(".nv_fatbin");
  ASSERT_NE(fb, nullptr);
  const std::span<const uint8_t> section = SectionBytes(full, *fb);
  std::vector<uint8_t> bytes(section.begin(), section.end());
  // Every truncation point of the section.
  for (size_t len = 0; len <= bytes.size(); len += 7) {
    (void)ParseFatbinary(std::span<const uint8_t>(bytes.data(), len), "cut");
  }
  // Seeded random corruption of the headers and payload.
  std::mt19937 rng(42);
  int rejected = 0;
  for (int round = 0; round < 3000; ++round) {
    std::vector<uint8_t> m = bytes;
    for (int k = 0; k < 4; ++k)
      m[rng() % std::min<size_t>(m.size(), 256)] = static_cast<uint8_t>(rng());
    if (!ParseFatbinary(m, "mutant").ok()) ++rejected;
  }
  EXPECT_GT(rejected, 0);
  std::vector<uint8_t> bad_magic = bytes;
  bad_magic[0] ^= 0xff;
  Result<std::vector<CudaCode>> r = ParseFatbinary(bad_magic, "x.so .nv_fatbin");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(
      r.status().message(),
      "x.so .nv_fatbin: fatbinary at byte 0: bad magic; this is not a CUDA fatbinary container");
}

std::vector<uint8_t> Bundle(const std::vector<std::string>& targets, bool truncate) {
  std::string b = "__CLANG_OFFLOAD_BUNDLE__";
  auto put64 = [&](uint64_t v) { b.append(reinterpret_cast<const char*>(&v), 8); };
  put64(targets.size());
  const size_t header = b.size() + targets.size() * 24 + [&] {
    size_t n = 0;
    for (auto& t : targets) n += t.size();
    return n;
  }();
  for (size_t i = 0; i < targets.size(); ++i) {
    put64(header);
    put64(0);
    put64(targets[i].size());
    b += targets[i];
  }
  if (truncate) b.resize(b.size() - 5);
  return {b.begin(), b.end()};
}

TEST(OffloadBundleTest, TargetsAndErrors) {
  auto ok = ParseOffloadBundles(
      Bundle({"host-x86_64-unknown-linux-gnu-", "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+",
              "hipv4-amdgcn-amd-amdhsa--gfx1100"},
             false),
      "b");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  ASSERT_EQ(ok->size(), 3u);
  EXPECT_EQ(GfxTargetOf((*ok)[0]), "");
  EXPECT_EQ(GfxTargetOf((*ok)[1]), "gfx90a:xnack+");
  EXPECT_EQ(GfxTargetOf((*ok)[2]), "gfx1100");
  auto bad = ParseOffloadBundles(Bundle({"hipv4-amdgcn-amd-amdhsa--gfx90a"}, true), "b");
  EXPECT_FALSE(bad.ok());
}

}  // namespace
}  // namespace gpupool::envcheck
