// NVML backend: dlopen("libnvidia-ml.so.1") with our own declarations of the versioned
// entry points; optional symbols missing from older drivers degrade to unknown values.
#pragma once

#include <memory>

#include "gpu/gpu_backend.h"

namespace gpupool::gpu {
std::unique_ptr<GpuBackend> NewNvmlBackend(const DiscoveryOptions& options);
}  // namespace gpupool::gpu
