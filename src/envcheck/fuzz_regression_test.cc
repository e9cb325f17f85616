// Regression tests for what fuzzing the envcheck parsers found (fuzz/README.md), each on
// a small input built here; the fuzzer's own inputs are replayed from
// fuzz/regressions/ by the fuzz_replay_* tests.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "envcheck/device_code.h"
#include "envcheck/elf_file.h"
#include "envcheck/inspector.h"

namespace gpupool::envcheck {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t kShtNull = 0;
constexpr uint32_t kShtProgbits = 1;
constexpr uint32_t kShtStrtab = 3;
constexpr uint32_t kShtDynamic = 6;

template <typename T>
void Put(std::vector<uint8_t>* b, size_t off, T v) {
  if (b->size() < off + sizeof(T)) b->resize(off + sizeof(T));
  std::memcpy(b->data() + off, &v, sizeof(T));
}

struct RawSection {
  uint32_t name = 0;
  uint32_t type = kShtNull;
  uint64_t offset = 0;
  uint64_t size = 0;
  uint32_t link = 0;
};

// An ELF64 little-endian file: the header, the section headers right after it (at 64),
// then `data` at offset DataOffset(n) for n sections.
size_t DataOffset(size_t sections) { return 64 + 64 * sections; }
std::vector<uint8_t> Elf(const std::vector<RawSection>& sections, uint16_t shstrndx,
                         const std::vector<uint8_t>& data) {
  std::vector<uint8_t> b(DataOffset(sections.size()));
  const uint8_t ident[] = {0x7f, 'E', 'L', 'F', 2, 1, 1};
  std::memcpy(b.data(), ident, sizeof(ident));
  Put<uint16_t>(&b, 16, 3);   // ET_DYN
  Put<uint16_t>(&b, 18, 62);  // EM_X86_64
  Put<uint64_t>(&b, 40, 64);  // e_shoff
  Put<uint16_t>(&b, 58, 64);  // e_shentsize
  Put<uint16_t>(&b, 60, static_cast<uint16_t>(sections.size()));
  Put<uint16_t>(&b, 62, shstrndx);
  for (size_t i = 0; i < sections.size(); ++i) {
    const size_t h = 64 + 64 * i;
    Put(&b, h, sections[i].name);
    Put(&b, h + 4, sections[i].type);
    Put(&b, h + 24, sections[i].offset);
    Put(&b, h + 32, sections[i].size);
    Put(&b, h + 40, sections[i].link);
  }
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

// A fatbinary container of 64-byte entries without payload.
struct Entry {
  uint16_t kind;  // 1 PTX, 2 SASS
  uint32_t arch;
  uint32_t version = 0;
};
std::vector<uint8_t> Fatbinary(const std::vector<Entry>& entries) {
  std::vector<uint8_t> b(16 + 64 * entries.size());
  Put<uint32_t>(&b, 0, 0xBA55ED50);
  Put<uint16_t>(&b, 4, 1);
  Put<uint16_t>(&b, 6, 16);
  Put<uint64_t>(&b, 8, 64 * entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const size_t e = 16 + 64 * i;
    Put<uint16_t>(&b, e, entries[i].kind);
    Put<uint32_t>(&b, e + 4, 64);
    Put<uint32_t>(&b, e + 24, entries[i].version);
    Put<uint32_t>(&b, e + 28, entries[i].arch);
  }
  return b;
}

// Found by the elf_inspect fuzzer (ASan: SEGV in strnlen): e_shstrndx named a SHT_NULL
// section, whose offset and size are not checked, and ParseElf read names from there.
TEST(FuzzRegressionTest, SectionNameTableThatIsAnOutOfBoundsNullSection) {
  const std::vector<uint8_t> b =
      Elf({{}, {.name = 1, .type = kShtNull, .offset = uint64_t{1} << 40, .size = 1 << 20}}, 1, {});
  Result<ElfFile> elf = ParseElf(b, "x.so");
  ASSERT_TRUE(elf.ok()) << elf.status().ToString();
  ASSERT_EQ(elf->sections.size(), 2u);
  EXPECT_EQ(elf->sections[1].name, "");
  Result<BinaryFound> found = InspectElfBytes(b, "x.so");
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_TRUE(found->cuda.empty());
  EXPECT_EQ(found->path, "x.so");
}

// The same hole, reached through the string table of the dynamic section.
TEST(FuzzRegressionTest, DynamicStringTableThatIsAnOutOfBoundsNullSection) {
  std::vector<uint8_t> dynamic;
  Put<int64_t>(&dynamic, 0, 14);  // DT_SONAME
  Put<uint64_t>(&dynamic, 8, 5);
  Put<int64_t>(&dynamic, 16, 0);  // DT_NULL
  Put<uint64_t>(&dynamic, 24, 0);
  const std::vector<uint8_t> b =
      Elf({{},
           {.type = kShtDynamic, .offset = DataOffset(3), .size = dynamic.size(), .link = 2},
           {.type = kShtNull, .offset = ~uint64_t{0} - 8, .size = 1 << 20}},
          0, dynamic);
  Result<ElfFile> elf = ParseElf(b, "x.so");
  ASSERT_TRUE(elf.ok()) << elf.status().ToString();
  EXPECT_EQ(elf->soname, "");
}

// Found by the fatbinary fuzzer: an entry for sm_1 was accepted, but "sm_1" does not
// parse back (ParseCudaCodeName wants two to four digits), so CheckNode, which works on
// the names, silently dropped it; sm_10000 likewise.
TEST(FuzzRegressionTest, FatbinaryArchitecturesOutsideTwoToFourDigitsAreErrors) {
  for (uint32_t arch : {1u, 9u, 10'000u}) {
    Result<std::vector<CudaCode>> codes = ParseFatbinary(Fatbinary({{2, arch}}), "x.so");
    ASSERT_FALSE(codes.ok()) << arch;
    EXPECT_EQ(codes.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(codes.status().message().find("implausible architecture " + std::to_string(arch)),
              std::string::npos)
        << codes.status().message();
  }
  for (uint32_t arch : {10u, 9999u}) {
    Result<std::vector<CudaCode>> codes = ParseFatbinary(Fatbinary({{2, arch}}), "x.so");
    ASSERT_TRUE(codes.ok()) << codes.status().ToString();
    ASSERT_EQ(codes->size(), 1u);
    std::optional<CudaCode> back = ParseCudaCodeName(CudaCodeName((*codes)[0]));
    ASSERT_TRUE(back.has_value()) << arch;
    EXPECT_EQ(back->arch, static_cast<int>(arch));
  }
}

// Found in review while writing the targets (too large for the fuzzer's 64 KiB inputs):
// every section name was copied up to the end of an unterminated name table, so 4096
// sections named from a 1 MiB table cost 4 GiB.
TEST(FuzzRegressionTest, ManySectionsNamedFromOneUnterminatedTableStayCheap) {
  const size_t n = 4096;
  std::vector<RawSection> sections(n);
  sections[1] = {.type = kShtStrtab, .offset = DataOffset(n), .size = 1 << 20};
  const std::vector<uint8_t> b = Elf(sections, 1, std::vector<uint8_t>(1 << 20, 'a'));
  Result<ElfFile> elf = ParseElf(b, "x.so");
  ASSERT_TRUE(elf.ok()) << elf.status().ToString();
  ASSERT_EQ(elf->sections.size(), n);
  for (const ElfSection& s : elf->sections) EXPECT_EQ(s.name.size(), 256u);
}

// Found in review: every DT_SONAME entry copied its name again, and every dynamic
// section was walked, so 64 Ki entries naming a 1 MiB unterminated string cost 64 GiB of
// copying. Now the first dynamic section's first DT_SONAME counts, cut at 256 bytes.
TEST(FuzzRegressionTest, ManySonameEntriesStayCheap) {
  const size_t entries = 1 << 16;
  std::vector<uint8_t> data(16 * entries);
  for (size_t i = 0; i < entries; ++i) {
    Put<int64_t>(&data, 16 * i, 14);
    Put<uint64_t>(&data, 16 * i + 8, 0);
  }
  const size_t strings_at = data.size();
  data.resize(data.size() + (1 << 20), 'b');
  const size_t base = DataOffset(3);
  const std::vector<uint8_t> b =
      Elf({{},
           {.type = kShtDynamic, .offset = base, .size = 16 * entries, .link = 2},
           {.type = kShtStrtab, .offset = base + strings_at, .size = 1 << 20}},
          0, data);
  Result<ElfFile> elf = ParseElf(b, "x.so");
  ASSERT_TRUE(elf.ok()) << elf.status().ToString();
  EXPECT_EQ(elf->soname, std::string(256, 'b'));
}

// Found in review: thousands of .nv_fatbin section headers naming the same bytes made
// InspectElfBytes parse them once per header (time quadratic in the file's size). GPU
// code sections must not overlap; when they do, that is a clear error.
TEST(FuzzRegressionTest, OverlappingGpuCodeSectionsAreAnError) {
  const std::vector<uint8_t> fatbin = Fatbinary({{2, 80}});
  const std::string names = std::string("\0.nv_fatbin\0", 12);
  const size_t n = 2048;
  std::vector<RawSection> sections(n);
  sections[1] = {.name = 0, .type = kShtStrtab, .offset = DataOffset(n), .size = names.size()};
  for (size_t i = 2; i < n; ++i) {
    sections[i] = {.name = 1,
                   .type = kShtProgbits,
                   .offset = DataOffset(n) + names.size(),
                   .size = fatbin.size()};
  }
  std::vector<uint8_t> data(names.begin(), names.end());
  data.insert(data.end(), fatbin.begin(), fatbin.end());
  const std::vector<uint8_t> b = Elf(sections, 1, data);
  Result<BinaryFound> found = InspectElfBytes(b, "x.so");
  ASSERT_FALSE(found.ok());
  EXPECT_EQ(found.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(found.status().message().find("x.so: GPU code sections overlap"), std::string::npos)
      << found.status().message();

  // One such section is fine.
  const std::vector<uint8_t> one =
      Elf({{},
           {.type = kShtStrtab, .offset = DataOffset(3), .size = names.size()},
           {.name = 1,
            .type = kShtProgbits,
            .offset = DataOffset(3) + names.size(),
            .size = fatbin.size()}},
          1, data);
  found = InspectElfBytes(one, "x.so");
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  ASSERT_EQ(found->cuda.size(), 1u);
  EXPECT_EQ(CudaCodeName(found->cuda[0]), "sm_80");
}

// Found in review: codes were de-duplicated with a linear search per code, quadratic in a
// fatbinary's entries (a 4 MiB section holds 64 Ki of them).
TEST(FuzzRegressionTest, ManyDistinctCodesAreDeduplicatedQuickly) {
  std::vector<Entry> entries;
  for (uint32_t arch = 10; arch <= 9999; ++arch) {
    entries.push_back({2, arch});
    entries.push_back({1, arch, (8u << 16) | (arch % 7)});
  }
  entries.push_back({2, 80});  // a duplicate
  const std::vector<uint8_t> fatbin = Fatbinary(entries);
  const std::string names = std::string("\0.nv_fatbin\0", 12);
  std::vector<uint8_t> data(names.begin(), names.end());
  data.insert(data.end(), fatbin.begin(), fatbin.end());
  const std::vector<uint8_t> b =
      Elf({{},
           {.type = kShtStrtab, .offset = DataOffset(3), .size = names.size()},
           {.name = 1,
            .type = kShtProgbits,
            .offset = DataOffset(3) + names.size(),
            .size = fatbin.size()}},
          1, data);
  Result<BinaryFound> found = InspectElfBytes(b, "x.so");
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(found->cuda.size(), entries.size() - 1);
  EXPECT_EQ(CudaCodeName(found->cuda.front()), "sm_10");
}

// Found in review (the library_name target checks it since): a CUDA runtime whose file
// name carries a version that does not parse ("12.4-x", or a part over 1000000) was
// dereferenced as a parsed version when compared with another runtime's.
TEST(FuzzRegressionTest, UnparsableRuntimeVersionInAFileName) {
  const fs::path root =
      fs::temp_directory_path() / ("gpupool-fuzz-regression-" + std::to_string(getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  for (const char* name :
       {"libcudart.so.12.4.127", "libcudart.so.99999999.1", "libcudart.so.12.8-x"}) {
    std::ofstream(root / name) << "not an ELF";
  }
  Result<EnvReport> r = InspectTree(root.string());
  fs::remove_all(root);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->libraries.size(), 3u);
  EXPECT_EQ(r->cuda_version, "12.4");
  EXPECT_EQ(r->needs_from, "CUDA runtime libcudart.so.12.4.127");
}

}  // namespace
}  // namespace gpupool::envcheck
