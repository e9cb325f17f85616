// NVML's per-cgroup device-memory limits (nvmlDeviceSetMemoryLimits_v1, NVIDIA driver
// R615+ / CUDA 13.4): NVML caps what the processes of one cgroup may allocate on a GPU,
// through the kernel's dmem controller where there is one, else the driver's own backend.
// A GPU share in "dmem" mode on a GPU the kernel lists no dmem region for (docs/sharing.md)
// gets its memory ask as both the soft and the hard limit of its job's cgroup, as the
// dmem files give it dmem.low and dmem.max. Not run on a real R615+ driver yet: the ABI
// is NVIDIA's NVML reference's, tested against tests/fakelib/nvml.
//
// These functions dlopen the library: the slim static-pie shim must not link them (a
// static binary's dlopen needs the very glibc it was linked with), so the shim reaches
// ApplyNvmlMemoryLimit only through the pointer its dynamic entry points hand it
// (ShimArgs::nvml_limit), and the agent runs `gpupool agent-shim` for such shares
// (LauncherOptions::nvml_shim_command). No spdlog or fmt here. Thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace gpupool::agent {

struct NvmlMemoryLimit {
  std::string library;     // the libnvidia-ml to load (a path, or a name the loader finds)
  std::string gpu_uuid;    // "GPU-..." (a whole GPU: NVML takes no MIG handle here)
  std::string cgroup_dir;  // the job's cgroup directory, NVML's nameSpace
  uint64_t soft_bytes = 0;
  uint64_t hard_bytes = 0;
};

using NvmlMemoryLimitFn = Status (*)(const NvmlMemoryLimit&);

// The path `library` was loaded from when it exports nvmlDeviceSetMemoryLimits_v1; ""
// when it cannot be loaded or does not (a driver before R615). Calls no NVML function.
std::string NvmlMemoryLimitsLibrary(const std::string& library);

// Loads the library, starts NVML and sets the limit on the cgroup for the GPU
// (nvmlDeviceGetHandleByUUID, nvmlDeviceSetMemoryLimits_v1; root only), then shuts NVML
// down and unloads it. An error names the GPU, the cgroup and NVML's answer.
Status ApplyNvmlMemoryLimit(const NvmlMemoryLimit& limit);

}  // namespace gpupool::agent
