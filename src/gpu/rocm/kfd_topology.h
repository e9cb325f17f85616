// The AMD KFD topology in sysfs (<root>/class/kfd/kfd/topology/nodes/N/): one node per
// CPU socket and per GPU, with the GPU's ISA version, PCI location, render minor and its
// I/O links (PCIe, XGMI) to other nodes. rocm-smi 5.x has no call for the gfx target, so
// both ROCm paths read it from here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpu/sysfs/sysfs_reader.h"

namespace gpupool::gpu::rocm {

// KFD's io_link type for XGMI (CRAT_IOLINK_TYPE_XGMI in the kernel).
inline constexpr uint64_t kKfdIoLinkTypeXgmi = 11;

struct KfdIoLink {
  uint64_t type = 0;
  int node_to = -1;
};

struct KfdNode {
  int id = -1;                      // the N of nodes/N
  uint64_t simd_count = 0;          // 0 for CPU nodes
  uint64_t simd_per_cu = 0;         // 0 when unknown
  uint64_t gfx_target_version = 0;  // 90010 for gfx90a; 0 when unknown
  // (bus << 8) | (device << 3) | function; on MI300 in a partitioned mode the kernel adds
  // the partition's number, in the function bits or in bits 28-31 depending on its version
  uint64_t location_id = 0;
  uint64_t domain = 0;  // PCI domain
  int drm_render_minor = -1;
  uint64_t unique_id = 0;
  std::vector<KfdIoLink> io_links;

  bool is_gpu() const { return simd_count > 0; }
  // Compute units of this device (a whole GPU or one partition); 0 when unknown.
  int compute_units() const {
    return simd_per_cu == 0 ? 0 : static_cast<int>(simd_count / simd_per_cu);
  }
  std::string pci_bus_id() const;  // canonical, from domain and location_id
};

// The canonical bus id of a KFD location (and of a ROCm SMI BDFID's low 32 bits): "dddd:
// bb:dd.f". An MI300 partition whose number is in bits 28-31 (some kernels; others put it
// in the function bits) gets it as its function, as those others show it, so each
// partition of a GPU keeps a bus id of its own: partition 1 of 0000:0c:00.0 is
// 0000:0c:00.1 either way.
std::string KfdBusId(uint64_t domain, uint64_t location_id);

// Reads every node; nodes whose properties file is missing are skipped, garbled values
// are reported to `sink`. Empty when the KFD topology is absent.
std::vector<KfdNode> ReadKfdTopology(const SysfsReader& reader, DiagnosticSink* sink);

// The LLVM target name of a KFD gfx_target_version: major = v / 10000, minor =
// (v / 100) % 100, stepping = v % 100, written "gfx" major, minor and stepping in hex:
// 90010 -> "gfx90a", 110000 -> "gfx1100", 90400 -> "gfx940". Empty for 0.
std::string GfxTargetName(uint64_t gfx_target_version);

// The GPU node at `pci_bus_id`, or nullptr.
const KfdNode* FindKfdGpu(const std::vector<KfdNode>& nodes, const std::string& pci_bus_id);

}  // namespace gpupool::gpu::rocm
