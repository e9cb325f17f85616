#include "envcheck/elf_file.h"

#include <algorithm>
#include <cstring>

namespace gpupool::envcheck {
namespace {

constexpr uint32_t kShtNull = 0;
constexpr uint32_t kShtNobits = 8;
constexpr uint32_t kShtDynamic = 6;
constexpr int64_t kDtNull = 0;
constexpr int64_t kDtSoname = 14;
constexpr size_t kMaxSections = 65535;
// Longer section names and sonames are cut; the names looked for are short.
constexpr size_t kMaxNameBytes = 256;

template <typename T>
bool Read(std::span<const uint8_t> b, uint64_t off, T* out) {
  if (off > b.size() || b.size() - off < sizeof(T)) return false;
  std::memcpy(out, b.data() + off, sizeof(T));
  return true;
}

// The NUL-terminated string at `off` in `table`, cut at kMaxNameBytes: every section
// holds a name, so without the cut a hostile file (65535 sections named from one large
// unterminated table) would make ParseElf copy gigabytes.
std::string CString(std::span<const uint8_t> table, uint64_t off) {
  if (off >= table.size()) return "";
  const auto* start = reinterpret_cast<const char*>(table.data() + off);
  const size_t max = std::min<uint64_t>(table.size() - off, kMaxNameBytes);
  return std::string(start, strnlen(start, max));
}

}  // namespace

const ElfSection* ElfFile::Find(std::string_view name) const {
  for (const ElfSection& s : sections) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

bool LooksLikeElf(std::span<const uint8_t> b) {
  return b.size() >= 4 && b[0] == 0x7f && b[1] == 'E' && b[2] == 'L' && b[3] == 'F';
}

std::span<const uint8_t> SectionBytes(std::span<const uint8_t> bytes, const ElfSection& s) {
  if (s.type == kShtNobits || s.offset > bytes.size() || bytes.size() - s.offset < s.size)
    return {};
  return bytes.subspan(s.offset, s.size);
}

Result<ElfFile> ParseElf(std::span<const uint8_t> b, std::string_view source) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument(std::string(source) + ": " + why);
  };
  if (!LooksLikeElf(b)) return bad("not an ELF file");
  if (b.size() < 64) return bad("truncated ELF header (" + std::to_string(b.size()) + " bytes)");
  if (b[4] != 2) return bad("only 64-bit ELF files are inspected (this one is 32-bit)");
  if (b[5] != 1) return bad("only little-endian ELF files are inspected");
  ElfFile elf;
  uint64_t shoff = 0;
  uint16_t shentsize = 0;
  uint16_t shnum = 0;
  uint16_t shstrndx = 0;
  Read(b, 16, &elf.type);
  Read(b, 18, &elf.machine);
  Read(b, 40, &shoff);
  Read(b, 58, &shentsize);
  Read(b, 60, &shnum);
  Read(b, 62, &shstrndx);
  if (shnum == 0) return elf;  // no section table (stripped to the bone): nothing to find
  if (shentsize < 64)
    return bad("section header entries of " + std::to_string(shentsize) + " bytes");
  if (shnum > kMaxSections || shoff > b.size() ||
      (b.size() - shoff) / shentsize < static_cast<uint64_t>(shnum)) {
    return bad("truncated: the section header table lies past the end of the file");
  }
  struct Raw {
    uint32_t name;
    uint32_t type;
    uint64_t offset;
    uint64_t size;
    uint64_t entsize;
    uint32_t link;
  };
  std::vector<Raw> raw(shnum);
  for (uint16_t i = 0; i < shnum; ++i) {
    const uint64_t h = shoff + uint64_t{i} * shentsize;
    Read(b, h, &raw[i].name);
    Read(b, h + 4, &raw[i].type);
    Read(b, h + 24, &raw[i].offset);
    Read(b, h + 32, &raw[i].size);
    Read(b, h + 40, &raw[i].link);
    Read(b, h + 56, &raw[i].entsize);
    if (raw[i].type != kShtNobits && raw[i].type != kShtNull &&
        (raw[i].offset > b.size() || b.size() - raw[i].offset < raw[i].size)) {
      return bad("truncated: section " + std::to_string(i) + " lies past the end of the file");
    }
  }
  if (shstrndx >= shnum) return bad("the section name table index is out of range");
  // The bytes of a section used as a string table. SHT_NULL and SHT_NOBITS sections were
  // not checked above (their offset and size mean nothing), so they have none; a string
  // table index may point at one in a hostile file.
  auto contents = [&](const Raw& r) -> std::span<const uint8_t> {
    if (r.type == kShtNull || r.type == kShtNobits) return {};
    return b.subspan(r.offset, r.size);
  };
  const std::span<const uint8_t> names = contents(raw[shstrndx]);
  for (const Raw& r : raw) {
    elf.sections.push_back({CString(names, r.name), r.type, r.offset, r.size});
  }
  // DT_SONAME, for libraries whose file name lies about their version. Only the first
  // dynamic section and its first DT_SONAME count (a real file has one of each), so a
  // hostile file of many large dynamic sections costs one pass, not one per section.
  for (const Raw& r : raw) {
    if (r.type != kShtDynamic || r.link >= shnum) continue;
    const auto strings = contents(raw[r.link]);
    for (uint64_t off = r.offset; off + 16 <= r.offset + r.size; off += 16) {
      int64_t tag = 0;
      uint64_t val = 0;
      Read(b, off, &tag);
      Read(b, off + 8, &val);
      if (tag == kDtNull) break;
      if (tag == kDtSoname) {
        elf.soname = CString(strings, val);
        break;
      }
    }
    break;
  }
  return elf;
}

}  // namespace gpupool::envcheck
