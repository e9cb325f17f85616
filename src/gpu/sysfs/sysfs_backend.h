// sysfs/PCI backend: lists display and 3D controllers of NVIDIA, AMD and Intel from
// /sys/bus/pci/devices with no vendor library, and says which library is missing.
//
// It is the safety net of automatic discovery: GPUs the vendor backends report win the
// merge (they come first); this one adds GPUs no library could see, and tells the user
// what to install.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gpu/gpu_backend.h"

namespace gpupool::gpu {

std::unique_ptr<GpuBackend> NewSysfsBackend(const DiscoveryOptions& options);

// As above, naming the pci.ids files to take GPU names from (tests pass their own).
std::unique_ptr<GpuBackend> NewSysfsBackendWithPciIds(const DiscoveryOptions& options,
                                                      std::vector<std::string> pci_ids_files);

// True for the sysfs backend's "found N <vendor> GPUs but <library> could not be loaded"
// Diagnostic about `vendor`; DiscoverNode drops it when that vendor's own backend worked.
bool IsMissingLibraryDiagnostic(const Diagnostic& diagnostic, Vendor vendor);

}  // namespace gpupool::gpu
