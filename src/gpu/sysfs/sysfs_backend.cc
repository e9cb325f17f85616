#include "gpu/sysfs/sysfs_backend.h"

#include <dlfcn.h>

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "common/strings.h"
#include "gpu/rocm/rocm_smi_library.h"
#include "gpu/sysfs/pci_device.h"
#include "gpu/sysfs/pci_ids.h"
#include "gpu/sysfs/sysfs_reader.h"

namespace gpupool::gpu {
namespace {

constexpr std::string_view kBackend = "sysfs";
constexpr std::string_view kPciDevicesDir = "bus/pci/devices";
constexpr std::string_view kCouldNotBeLoaded = " could not be loaded: ";

bool CanLoad(const std::vector<std::string>& candidates) {
  for (const std::string& c : candidates) {
    // RTLD_LAZY: we only ask whether the file loads, without resolving every symbol.
    if (void* h = dlopen(c.c_str(), RTLD_LAZY | RTLD_LOCAL); h != nullptr) {
      dlclose(h);
      return true;
    }
  }
  return false;
}

// What to install for a vendor whose library is missing, and which file it is.
struct LibraryHint {
  std::string library;
  std::vector<std::string> candidates;
  std::string install;
};

std::optional<LibraryHint> HintFor(Vendor vendor, const DiscoveryOptions& options) {
  switch (vendor) {
    case Vendor::kNvidia:
      return LibraryHint{options.nvml_library,
                         {options.nvml_library},
                         "install the NVIDIA driver (Debian: nvidia-driver / libnvidia-ml1)"};
    case Vendor::kAmd:
      return LibraryHint{options.rocm_smi_library,
                         rocm::RocmSmiLibraryCandidates(options.rocm_smi_library),
                         "install ROCm SMI (Debian: librocm-smi64-1)"};
    case Vendor::kIntel:
    case Vendor::kUnknown:
      return std::nullopt;  // gpupool has no Intel library backend to point at
  }
  return std::nullopt;
}

std::string MissingLibraryPrefix(Vendor vendor) {
  // Built by appending: GCC 12 at -O3 warns falsely (-Wrestrict) on `" " + string`.
  std::string prefix = " ";
  prefix += VendorDisplayName(vendor);
  prefix += " GPU";
  return prefix;
}

class SysfsBackend final : public GpuBackend {
 public:
  SysfsBackend(DiscoveryOptions options, std::vector<std::string> pci_ids_files)
      : options_(std::move(options)), pci_ids_files_(std::move(pci_ids_files)) {}

  std::string_view name() const override { return kBackend; }

  Result<NodeInfo> Discover() override {
    SysfsReader reader(options_.sysfs_root);
    if (!reader.Exists(kPciDevicesDir)) {
      return Status::Unavailable("cannot list PCI devices: " + reader.Path(kPciDevicesDir) +
                                 " does not exist (is sysfs mounted?)");
    }
    DiagnosticSink sink{std::string(kBackend)};
    std::vector<PciDevice> found;
    for (const std::string& entry : reader.ListDir(kPciDevicesDir)) {
      const std::string dir = std::string(kPciDevicesDir) + "/" + entry;
      // Only look further at display controllers of the vendors we know, so that a
      // garbled attribute of a network card is not our business.
      std::optional<uint64_t> cls = reader.ReadHex(dir + "/class", nullptr, 0xffffff);
      std::optional<uint64_t> vendor = reader.ReadHex(dir + "/vendor", nullptr, 0xffff);
      if (!cls || !vendor || !IsDisplayController(static_cast<uint32_t>(*cls)) ||
          VendorOfPciId(static_cast<uint32_t>(*vendor)) == Vendor::kUnknown) {
        continue;
      }
      std::optional<std::string> bus = ParsePciBusId(entry);
      if (!bus) {
        sink.Add("left out " + reader.Path(dir) + ": its name is not a PCI bus id");
        continue;
      }
      found.push_back(ReadPciDevice(reader, dir, *bus, &sink));
    }
    std::sort(found.begin(), found.end(),
              [](const PciDevice& a, const PciDevice& b) { return a.bus_id < b.bus_id; });

    std::set<PciId> wanted;
    for (const PciDevice& d : found) wanted.insert({d.vendor_id, d.device_id});
    const std::map<PciId, std::string> names = LookupPciDeviceNames(pci_ids_files_, wanted);

    NodeInfo node;
    std::map<Vendor, int> per_vendor;
    for (const PciDevice& d : found) {
      GpuInfo g;
      g.vendor = VendorOfPciId(d.vendor_id);
      g.index = per_vendor[g.vendor]++;
      g.name = GpuNameFromPciIds(d.vendor_id, d.device_id, names);
      g.pci_bus_id = d.bus_id;
      g.numa_node = d.numa_node;
      g.cpu_affinity = d.cpu_affinity;
      // NVIDIA's /dev/nvidiaN minor is not in sysfs; DRM minors are.
      if (g.vendor != Vendor::kNvidia) g.minor_number = d.render_minor;
      if (!d.render_node.empty()) g.device_nodes.push_back(d.render_node);
      if (!d.card_node.empty()) g.device_nodes.push_back(d.card_node);
      g.backend = std::string(kBackend);
      node.gpus.push_back(std::move(g));
    }
    for (size_t i = 0; i < node.gpus.size(); ++i) {
      for (size_t j = i + 1; j < node.gpus.size(); ++j) {
        const GpuInfo& a = node.gpus[i];
        const GpuInfo& b = node.gpus[j];
        PcieLevel level = PcieLevelFromNuma(a.numa_node, b.numa_node);
        if (a.vendor == b.vendor && level != PcieLevel::kUnknown) {
          node.links.push_back({a.pci_bus_id, b.pci_bus_id, 0, 0, level});
        }
      }
    }
    for (const auto& [vendor, count] : per_vendor) {
      std::optional<LibraryHint> hint = HintFor(vendor, options_);
      if (!hint || CanLoad(hint->candidates)) continue;
      node.diagnostics.push_back(
          {std::string(kBackend), "found " + std::to_string(count) + MissingLibraryPrefix(vendor) +
                                      (count == 1 ? "" : "s") + " but " + hint->library +
                                      std::string(kCouldNotBeLoaded) + hint->install});
    }
    for (Diagnostic& d : sink.Take()) node.diagnostics.push_back(std::move(d));
    return node;
  }

 private:
  DiscoveryOptions options_;
  std::vector<std::string> pci_ids_files_;
};

}  // namespace

std::unique_ptr<GpuBackend> NewSysfsBackend(const DiscoveryOptions& options) {
  return NewSysfsBackendWithPciIds(options, DefaultPciIdsFiles());
}

std::unique_ptr<GpuBackend> NewSysfsBackendWithPciIds(const DiscoveryOptions& options,
                                                      std::vector<std::string> pci_ids_files) {
  return std::make_unique<SysfsBackend>(options, std::move(pci_ids_files));
}

bool IsMissingLibraryDiagnostic(const Diagnostic& diagnostic, Vendor vendor) {
  const std::string_view m = diagnostic.message;
  return diagnostic.backend == kBackend && StartsWith(m, "found ") &&
         m.find(MissingLibraryPrefix(vendor)) != std::string_view::npos &&
         m.find(kCouldNotBeLoaded) != std::string_view::npos;
}

}  // namespace gpupool::gpu
