// Fuzz target: a whole file through the inspector's entry point (ELF header, section
// table, DT_SONAME, then the .nv_fatbin / __nv_relfatbin / .hip_fatbin sections).
#include <cstddef>
#include <cstdint>
#include <span>

#include "envcheck/elf_file.h"
#include "envcheck/inspector.h"
#include "fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpupool;
  const std::span<const uint8_t> bytes(data, size);
  const std::string source = "fuzz-input";

  Result<envcheck::ElfFile> elf = envcheck::ParseElf(bytes, source);
  if (elf.ok()) {
    for (const envcheck::ElfSection& s : elf->sections) {
      const std::span<const uint8_t> section = envcheck::SectionBytes(bytes, s);
      fuzz::Require(section.empty() || (section.data() >= bytes.data() &&
                                        section.data() + section.size() <= bytes.data() + size),
                    "SectionBytes outside the file for section '" + s.name + "'");
    }
  } else {
    fuzz::RequireClearError(elf.status(), source);
  }

  Result<envcheck::BinaryFound> found = envcheck::InspectElfBytes(bytes, source);
  if (!found.ok()) {
    fuzz::RequireClearError(found.status(), source);
    return 0;
  }
  fuzz::Require(elf.ok(), "InspectElfBytes accepted what ParseElf rejected");
  fuzz::Require(found->path == source, "path is not the source name");
  for (const envcheck::CudaCode& c : found->cuda) fuzz::RequireNameRoundTrip(c);
  for (const std::string& gfx : found->gfx_targets) fuzz::Require(!gfx.empty(), "empty gfx");
  return 0;
}
