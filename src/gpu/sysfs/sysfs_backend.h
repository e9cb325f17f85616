// sysfs/PCI backend: lists display and 3D controllers of NVIDIA, AMD and Intel from
// /sys/bus/pci/devices with no vendor library, and says which library is missing.
#pragma once

#include <memory>

#include "gpu/gpu_backend.h"

namespace gpupool::gpu {
std::unique_ptr<GpuBackend> NewSysfsBackend(const DiscoveryOptions& options);
}  // namespace gpupool::gpu
