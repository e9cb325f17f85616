// The GPU model: what discovery reports about one node's GPUs, whatever backend found
// them (NVML, ROCm SMI, sysfs, a fake node file). Plain value types; every exporter
// (table, JSON, ClassAd, gres.conf, CDI) and the agent read only these.
//
// Unknown values are explicit: std::optional, -1 for indices, empty strings, so an
// exporter can leave out what a backend could not find instead of printing garbage.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpupool::gpu {

enum class Vendor { kNvidia, kAmd, kIntel, kUnknown };

std::string_view VendorName(Vendor v);  // "nvidia", "amd", "intel", "unknown"
std::optional<Vendor> ParseVendor(std::string_view name);

// How close two GPUs are on the PCIe tree, in the terms of `nvidia-smi topo -m`.
enum class PcieLevel {
  kUnknown,
  kSameBoard,   // "PIX"-like internal: both on one board (multi-GPU board)
  kSingle,      // "PIX": at most one PCIe switch between them
  kMultiple,    // "PXB": several PCIe switches, no host bridge
  kHostBridge,  // "PHB": through one PCIe host bridge (one CPU socket)
  kNode,        // "NODE": across host bridges inside one NUMA node
  kSystem,      // "SYS": across NUMA nodes (SMP interconnect)
};

std::string_view PcieLevelName(
    PcieLevel level);  // "BOARD", "PIX", "PXB", "PHB", "NODE", "SYS", "?"
std::optional<PcieLevel> ParsePcieLevel(std::string_view name);

struct ComputeCapability {
  int major = 0;
  int minor = 0;
  friend bool operator==(const ComputeCapability&, const ComputeCapability&) = default;
};

// One MIG instance of an NVIDIA GPU in MIG mode.
struct MigDevice {
  std::string uuid;     // "MIG-..."
  std::string profile;  // "1g.10gb"
  int gpu_instance_id = -1;
  int compute_instance_id = -1;
  uint64_t memory_total_bytes = 0;
  std::vector<std::string> device_nodes;  // /dev/nvidia-caps/nvidia-capN for CDI
  friend bool operator==(const MigDevice&, const MigDevice&) = default;
};

struct GpuInfo {
  Vendor vendor = Vendor::kUnknown;
  int index = -1;          // the vendor runtime's index (CUDA / ROCm order)
  std::string name;        // "NVIDIA H100 80GB HBM3", "AMD Instinct MI250X"
  std::string uuid;        // NVIDIA "GPU-<uuid>"; AMD unique id as "0x<hex>"
  std::string pci_bus_id;  // canonical lower-case "0000:3b:00.0"; unique within a node
  uint64_t memory_total_bytes = 0;
  uint64_t memory_used_bytes = 0;
  std::optional<ComputeCapability> compute_capability;  // NVIDIA
  std::string gfx_target;                               // AMD "gfx90a"
  int minor_number = -1;  // NVIDIA /dev/nvidiaN; AMD DRM render minor (renderD<128+n>)
  std::vector<std::string> device_nodes;  // this GPU's own nodes: /dev/nvidia0, /dev/dri/renderD128
  int numa_node = -1;
  std::string cpu_affinity;         // CPU list in kernel syntax, "0-23,48-71"; empty when unknown
  std::optional<bool> mig_enabled;  // current MIG mode
  std::vector<MigDevice> mig_devices;
  std::optional<bool> ecc_enabled;  // current ECC mode
  // AMD MI300-class partitioning, as the admin set it (amdgpu's current_compute_partition
  // and current_memory_partition): "SPX", "DPX", "TPX", "QPX", "CPX" and "NPS1", "NPS2",
  // "NPS4", "NPS8"; empty = unknown or a GPU without partitioning. In a mode other than
  // SPX each partition is its own ROCm device, listed as a GpuInfo of its own.
  std::string compute_partition;
  std::string memory_partition;
  int compute_units = 0;  // AMD: CUs of this device (KFD simd_count / simd_per_cu); 0 unknown
  std::optional<int> utilization_percent;
  std::optional<int> temperature_celsius;
  std::optional<double> power_watts;
  std::optional<double> power_limit_watts;
  std::string backend;  // which backend reported it: "nvml", "rocm-smi", "sysfs", "fake"
  // How a share of this GPU is held to its size (docs/sharing.md): "mps" (an MPS server
  // caps each client's threads and memory), "dmem" (the kernel's dmem cgroup controller
  // caps the job's device memory), "none" (shares are scheduled, not enforced); "mig" is
  // reserved for MIG instances. Set by the agent, not discovery:
  // empty = not stated (discovery output, agents before it).
  std::string enforcement;
  friend bool operator==(const GpuInfo&, const GpuInfo&) = default;
};

// The values GpuInfo::enforcement may take, besides empty.
inline constexpr const char* kEnforcementModes[] = {"mps", "mig", "dmem", "none"};
bool IsEnforcementMode(std::string_view mode);

// The values GpuInfo::compute_partition and memory_partition may take, besides empty.
bool IsComputePartitionMode(std::string_view mode);
bool IsMemoryPartitionMode(std::string_view mode);

// A direct or PCIe relation between two GPUs of the node, named by PCI bus id.
struct GpuLink {
  std::string a;         // pci_bus_id of one GPU
  std::string b;         // pci_bus_id of the other
  int nvlink_count = 0;  // NVLink links between them (NVIDIA)
  int xgmi_count = 0;    // XGMI links between them (AMD); 0 when not directly linked
  PcieLevel pcie_level = PcieLevel::kUnknown;
  friend bool operator==(const GpuLink&, const GpuLink&) = default;
};

// What one vendor's kernel driver and user-space stack look like on the node.
struct DriverInfo {
  std::string version;          // NVIDIA "580.95.05"; AMD amdgpu/ROCm driver version if known
  std::string runtime_version;  // NVIDIA: newest CUDA the driver supports ("13.0"); AMD: ROCm
  std::vector<std::string> libraries;      // host user-space driver libraries (absolute paths)
  std::vector<std::string> control_nodes;  // /dev/nvidiactl, /dev/nvidia-uvm, /dev/kfd, ...
  friend bool operator==(const DriverInfo&, const DriverInfo&) = default;
};

// Something discovery wants the user to know: a missing library, a failing call.
struct Diagnostic {
  std::string backend;  // "nvml"
  std::string message;  // "libnvidia-ml.so.1 not found: install the NVIDIA driver ..."
  friend bool operator==(const Diagnostic&, const Diagnostic&) = default;
};

struct NodeInfo {
  std::string hostname;
  std::optional<DriverInfo> nvidia;
  std::optional<DriverInfo> amd;
  std::vector<GpuInfo> gpus;   // sorted by vendor, then index
  std::vector<GpuLink> links;  // one entry per unordered pair that has any relation known
  std::vector<Diagnostic> diagnostics;
  friend bool operator==(const NodeInfo&, const NodeInfo&) = default;
};

// Canonical PCI bus id: lower case, 4-digit domain ("00000000:3B:00.0" -> "0000:3b:00.0").
// Returns the input lower-cased if it does not look like a bus id.
std::string CanonicalPciBusId(std::string_view bus_id);

// Finds the GPU with `pci_bus_id`, or nullptr.
const GpuInfo* FindGpuByPci(const NodeInfo& node, std::string_view pci_bus_id);

}  // namespace gpupool::gpu
