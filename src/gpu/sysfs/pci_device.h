// One PCI function as sysfs describes it (<root>/bus/pci/devices/<bus id>/), reduced to
// what GPU discovery needs: ids, class, NUMA node, local CPUs and its DRM device nodes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/gpu_info.h"
#include "gpu/sysfs/sysfs_reader.h"

namespace gpupool::gpu {

inline constexpr uint32_t kPciVendorNvidia = 0x10de;
inline constexpr uint32_t kPciVendorAmd = 0x1002;
inline constexpr uint32_t kPciVendorIntel = 0x8086;

struct PciDevice {
  std::string bus_id;  // canonical "0000:3b:00.0"
  uint32_t vendor_id = 0;
  uint32_t device_id = 0;
  uint32_t class_code = 0;  // 24-bit class, 0x030000 for VGA
  int numa_node = -1;
  std::string cpu_affinity;  // local_cpulist, "0-23,48-71"
  std::string card_node;     // "/dev/dri/card1", empty when the device has none
  std::string render_node;   // "/dev/dri/renderD129"
  int render_minor = -1;     // 129
};

// Parses a PCI bus id in any of the forms drivers print and returns it canonical, or
// nullopt when `text` is not a bus id.
std::optional<std::string> ParsePciBusId(std::string_view text);

// Display (0x0300), 3D (0x0302) and other display (0x0380) controllers.
bool IsDisplayController(uint32_t class_code);

// The vendor of a PCI vendor id, kUnknown for others.
Vendor VendorOfPciId(uint32_t vendor_id);

// "NVIDIA", "AMD", "Intel": how the vendor is written in names and messages.
std::string_view VendorDisplayName(Vendor vendor);

// Reads the device whose sysfs directory is `rel_dir` (below the reader's root) and whose
// bus id is `bus_id`. Missing attributes stay unknown; garbled ones are reported to `sink`.
PciDevice ReadPciDevice(const SysfsReader& reader, const std::string& rel_dir,
                        const std::string& bus_id, DiagnosticSink* sink);

// The bus id of the PCI device at `rel_dir`: the name of the directory it resolves to,
// else PCI_SLOT_NAME from its uevent file. nullopt when neither gives a bus id.
std::optional<std::string> PciBusIdOfDir(const SysfsReader& reader, const std::string& rel_dir);

// PCIe distance derivable from NUMA nodes alone: same node -> kNode, different -> kSystem.
PcieLevel PcieLevelFromNuma(int numa_a, int numa_b);

}  // namespace gpupool::gpu
