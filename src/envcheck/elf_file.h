// A bounds-checked reader of ELF64 little-endian files (the only kind CUDA and ROCm
// ship on x86_64 and aarch64 Linux): the section table, and the bytes of a section.
// Every offset and size read from the file is checked against the buffer, so truncated
// or hostile files give an error naming the file and what is wrong, never a crash.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpupool::envcheck {

struct ElfSection {
  std::string name;
  uint32_t type = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
};

struct ElfFile {
  uint16_t type = 0;     // ET_EXEC, ET_DYN, ET_REL, ...
  uint16_t machine = 0;  // EM_X86_64 = 62, EM_AARCH64 = 183, EM_CUDA = 190
  std::vector<ElfSection> sections;
  std::string soname;  // DT_SONAME when present

  const ElfSection* Find(std::string_view name) const;
};

// True when `bytes` starts with the ELF magic.
bool LooksLikeElf(std::span<const uint8_t> bytes);

// Parses the headers of an ELF file held in `bytes`. `source` names it in errors.
Result<ElfFile> ParseElf(std::span<const uint8_t> bytes, std::string_view source);

// The bytes of `section`, already checked to lie inside `bytes` by ParseElf. SHT_NOBITS
// sections have none.
std::span<const uint8_t> SectionBytes(std::span<const uint8_t> bytes, const ElfSection& section);

}  // namespace gpupool::envcheck
