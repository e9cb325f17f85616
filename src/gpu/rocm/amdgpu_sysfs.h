// AMD GPUs from the amdgpu driver's sysfs files and the KFD topology, with no ROCm
// library: the fallback of the ROCm backend, and the source of what rocm-smi 5.x does not
// report (gfx target, CPU affinity, DRM card node).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gpu/gpu_info.h"
#include "gpu/rocm/kfd_topology.h"
#include "gpu/sysfs/pci_ids.h"
#include "gpu/sysfs/sysfs_reader.h"

namespace gpupool::gpu::rocm {

// XGMI link counts keyed by the ordered pair of PCI bus ids (first < second).
using XgmiCounts = std::map<std::pair<std::string, std::string>, int>;

// Lists the AMD GPUs of <root>/class/drm/card*/device, indexed in PCI bus id order,
// with backend "rocm-smi". Cards that are not AMD or have no bus id are left out.
std::vector<GpuInfo> ReadAmdGpusFromSysfs(const SysfsReader& reader,
                                          const std::vector<KfdNode>& kfd,
                                          const std::vector<std::string>& pci_ids_files,
                                          DiagnosticSink* sink);

// Fills what sysfs and KFD know and `gpu` lacks: gfx target, CPU affinity, NUMA node,
// DRM nodes. `gpu->pci_bus_id` must be set.
void AddSysfsDetails(const SysfsReader& reader, const std::vector<KfdNode>& kfd, GpuInfo* gpu,
                     DiagnosticSink* sink);

// MI300-class partitioning (docs/sharing.md, "AMD"): the compute and memory partition
// modes the admin set, from current_compute_partition and current_memory_partition of the
// GPU's PCI device (for a partition whose bus id carries its number in the function bits,
// the device of function 0), and the device's compute units from its KFD node. A missing
// file leaves the field empty (no partitioning, an older kernel); content that is not a
// known mode is reported to `sink`, naming the file, and left out.
void AddPartitionDetails(const SysfsReader& reader, const std::vector<KfdNode>& kfd, GpuInfo* gpu,
                         DiagnosticSink* sink);

// Direct XGMI links between KFD GPU nodes (io_links of type XGMI).
XgmiCounts XgmiCountsFromKfd(const std::vector<KfdNode>& kfd);

// One link per pair of `gpus` that has XGMI or a derivable PCIe level (from NUMA nodes).
std::vector<GpuLink> BuildAmdLinks(const std::vector<GpuInfo>& gpus, const XgmiCounts& xgmi);

}  // namespace gpupool::gpu::rocm
