// Readers of the GPU code embedded in host ELF files:
//  - CUDA fatbinaries (sections .nv_fatbin / __nv_relfatbin): containers (magic
//    0xBA55ED50) of entries, each SASS for one sm_XY (an ELF "cubin") or PTX for one
//    compute_XY, possibly compressed;
//  - clang offload bundles (section .hip_fatbin, magic "__CLANG_OFFLOAD_BUNDLE__"), whose
//    entries name their targets, e.g. "hipv4-amdgcn-amd-amdhsa--gfx90a".
// The layouts are read defensively: sizes are checked against the section, counts are
// bounded, and anything malformed is an error naming the file, never a crash.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpupool::envcheck {

struct CudaCode {
  enum class Kind { kSass, kPtx } kind = Kind::kSass;
  int arch = 0;        // 80 for sm_80 / compute_80
  std::string suffix;  // "a" (arch-specific), "f" (family-specific) or ""
  int ptx_major = 0;   // PTX ISA version of a PTX entry (9.0 for CUDA 13.0)
  int ptx_minor = 0;
  bool compressed = false;
  friend bool operator==(const CudaCode&, const CudaCode&) = default;
};

// "sm_90a", "compute_80".
std::string CudaCodeName(const CudaCode& code);
// The inverse for the kind, arch and suffix; nullopt for anything else.
std::optional<CudaCode> ParseCudaCodeName(std::string_view name);

// Parses every fatbinary container in `bytes` (a section's contents).
Result<std::vector<CudaCode>> ParseFatbinary(std::span<const uint8_t> bytes,
                                             std::string_view source);

// Parses every clang offload bundle in `bytes` and returns the bundle targets, e.g.
// "hipv4-amdgcn-amd-amdhsa--gfx90a" and "host-x86_64-unknown-linux-gnu-".
Result<std::vector<std::string>> ParseOffloadBundles(std::span<const uint8_t> bytes,
                                                     std::string_view source);

// The gfx target of an AMD bundle target ("...--gfx90a:xnack+" -> "gfx90a:xnack+"), or "".
std::string GfxTargetOf(std::string_view bundle_target);

}  // namespace gpupool::envcheck
