#include "gpu/rocm/amdgpu_sysfs.h"

#include <algorithm>
#include <cinttypes>
#include <set>

#include "common/strings.h"
#include "gpu/sysfs/pci_device.h"

namespace gpupool::gpu::rocm {
namespace {

constexpr std::string_view kDrmClassDir = "class/drm";
// Sanity bounds: a GPU with more than 64 TiB of VRAM or hotter than 500 C is a bad file.
constexpr uint64_t kMaxVramBytes = 64ull << 40;
constexpr int64_t kMaxMilliCelsius = 500'000;
constexpr uint64_t kMaxMicroWatts = 100'000'000;

bool IsCardName(std::string_view name) {
  if (!StartsWith(name, "card") || name.size() == 4) return false;
  return name.substr(4).find_first_not_of("0123456789") == std::string_view::npos;
}

std::string UniqueIdString(uint64_t id) { return StrFormat("0x%016" PRIx64, id); }

// Temperature and average power from the first hwmon directory that has them.
void ReadHwmon(const SysfsReader& reader, const std::string& device_dir, GpuInfo* gpu,
               DiagnosticSink* sink) {
  for (const std::string& hw : reader.ListDir(device_dir + "/hwmon")) {
    const std::string dir = device_dir + "/hwmon/" + hw;
    if (!gpu->temperature_celsius) {
      if (auto t =
              reader.ReadInt(dir + "/temp1_input", sink, -kMaxMilliCelsius, kMaxMilliCelsius)) {
        gpu->temperature_celsius = static_cast<int>(*t / 1000);
      }
    }
    if (!gpu->power_watts) {
      if (auto p = reader.ReadUint(dir + "/power1_average", sink, kMaxMicroWatts)) {
        gpu->power_watts = static_cast<double>(*p) / 1e6;
      }
    }
  }
}

// One partition-mode file: empty when absent, the mode when known, else a Diagnostic.
std::string ReadPartitionMode(const SysfsReader& reader, const std::string& file,
                              bool (*known)(std::string_view), DiagnosticSink* sink) {
  std::optional<std::string> text = reader.ReadText(file);
  if (!text || text->empty()) return "";
  if (known(*text)) return *text;
  sink->Add("ignored " + reader.Path(file) + ": " + QuoteForMessage(*text) +
            " is not a partition mode amdgpu writes; the GPU's partitioning is reported as "
            "unknown");
  return "";
}

}  // namespace

void AddPartitionDetails(const SysfsReader& reader, const std::vector<KfdNode>& kfd, GpuInfo* gpu,
                         DiagnosticSink* sink) {
  if (const KfdNode* node = FindKfdGpu(kfd, gpu->pci_bus_id);
      node != nullptr && gpu->compute_units <= 0) {
    gpu->compute_units = node->compute_units();
  }
  std::string dir = "bus/pci/devices/" + gpu->pci_bus_id;
  if (!reader.Exists(dir) && gpu->pci_bus_id.size() > 2 && gpu->pci_bus_id.back() != '0') {
    // A partition other than the first: its KFD location carries its number in the
    // function bits; the files are the physical GPU's, function 0.
    dir = "bus/pci/devices/" + gpu->pci_bus_id.substr(0, gpu->pci_bus_id.size() - 1) + "0";
  }
  if (!reader.Exists(dir)) return;
  if (gpu->compute_partition.empty()) {
    gpu->compute_partition =
        ReadPartitionMode(reader, dir + "/current_compute_partition", IsComputePartitionMode, sink);
  }
  if (gpu->memory_partition.empty()) {
    gpu->memory_partition =
        ReadPartitionMode(reader, dir + "/current_memory_partition", IsMemoryPartitionMode, sink);
  }
}

void AddKfdDetails(const std::vector<KfdNode>& kfd, GpuInfo* gpu) {
  const KfdNode* node = FindKfdGpu(kfd, gpu->pci_bus_id);
  if (node == nullptr) return;
  if (gpu->gfx_target.empty()) gpu->gfx_target = GfxTargetName(node->gfx_target_version);
  if (gpu->minor_number < 0 && node->drm_render_minor >= 0) {
    gpu->minor_number = node->drm_render_minor;
  }
  if (gpu->uuid.empty() && node->unique_id != 0) gpu->uuid = UniqueIdString(node->unique_id);
}

void AddSysfsDetails(const SysfsReader& reader, const std::vector<KfdNode>& kfd, GpuInfo* gpu,
                     DiagnosticSink* sink) {
  const std::string dir = "bus/pci/devices/" + gpu->pci_bus_id;
  if (reader.Exists(dir)) {
    PciDevice d = ReadPciDevice(reader, dir, gpu->pci_bus_id, sink);
    if (gpu->numa_node < 0) gpu->numa_node = d.numa_node;
    if (gpu->cpu_affinity.empty()) gpu->cpu_affinity = d.cpu_affinity;
    if (gpu->minor_number < 0 && d.render_minor >= 0) gpu->minor_number = d.render_minor;
    if (gpu->device_nodes.empty() && !d.render_node.empty()) {
      gpu->device_nodes.push_back(d.render_node);
    }
    if (!d.card_node.empty() && std::find(gpu->device_nodes.begin(), gpu->device_nodes.end(),
                                          d.card_node) == gpu->device_nodes.end()) {
      gpu->device_nodes.push_back(d.card_node);
    }
  }
  AddKfdDetails(kfd, gpu);
  AddPartitionDetails(reader, kfd, gpu, sink);
  if (gpu->device_nodes.empty() && gpu->minor_number >= 0) {
    gpu->device_nodes.push_back("/dev/dri/renderD" + std::to_string(gpu->minor_number));
  }
}

std::vector<GpuInfo> ReadAmdGpusFromSysfs(const SysfsReader& reader,
                                          const std::vector<KfdNode>& kfd,
                                          const std::vector<std::string>& pci_ids_files,
                                          DiagnosticSink* sink) {
  struct Found {
    PciDevice pci;
    std::string device_dir;
    std::string card;
  };
  std::map<std::string, Found> by_bus;  // sorted by bus id, one entry per GPU
  for (const std::string& card : reader.ListDir(kDrmClassDir)) {
    if (!IsCardName(card)) continue;
    const std::string dir = std::string(kDrmClassDir) + "/" + card + "/device";
    std::optional<uint64_t> vendor = reader.ReadHex(dir + "/vendor", sink, 0xffff);
    if (vendor != kPciVendorAmd) continue;
    std::optional<std::string> bus = PciBusIdOfDir(reader, dir);
    if (!bus) {
      sink->Add("left out " + reader.Path(dir) +
                ": its PCI bus id is neither its directory name nor in its uevent file");
      continue;
    }
    if (by_bus.count(*bus) > 0) continue;
    by_bus[*bus] = {ReadPciDevice(reader, dir, *bus, sink), dir, card};
  }

  std::set<PciId> wanted;
  for (const auto& [bus, f] : by_bus) wanted.insert({f.pci.vendor_id, f.pci.device_id});
  std::map<PciId, std::string> names;

  std::vector<GpuInfo> gpus;
  for (auto& [bus, f] : by_bus) {
    GpuInfo g;
    g.vendor = Vendor::kAmd;
    g.backend = "rocm-smi";
    g.index = static_cast<int>(gpus.size());
    g.pci_bus_id = bus;
    if (auto product = reader.ReadText(f.device_dir + "/product_name");
        product && !product->empty()) {
      g.name = SanitizeUtf8(*product);
    } else {
      if (names.empty()) names = LookupPciDeviceNames(pci_ids_files, wanted);
      g.name = GpuNameFromPciIds(f.pci.vendor_id, f.pci.device_id, names);
    }
    g.memory_total_bytes =
        reader.ReadUint(f.device_dir + "/mem_info_vram_total", sink, kMaxVramBytes).value_or(0);
    g.memory_used_bytes =
        reader.ReadUint(f.device_dir + "/mem_info_vram_used", sink, kMaxVramBytes).value_or(0);
    if (g.memory_used_bytes > g.memory_total_bytes) {
      sink->Add(bus + ": mem_info_vram_used (" + std::to_string(g.memory_used_bytes) +
                ") exceeds mem_info_vram_total (" + std::to_string(g.memory_total_bytes) +
                "); used memory is reported as unknown");
      g.memory_used_bytes = 0;
    }
    if (auto busy = reader.ReadUint(f.device_dir + "/gpu_busy_percent", sink, 100)) {
      g.utilization_percent = static_cast<int>(*busy);
    }
    if (auto id = reader.ReadHex(f.device_dir + "/unique_id", sink); id && *id != 0) {
      g.uuid = UniqueIdString(*id);
    }
    g.numa_node = f.pci.numa_node;
    g.cpu_affinity = f.pci.cpu_affinity;
    g.minor_number = f.pci.render_minor;
    if (!f.pci.render_node.empty()) g.device_nodes.push_back(f.pci.render_node);
    g.device_nodes.push_back(f.pci.card_node.empty() ? "/dev/dri/" + f.card : f.pci.card_node);
    ReadHwmon(reader, f.device_dir, &g, sink);
    AddKfdDetails(kfd, &g);
    AddPartitionDetails(reader, kfd, &g, sink);
    if (g.device_nodes.size() == 1 && g.minor_number >= 0) {
      // No render node in sysfs, but KFD knows its minor.
      g.device_nodes.insert(g.device_nodes.begin(),
                            "/dev/dri/renderD" + std::to_string(g.minor_number));
    }
    gpus.push_back(std::move(g));
  }
  return gpus;
}

XgmiCounts XgmiCountsFromKfd(const std::vector<KfdNode>& kfd) {
  std::map<int, std::string> bus_of;
  for (const KfdNode& n : kfd) {
    if (n.is_gpu()) bus_of[n.id] = n.pci_bus_id();
  }
  // Each direction of a link is listed by its source node; count each direction and keep
  // the larger, so a topology listing only one side still shows the link.
  std::map<std::pair<std::string, std::string>, std::pair<int, int>> directed;
  for (const KfdNode& n : kfd) {
    if (!n.is_gpu()) continue;
    for (const KfdIoLink& l : n.io_links) {
      auto to = bus_of.find(l.node_to);
      if (l.type != kKfdIoLinkTypeXgmi || to == bus_of.end() || to->first == n.id) continue;
      const std::string& a = bus_of[n.id];
      const std::string& b = to->second;
      if (a < b) {
        ++directed[{a, b}].first;
      } else {
        ++directed[{b, a}].second;
      }
    }
  }
  XgmiCounts out;
  for (const auto& [pair, counts] : directed) out[pair] = std::max(counts.first, counts.second);
  return out;
}

std::vector<GpuLink> BuildAmdLinks(const std::vector<GpuInfo>& gpus, const XgmiCounts& xgmi) {
  std::vector<GpuLink> links;
  for (size_t i = 0; i < gpus.size(); ++i) {
    for (size_t j = i + 1; j < gpus.size(); ++j) {
      const GpuInfo& a = gpus[i];
      const GpuInfo& b = gpus[j];
      if (a.pci_bus_id.empty() || b.pci_bus_id.empty() || a.pci_bus_id == b.pci_bus_id) continue;
      GpuLink l;
      l.a = a.pci_bus_id;
      l.b = b.pci_bus_id;
      auto key = a.pci_bus_id < b.pci_bus_id ? std::make_pair(a.pci_bus_id, b.pci_bus_id)
                                             : std::make_pair(b.pci_bus_id, a.pci_bus_id);
      if (auto it = xgmi.find(key); it != xgmi.end()) l.xgmi_count = it->second;
      l.pcie_level = PcieLevelFromNuma(a.numa_node, b.numa_node);
      if (l.xgmi_count > 0 || l.pcie_level != PcieLevel::kUnknown) links.push_back(std::move(l));
    }
  }
  return links;
}

}  // namespace gpupool::gpu::rocm
