// ROCm backend: dlopen of librocm_smi64.so, falling back to the amdgpu sysfs files and
// the KFD topology (/sys/class/drm, /sys/class/kfd) when the library is absent.
#pragma once

#include <memory>

#include "gpu/gpu_backend.h"

namespace gpupool::gpu {
std::unique_ptr<GpuBackend> NewRocmSmiBackend(const DiscoveryOptions& options);
}  // namespace gpupool::gpu
