// The published CUDA compatibility rules, as data and as checks:
//  - each CUDA toolkit release needs a minimum Linux driver (data/cuda_driver_compat.json,
//    compiled in; its "source" field names where the numbers come from);
//  - minor version compatibility: within a major release an older driver of that family
//    runs newer toolkits' binaries, without PTX JIT;
//  - SASS for sm_XY runs on GPUs of the same major with minor >= Y; sm_XYa only on
//    exactly X.Y; sm_XYf on the same major and minor >= Y (its family); PTX for
//    compute_XY is JIT-compiled on any GPU with capability >= X.Y, if the driver knows
//    the PTX ISA version.
// Pure functions; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "envcheck/device_code.h"

namespace gpupool::envcheck {

// Dotted version numbers compared numerically ("550.54.14" < "550.100").
struct Version {
  std::vector<int> parts;
  static std::optional<Version> Parse(std::string_view text);
  std::string ToString() const;
  // NOLINTNEXTLINE(modernize-use-nullptr): the 0 is the compiler's own (llvm-project#53961)
  friend auto operator<=>(const Version& a, const Version& b) = default;
};

struct DriverNeed {
  std::string cuda;                     // "12.4"
  std::string min_driver;               // this release's own minimum ("550.54.14")
  std::string min_driver_minor_compat;  // the family's minimum under minor version compatibility
};

// The minimum drivers for CUDA `cuda` (MAJOR.MINOR[.PATCH]). Releases missing from the
// table use the nearest older one of the same major. NotFound for unknown majors.
Result<DriverNeed> DriverNeedFor(std::string_view cuda);

// The CUDA release that introduced PTX ISA `major.minor`, or "" when unknown.
std::string CudaForPtx(int major, int minor);

// The table's provenance, for reports.
std::string CompatSource();

// Whether code `c` runs on a GPU of compute capability cap_major.cap_minor (natively or,
// for PTX, by JIT).
bool RunsOn(const CudaCode& c, int cap_major, int cap_minor);

}  // namespace gpupool::envcheck
