// GPU-to-GPU topology from NVML: NVLink counts and the PCIe common ancestor of every
// pair, as NodeInfo::links.
//
// NVLink counting: a link whose far end is another of our GPUs counts for that pair
// directly. A link into an NVSwitch counts for every pair of GPUs wired to that same
// switch, as min(links of a to it, links of b to it), summed over switches; that is what
// `nvidia-smi topo -m` shows as NV18 between every pair of an HGX H100 board. Without
// nvmlDeviceGetNvLinkRemoteDeviceType (old drivers) a far end that is none of our GPUs
// is taken to be a switch.
#pragma once

#include <string>
#include <vector>

#include "gpu/gpu_info.h"
#include "gpu/nvml/nvml_diagnostics.h"
#include "gpu/nvml/nvml_library.h"

namespace gpupool::gpu::nvml {

struct TopologyGpu {
  int index = -1;
  Device handle = nullptr;
  std::string pci_bus_id;  // canonical; GPUs without one take no part in links
};

// One GpuLink per unordered pair with a known PCIe level or at least one NVLink.
std::vector<GpuLink> QueryLinks(const NvmlLibrary& library, const std::vector<TopologyGpu>& gpus,
                                DiagnosticSink* sink);

// Maps nvmlGpuTopologyLevel_t to our PcieLevel; kUnknown for values NVML does not define.
PcieLevel PcieLevelFromNvml(int level);

}  // namespace gpupool::gpu::nvml
