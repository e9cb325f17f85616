#include "gpu/gpu_info.h"

#include <cctype>
#include <cstdio>

#include "common/strings.h"

namespace gpupool::gpu {

std::string_view VendorName(Vendor v) {
  switch (v) {
    case Vendor::kNvidia:
      return "nvidia";
    case Vendor::kAmd:
      return "amd";
    case Vendor::kIntel:
      return "intel";
    case Vendor::kUnknown:
      return "unknown";
  }
  return "unknown";
}

std::optional<Vendor> ParseVendor(std::string_view name) {
  const std::string n = ToLower(name);
  if (n == "nvidia") return Vendor::kNvidia;
  if (n == "amd") return Vendor::kAmd;
  if (n == "intel") return Vendor::kIntel;
  if (n == "unknown") return Vendor::kUnknown;
  return std::nullopt;
}

std::string_view PcieLevelName(PcieLevel level) {
  switch (level) {
    case PcieLevel::kUnknown:
      return "?";
    case PcieLevel::kSameBoard:
      return "BOARD";
    case PcieLevel::kSingle:
      return "PIX";
    case PcieLevel::kMultiple:
      return "PXB";
    case PcieLevel::kHostBridge:
      return "PHB";
    case PcieLevel::kNode:
      return "NODE";
    case PcieLevel::kSystem:
      return "SYS";
  }
  return "?";
}

std::optional<PcieLevel> ParsePcieLevel(std::string_view name) {
  for (PcieLevel l :
       {PcieLevel::kUnknown, PcieLevel::kSameBoard, PcieLevel::kSingle, PcieLevel::kMultiple,
        PcieLevel::kHostBridge, PcieLevel::kNode, PcieLevel::kSystem}) {
    if (PcieLevelName(l) == name) return l;
  }
  return std::nullopt;
}

bool IsEnforcementMode(std::string_view mode) {
  for (const char* m : kEnforcementModes) {
    if (mode == m) return true;
  }
  return false;
}

bool IsComputePartitionMode(std::string_view mode) {
  for (const char* m : {"SPX", "DPX", "TPX", "QPX", "CPX"}) {
    if (mode == m) return true;
  }
  return false;
}

bool IsMemoryPartitionMode(std::string_view mode) {
  for (const char* m : {"NPS1", "NPS2", "NPS4", "NPS8"}) {
    if (mode == m) return true;
  }
  return false;
}

std::string CanonicalPciBusId(std::string_view bus_id) {
  std::string s = ToLower(Trim(bus_id));
  // Accept "dddddddd:bb:dd.f" (NVML's 8-digit domain), "dddd:bb:dd.f" and "bb:dd.f".
  unsigned domain = 0;
  unsigned bus = 0;
  unsigned dev = 0;
  unsigned fn = 0;
  char tail = 0;
  if (std::sscanf(s.c_str(), "%x:%x:%x.%x%c", &domain, &bus, &dev, &fn, &tail) == 4 ||
      (domain = 0, std::sscanf(s.c_str(), "%x:%x.%x%c", &bus, &dev, &fn, &tail) == 3)) {
    if (domain <= 0xffff && bus <= 0xff && dev <= 0x1f && fn <= 7) {
      char buf[32];
      // Cannot fail or truncate: the fields are bounded above, 12 characters in all.
      (void)std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%x", domain, bus, dev, fn);
      return buf;
    }
  }
  return s;
}

const GpuInfo* FindGpuByPci(const NodeInfo& node, std::string_view pci_bus_id) {
  for (const GpuInfo& g : node.gpus) {
    if (g.pci_bus_id == pci_bus_id) return &g;
  }
  return nullptr;
}

}  // namespace gpupool::gpu
