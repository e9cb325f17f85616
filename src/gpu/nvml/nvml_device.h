// Per-GPU queries: everything GpuInfo holds about one NVML device, MIG instances
// included. Each field is asked for independently, so one failing call leaves only its
// field unknown (and a diagnostic), never the whole GPU.
#pragma once

#include "gpu/gpu_backend.h"
#include "gpu/gpu_info.h"
#include "gpu/nvml/nvml_diagnostics.h"
#include "gpu/nvml/nvml_library.h"

namespace gpupool::gpu::nvml {

// Reads GPU `index` (NVML's index, which is also CUDA's default order) through `device`.
// sysfs under options.sysfs_root fills NUMA node and CPU affinity when NVML cannot.
GpuInfo QueryGpu(const NvmlLibrary& library, const DiscoveryOptions& options, int index,
                 Device device, DiagnosticSink* sink);

}  // namespace gpupool::gpu::nvml
