#include "gpu/nvml/nvml_topology.h"

#include <algorithm>
#include <map>

#include "gpu/nvml/nvml_values.h"

namespace gpupool::gpu::nvml {
namespace {

// Where one GPU's active NVLinks lead, keyed by the far end's canonical bus id.
struct LinkEnds {
  std::map<std::string, int> to_gpu;
  std::map<std::string, int> to_switch;
};

enum class FarEnd { kGpu, kSwitch, kOther };

FarEnd ClassifyFarEnd(const Functions& fn, Device dev, unsigned link, const std::string& far,
                      const std::vector<TopologyGpu>& gpus) {
  if (fn.device_get_nvlink_remote_device_type != nullptr) {
    int type = kNvLinkDeviceTypeUnknown;
    if (fn.device_get_nvlink_remote_device_type(dev, link, &type) == kSuccess) {
      if (type == kNvLinkDeviceTypeGpu) return FarEnd::kGpu;
      if (type == kNvLinkDeviceTypeSwitch) return FarEnd::kSwitch;
      return FarEnd::kOther;  // an IBM NPU (POWER9 CPU) or something newer
    }
  }
  const bool is_our_gpu = std::any_of(gpus.begin(), gpus.end(),
                                      [&](const TopologyGpu& g) { return g.pci_bus_id == far; });
  return is_our_gpu ? FarEnd::kGpu : FarEnd::kSwitch;
}

LinkEnds QueryLinkEnds(const NvmlLibrary& library, const TopologyGpu& gpu,
                       const std::vector<TopologyGpu>& gpus, DiagnosticSink* sink) {
  const Functions& fn = library.fn();
  LinkEnds ends;
  const bool legacy = fn.device_get_nvlink_remote_pci_info_v2 == nullptr;
  DeviceLinkPciFn remote_pci =
      legacy ? fn.device_get_nvlink_remote_pci_info : fn.device_get_nvlink_remote_pci_info_v2;
  const char* remote_symbol =
      legacy ? "nvmlDeviceGetNvLinkRemotePciInfo" : "nvmlDeviceGetNvLinkRemotePciInfo_v2";
  for (unsigned link = 0; link < kNvLinkMaxLinks; ++link) {
    unsigned active = kFeatureDisabled;
    const Return rc = fn.device_get_nvlink_state(gpu.handle, link, &active);
    // NOT_SUPPORTED: a GPU without NVLink. INVALID_ARGUMENT: past this GPU's last link.
    if (rc == kErrorNotSupported || rc == kErrorInvalidArgument) break;
    if (rc != kSuccess) {
      sink->CallFailed("nvmlDeviceGetNvLinkState", rc, gpu.index);
      break;
    }
    if (active != kFeatureEnabled) continue;
    if (remote_pci == nullptr) {
      sink->MissingSymbol("nvmlDeviceGetNvLinkRemotePciInfo_v2", "NVLink peers are unknown");
      break;
    }
    // Zeroed and as large as the newest layout, so the v1 call's shorter struct fits.
    PciInfo info{};
    if (Return prc = remote_pci(gpu.handle, link, &info); prc != kSuccess) {
      sink->CallFailed(remote_symbol, prc, gpu.index);
      continue;
    }
    const auto far = PciBusIdFromInfo(info, legacy);
    if (!far || *far == gpu.pci_bus_id) continue;
    switch (ClassifyFarEnd(fn, gpu.handle, link, *far, gpus)) {
      case FarEnd::kGpu:
        ++ends.to_gpu[*far];
        break;
      case FarEnd::kSwitch:
        ++ends.to_switch[*far];
        break;
      case FarEnd::kOther:
        break;
    }
  }
  return ends;
}

int NvLinksBetween(const TopologyGpu& a, const LinkEnds& ea, const TopologyGpu& b,
                   const LinkEnds& eb) {
  auto direct = [](const LinkEnds& from, const std::string& to) {
    auto it = from.to_gpu.find(to);
    return it == from.to_gpu.end() ? 0 : it->second;
  };
  // Both ends should agree; if one side failed to read a link, trust the side that saw more.
  int count = std::max(direct(ea, b.pci_bus_id), direct(eb, a.pci_bus_id));
  for (const auto& [sw, n] : ea.to_switch) {
    if (auto it = eb.to_switch.find(sw); it != eb.to_switch.end()) count += std::min(n, it->second);
  }
  return count;
}

}  // namespace

PcieLevel PcieLevelFromNvml(int level) {
  switch (level) {
    case kTopologyInternal:
      return PcieLevel::kSameBoard;
    case kTopologySingle:
      return PcieLevel::kSingle;
    case kTopologyMultiple:
      return PcieLevel::kMultiple;
    case kTopologyHostBridge:
      return PcieLevel::kHostBridge;
    case kTopologyNode:
      return PcieLevel::kNode;
    case kTopologySystem:
      return PcieLevel::kSystem;
    default:
      return PcieLevel::kUnknown;
  }
}

std::vector<GpuLink> QueryLinks(const NvmlLibrary& library, const std::vector<TopologyGpu>& gpus,
                                DiagnosticSink* sink) {
  const Functions& fn = library.fn();
  std::vector<const TopologyGpu*> usable;
  for (const TopologyGpu& g : gpus) {
    if (!g.pci_bus_id.empty()) usable.push_back(&g);
  }
  std::vector<LinkEnds> ends(usable.size());
  if (fn.device_get_nvlink_state == nullptr) {
    if (usable.size() > 1) sink->MissingSymbol("nvmlDeviceGetNvLinkState", "NVLinks are unknown");
  } else {
    for (size_t i = 0; i < usable.size(); ++i) {
      ends[i] = QueryLinkEnds(library, *usable[i], gpus, sink);
    }
  }
  if (fn.device_get_topology_common_ancestor == nullptr && usable.size() > 1) {
    sink->MissingSymbol("nvmlDeviceGetTopologyCommonAncestor", "PCIe distances are unknown");
  }

  std::vector<GpuLink> links;
  for (size_t i = 0; i < usable.size(); ++i) {
    for (size_t j = i + 1; j < usable.size(); ++j) {
      const TopologyGpu& a = *usable[i];
      const TopologyGpu& b = *usable[j];
      GpuLink link;
      link.a = a.pci_bus_id;
      link.b = b.pci_bus_id;
      link.nvlink_count = NvLinksBetween(a, ends[i], b, ends[j]);
      if (fn.device_get_topology_common_ancestor != nullptr) {
        int level = -1;
        const Return rc = fn.device_get_topology_common_ancestor(a.handle, b.handle, &level);
        if (rc != kSuccess) {
          sink->CallFailed("nvmlDeviceGetTopologyCommonAncestor", rc, a.index);
        } else {
          link.pcie_level = PcieLevelFromNvml(level);
          if (link.pcie_level == PcieLevel::kUnknown) {
            sink->Note("NVML reports topology level " + std::to_string(level) + " between GPU " +
                       std::to_string(a.index) + " and GPU " + std::to_string(b.index) +
                       ", which gpupool does not know; the PCIe distance is left unknown");
          }
        }
      }
      if (link.nvlink_count > 0 || link.pcie_level != PcieLevel::kUnknown) {
        links.push_back(std::move(link));
      }
    }
  }
  return links;
}

}  // namespace gpupool::gpu::nvml
