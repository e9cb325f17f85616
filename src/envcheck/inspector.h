// Inspector: what a directory tree (an unpacked image, a conda env, a virtualenv) needs
// from the GPU stack, found by reading its files, never by running them.
//
// It walks the tree (symlinks not followed), reads library names for the CUDA runtime
// and libraries (libcudart.so.12.4.127 -> 12.4.127), the HIP runtime, and driver
// libraries that must not be baked into an image; and it opens every ELF file to list
// the CUDA fatbinary code (SASS sm_XY, PTX compute_XY) and AMD code objects (gfx
// targets) inside. Unreadable or malformed files become warnings, not failures.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/json.h"
#include "common/status.h"
#include "envcheck/device_code.h"

namespace gpupool::envcheck {

struct LibraryFound {
  std::string name;     // "cudart", "cublas", "cudnn", "nccl", "amdhip64", ...
  std::string version;  // from the file name, "12.4.127"
  std::string path;     // relative to the root
  friend bool operator==(const LibraryFound&, const LibraryFound&) = default;
};

struct BinaryFound {
  std::string path;  // relative to the root
  std::vector<CudaCode> cuda;
  std::vector<std::string> gfx_targets;
};

struct EnvReport {
  std::string root;
  std::vector<LibraryFound> libraries;  // CUDA/ROCm runtime and libraries
  std::vector<BinaryFound> binaries;    // ELF files carrying GPU code
  std::vector<std::string> warnings;
  uint64_t files_scanned = 0;

  // Derived verdict.
  std::string cuda_version;  // of the CUDA runtime shipped, else "" (see needs_from)
  std::string needs_from;    // what the CUDA need was derived from
  std::string min_driver;    // the release's own minimum, "" when no CUDA
  std::string min_driver_minor_compat;
  std::vector<std::string> sass;         // union of sm_XY[a|f]
  std::vector<std::string> ptx;          // union of compute_XY
  std::vector<std::string> gfx_targets;  // union of AMD targets
  std::string hip_version;
};

struct InspectOptions {
  uint64_t max_files = 2'000'000;
  uint64_t max_file_bytes = uint64_t{8} << 30;  // larger files are skipped with a warning
  uint64_t max_total_bytes = 0;                 // of all files read; 0 = no limit
  int64_t deadline_ms = 0;  // on the steady clock (ms since its epoch); 0 = none
  // Past max_files, max_total_bytes or the deadline: ResourceExhausted instead of a
  // warning and a partial report (the pool's inspections, which must not be partial).
  bool limits_are_errors = false;
};

Result<EnvReport> InspectTree(const std::string& root, const InspectOptions& options = {});

// Inspects one ELF file's GPU code (for tests and single binaries).
Result<BinaryFound> InspectElfFile(const std::string& path);

// The same inspection of an ELF file already in memory; `source` names it in errors and
// becomes the result's path. Malformed bytes give InvalidArgument, never a crash (the
// fuzz/ targets hold it to that).
Result<BinaryFound> InspectElfBytes(std::span<const uint8_t> bytes, const std::string& source);

OrderedJson ReportToJson(const EnvReport& report);

// What a node offers, for the check below.
struct NodeOffer {
  std::string name;
  std::string driver_version;                     // "535.104.05"; "" = no NVIDIA driver
  std::string cuda_driver_version;                // newest CUDA the driver supports, "12.2"
  std::vector<std::pair<int, int>> capabilities;  // of its NVIDIA GPUs
  std::vector<std::string> gfx_targets;           // of its AMD GPUs
};

// OK when the node can run the environment; otherwise FailedPrecondition whose message
// says what to change, e.g. "needs CUDA 12.4 -> driver >= 550.54.14; node b07 has
// 535.104.05".
Status CheckNode(const EnvReport& report, const NodeOffer& node);

}  // namespace gpupool::envcheck
