// The kernel's device-memory cgroup controller (cgroup v2 `dmem`, Linux 6.14+): drivers
// register their memory regions (`drm/<PCI slot>/vram0` for a GPU's VRAM), the root
// cgroup's dmem.capacity lists them, and a cgroup's dmem.max caps what its processes may
// allocate in a region (dmem.low protects what it holds from eviction by others). A GPU
// share in "dmem" mode (docs/sharing.md) gets its memory ask as both in its job's
// cgroup. Plain functions on paths, so tests run them against a fake tree; linked into
// the shim: nothing here may use spdlog or fmt. Thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpupool::agent {

struct DmemRegion {
  std::string name;       // "drm/0000:03:00.0/vram0"
  uint64_t capacity = 0;  // bytes
};

// The regions of a dmem.capacity file's text ("NAME BYTES" per line); malformed lines
// are skipped.
std::vector<DmemRegion> ParseDmemCapacity(std::string_view text);

// The VRAM region of the GPU at `pci_bus_id` ("0000:03:00.0", any case): the first
// region named drm/<slot>/vram*; empty when there is none.
std::string DmemRegionOf(const std::vector<DmemRegion>& regions, std::string_view pci_bus_id);

// Caps the job's cgroup v2 leaf `leaf_dir` (under ROOT/gpupool) at `bytes` of `region`:
// enables the controller for ROOT's and ROOT/gpupool's children (+dmem in their
// cgroup.subtree_control), then writes "REGION BYTES" to the leaf's dmem.max and
// dmem.low. An error names the file that could not be written.
Status ApplyDmemLimit(const std::string& root, const std::string& leaf_dir,
                      const std::string& region, uint64_t bytes);

}  // namespace gpupool::agent
