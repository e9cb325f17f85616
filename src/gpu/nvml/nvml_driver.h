// Node-wide NVIDIA driver facts for NodeInfo::nvidia: driver and CUDA versions, the
// user-space driver libraries a container needs bind-mounted (CDI), and the control
// device nodes.
#pragma once

#include <string>
#include <vector>

#include "gpu/gpu_backend.h"
#include "gpu/gpu_info.h"
#include "gpu/nvml/nvml_diagnostics.h"
#include "gpu/nvml/nvml_library.h"

namespace gpupool::gpu::nvml {

DriverInfo QueryDriver(const NvmlLibrary& library, const DiscoveryOptions& options,
                       DiagnosticSink* sink);

// The driver libraries in `directory` (absolute paths, sorted). With a known
// `driver_version` ("550.54.15") only files named <lib>.so.<driver_version> count, so
// leftovers of an older driver are not mounted into containers; without one, regular
// files (not symlinks) named <lib>.so.* do.
std::vector<std::string> ListDriverLibraries(const std::string& directory,
                                             const std::string& driver_version);

// The control nodes that exist under `dev_root`, named as inside a container ("/dev/...").
std::vector<std::string> ListControlNodes(const std::string& dev_root);

}  // namespace gpupool::gpu::nvml
