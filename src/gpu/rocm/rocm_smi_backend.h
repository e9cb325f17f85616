// ROCm backend: dlopen of librocm_smi64.so, falling back to the amdgpu sysfs files and
// the KFD topology (/sys/class/drm, /sys/class/kfd) when the library is absent, lacks a
// required symbol or rsmi_init fails. Either way the GPUs carry backend "rocm-smi"; the
// fallback adds a Diagnostic saying so.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gpu/gpu_backend.h"

namespace gpupool::gpu {

std::unique_ptr<GpuBackend> NewRocmSmiBackend(const DiscoveryOptions& options);

// As above, naming the pci.ids files used for GPUs the fallback finds without a
// product_name (tests pass their own, or none, to be independent of the host).
std::unique_ptr<GpuBackend> NewRocmSmiBackendWithPciIds(const DiscoveryOptions& options,
                                                        std::vector<std::string> pci_ids_files);

}  // namespace gpupool::gpu
