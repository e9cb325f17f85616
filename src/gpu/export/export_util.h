// Helpers that several exporters share. Internal to src/gpu/export.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/gpu_info.h"

namespace gpupool::gpu::export_internal {

// Text safe to print on a terminal or in a comment line: invalid UTF-8 and control
// characters (newlines, escapes) become '?', so a hostile name cannot forge lines.
std::string Printable(std::string_view s);

// The GPU's own device nodes; for NVIDIA without a list, /dev/nvidia<minor> when known.
std::vector<std::string> GpuDeviceNodes(const GpuInfo& gpu);

inline uint64_t Mib(uint64_t bytes) { return bytes >> 20; }

// Short label used in tables and matrices: "GPU3" for NVIDIA, "AMD3", "INTEL3", "GPU?".
std::string GpuLabel(const GpuInfo& gpu, size_t position);

// The link between two GPUs (by bus id, either order), or nullptr.
const GpuLink* FindLink(const NodeInfo& node, std::string_view a, std::string_view b);

// Parses "12.4" into {12, 4}; false when it is not MAJOR.MINOR digits.
bool ParseMajorMinor(std::string_view text, int* major, int* minor);

}  // namespace gpupool::gpu::export_internal
