#include "gpu/rocm/rocm_smi_backend.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

#include "common/file_util.h"
#include "common/strings.h"
#include "gpu/rocm/amdgpu_sysfs.h"
#include "gpu/rocm/kfd_topology.h"
#include "gpu/rocm/rocm_smi_library.h"
#include "gpu/sysfs/pci_device.h"
#include "gpu/sysfs/pci_ids.h"
#include "gpu/sysfs/sysfs_reader.h"

namespace gpupool::gpu {
namespace {

using rocm::RocmSmiApi;
using rocm::RocmSmiLibrary;
using rocm::RsmiStatus;

constexpr std::string_view kBackend = "rocm-smi";
// Far above any real node (8 MI300X in CPX mode are 64 devices); a larger count is a
// broken library, and reading it all would only produce noise.
constexpr uint32_t kMaxDevices = 1024;
constexpr uint32_t kMaxRocmNumaNode = 1023;
constexpr size_t kNameBufferLen = 256;

std::string BdfToBusId(uint64_t bdf) {
  // rocm-smi packs (domain << 32) | (partition << 28) | (bus << 8) | (device << 3) |
  // function, the low 32 bits being KFD's location_id.
  return rocm::KfdBusId(bdf >> 32, bdf & 0xffffffff);
}

std::string FromLibraryBuffer(const char* buf, size_t cap) {
  // The caller terminated the buffer, but a buggy library may have filled it all.
  return SanitizeUtf8(Trim(std::string_view(buf, strnlen(buf, cap))));
}

// Reports calls that fail for a reason other than "this GPU does not have it".
class CallChecker {
 public:
  CallChecker(const RocmSmiLibrary& lib, DiagnosticSink* sink) : lib_(lib), sink_(sink) {}

  bool Ok(const char* function, uint32_t gpu, RsmiStatus status) const {
    if (status == rocm::kRsmiSuccess) return true;
    if (status != rocm::kRsmiNotSupported) {
      sink_->Add(std::string(function) + " failed for GPU " + std::to_string(gpu) + ": " +
                 lib_.ErrorString(status) + "; the value is reported as unknown");
    }
    return false;
  }

 private:
  const RocmSmiLibrary& lib_;
  DiagnosticSink* sink_;
};

class RocmSmiBackend final : public GpuBackend {
 public:
  RocmSmiBackend(DiscoveryOptions options, std::vector<std::string> pci_ids_files)
      : options_(std::move(options)), pci_ids_files_(std::move(pci_ids_files)) {}

  std::string_view name() const override { return kBackend; }

  Result<NodeInfo> Discover() override {
    SysfsReader reader(options_.sysfs_root);
    DiagnosticSink sink{std::string(kBackend)};
    library_path_.clear();
    const std::vector<rocm::KfdNode> kfd = rocm::ReadKfdTopology(reader, &sink);
    // A host without DRM devices has no AMD GPU: ROCm SMI is not asked, as its rsmi_init
    // writes its failure to stderr ("Failed to open drm root directory"), noise in `gpupool
    // gpus` on every GPU-less host. Only for the real /sys, which ROCm SMI reads whatever
    // our root: under another root (a replay, a test) the library is asked as before.
    if (options_.sysfs_root == "/sys" && kfd.empty() && !reader.Exists("class/drm")) {
      return Status::Unavailable("no AMD GPU: " + reader.Path("class/drm") + " does not exist");
    }

    NodeInfo node;
    DriverInfo driver;
    Status library_status;
    bool library_loaded = false;
    {
      Result<std::unique_ptr<RocmSmiLibrary>> lib = RocmSmiLibrary::Load(options_.rocm_smi_library);
      library_loaded = lib.ok();
      library_status = lib.ok() ? (*lib)->Init() : lib.status();
      if (library_status.ok()) {
        library_status = ListWithLibrary(**lib, reader, kfd, &node, &driver, &sink);
      }
      // `lib` goes out of scope here: rsmi_shut_down and dlclose, before any early return.
    }
    if (!library_status.ok()) {
      node = NodeInfo{};
      driver = DriverInfo{};
      library_path_.clear();
      node.gpus = rocm::ReadAmdGpusFromSysfs(reader, kfd, pci_ids_files_, &sink);
      if (node.gpus.empty()) {
        return Status::Unavailable(library_status.message() + "; no AMD GPU found in " +
                                   reader.Path("class/drm") + " either");
      }
      node.links = rocm::BuildAmdLinks(node.gpus, rocm::XgmiCountsFromKfd(kfd));
      std::string message = library_status.message() +
                            ": listed the AMD GPUs from the amdgpu sysfs files and KFD topology "
                            "instead, with fewer details";
      if (!library_loaded) {
        message +=
            "; install ROCm SMI (Debian: librocm-smi64-1) or point "
            "GPUPOOL_ROCM_SMI_LIBRARY at it";
      }
      node.diagnostics.push_back({std::string(kBackend), std::move(message)});
    } else if (node.gpus.empty()) {
      // A working library that sees no AMD GPU: nothing to report, and no driver to describe.
      for (Diagnostic& d : sink.Take()) node.diagnostics.push_back(std::move(d));
      return node;
    }
    FillDriverInfo(reader, &driver);
    node.amd = std::move(driver);
    for (Diagnostic& d : sink.Take()) node.diagnostics.push_back(std::move(d));
    return node;
  }

 private:
  // Fails (and discovery falls back to sysfs) only when the library cannot count GPUs.
  Status ListWithLibrary(const RocmSmiLibrary& lib, const SysfsReader& reader,
                         const std::vector<rocm::KfdNode>& kfd, NodeInfo* node, DriverInfo* driver,
                         DiagnosticSink* sink) {
    const RocmSmiApi& api = lib.api();
    uint32_t count = 0;
    if (RsmiStatus s = api.num_monitor_devices(&count); s != rocm::kRsmiSuccess) {
      return Status::Unavailable("rsmi_num_monitor_devices failed: " + lib.ErrorString(s));
    }
    if (!lib.missing_optional().empty()) {
      std::string list;
      for (const std::string& s : lib.missing_optional()) list += (list.empty() ? "" : ", ") + s;
      sink->Add(LibraryDescription(lib) + " lacks " + list +
                ": those fields are reported as unknown; a newer ROCm provides them");
    }
    if (count > kMaxDevices) {
      sink->Add("rsmi_num_monitor_devices reported " + std::to_string(count) +
                " GPUs, more than any node has; only the first " + std::to_string(kMaxDevices) +
                " are read");
      count = kMaxDevices;
    }
    const CallChecker check(lib, sink);
    std::vector<uint32_t> device_of_gpu;  // rsmi index of each listed GPU
    for (uint32_t i = 0; i < count; ++i) {
      uint64_t bdf = 0;
      if (RsmiStatus s = api.dev_pci_id_get(i, &bdf); s != rocm::kRsmiSuccess) {
        sink->Add("rsmi_dev_pci_id_get failed for GPU " + std::to_string(i) + ": " +
                  lib.ErrorString(s) + "; the GPU is left out");
        continue;
      }
      GpuInfo g = ReadGpu(api, check, i, BdfToBusId(bdf), sink);
      rocm::AddSysfsDetails(reader, kfd, &g, sink);
      if (g.name.empty()) g.name = NameFromSysfs(reader, g.pci_bus_id);
      node->gpus.push_back(std::move(g));
      device_of_gpu.push_back(i);
    }
    node->links = rocm::BuildAmdLinks(node->gpus,
                                      XgmiFromLibrary(lib, check, node->gpus, device_of_gpu, kfd));
    if (api.version_str_get != nullptr) {
      char buf[kNameBufferLen + 1] = {};
      RsmiStatus s = api.version_str_get(rocm::kRsmiSwCompDriver, buf, kNameBufferLen);
      buf[kNameBufferLen] = '\0';
      if (s == rocm::kRsmiSuccess) {
        driver->version = FromLibraryBuffer(buf, kNameBufferLen);
      } else if (s != rocm::kRsmiNotSupported) {
        sink->Add("rsmi_version_str_get failed: " + lib.ErrorString(s) +
                  "; the driver version is read from sysfs instead");
      }
    }
    if (!lib.path().empty() && lib.path()[0] == '/') driver->libraries.push_back(lib.path());
    library_path_ = lib.path();
    return Status::Ok();
  }

  static GpuInfo ReadGpu(const RocmSmiApi& api, const CallChecker& check, uint32_t i,
                         std::string bus_id, DiagnosticSink* sink) {
    GpuInfo g;
    g.vendor = Vendor::kAmd;
    g.backend = std::string(kBackend);
    g.index = static_cast<int>(i);
    g.pci_bus_id = std::move(bus_id);
    if (api.dev_name_get != nullptr) {
      char buf[kNameBufferLen + 1] = {};
      RsmiStatus s = api.dev_name_get(i, buf, kNameBufferLen);
      buf[kNameBufferLen] = '\0';
      // A name cut to the buffer is still a name.
      if (s == rocm::kRsmiInsufficientSize || check.Ok("rsmi_dev_name_get", i, s)) {
        g.name = FromLibraryBuffer(buf, kNameBufferLen);
      }
    }
    if (uint64_t id = 0; api.dev_unique_id_get != nullptr &&
                         check.Ok("rsmi_dev_unique_id_get", i, api.dev_unique_id_get(i, &id)) &&
                         id != 0) {
      char buf[32];
      // Cannot fail or truncate: "0x" and 16 hex digits fit in buf.
      (void)std::snprintf(buf, sizeof buf, "0x%016" PRIx64, id);
      g.uuid = buf;
    }
    if (uint64_t total = 0; api.dev_memory_total_get != nullptr &&
                            check.Ok("rsmi_dev_memory_total_get", i,
                                     api.dev_memory_total_get(i, rocm::kRsmiMemTypeVram, &total))) {
      if (total == 0) {
        sink->Add("rsmi_dev_memory_total_get reported 0 bytes of VRAM for GPU " +
                  std::to_string(i) + "; its memory is reported as unknown");
      }
      g.memory_total_bytes = total;
    }
    if (uint64_t used = 0; api.dev_memory_usage_get != nullptr &&
                           check.Ok("rsmi_dev_memory_usage_get", i,
                                    api.dev_memory_usage_get(i, rocm::kRsmiMemTypeVram, &used))) {
      if (used > g.memory_total_bytes && g.memory_total_bytes > 0) {
        sink->Add("GPU " + std::to_string(i) + " reports " + std::to_string(used) +
                  " bytes of VRAM used out of " + std::to_string(g.memory_total_bytes) +
                  "; used memory is reported as unknown");
      } else if (g.memory_total_bytes > 0) {
        g.memory_used_bytes = used;
      }
    }
    if (uint32_t busy = 0;
        api.dev_busy_percent_get != nullptr &&
        check.Ok("rsmi_dev_busy_percent_get", i, api.dev_busy_percent_get(i, &busy))) {
      if (busy <= 100) {
        g.utilization_percent = static_cast<int>(busy);
      } else {
        sink->Add("rsmi_dev_busy_percent_get reported " + std::to_string(busy) + "% for GPU " +
                  std::to_string(i) + "; utilization is reported as unknown");
      }
    }
    // The library reports "no NUMA node" as (uint32_t)-1.
    if (uint32_t numa = 0;
        api.topo_numa_affinity_get != nullptr &&
        check.Ok("rsmi_topo_numa_affinity_get", i, api.topo_numa_affinity_get(i, &numa)) &&
        numa <= kMaxRocmNumaNode) {
      g.numa_node = static_cast<int>(numa);
    }
    if (uint32_t minor = 0;
        api.dev_drm_render_minor_get != nullptr &&
        check.Ok("rsmi_dev_drm_render_minor_get", i, api.dev_drm_render_minor_get(i, &minor)) &&
        minor > 0 && minor < (1u << 20)) {
      g.minor_number = static_cast<int>(minor);
      g.device_nodes.push_back("/dev/dri/renderD" + std::to_string(minor));
    }
    if (api.dev_temp_metric_get != nullptr) {
      // MI200 and later have no edge sensor; the junction sensor is the next best.
      for (uint32_t sensor : {rocm::kRsmiTempTypeEdge, rocm::kRsmiTempTypeJunction}) {
        int64_t milli = 0;
        RsmiStatus s = api.dev_temp_metric_get(i, sensor, rocm::kRsmiTempCurrent, &milli);
        if (s == rocm::kRsmiNotSupported) continue;
        if (check.Ok("rsmi_dev_temp_metric_get", i, s) && milli > -500'000 && milli < 500'000) {
          g.temperature_celsius = static_cast<int>(milli / 1000);
        }
        break;
      }
    }
    if (uint64_t microwatts = 0;
        api.dev_power_ave_get != nullptr &&
        check.Ok("rsmi_dev_power_ave_get", i, api.dev_power_ave_get(i, 0, &microwatts)) &&
        microwatts < 100'000'000) {
      g.power_watts = static_cast<double>(microwatts) / 1e6;
    }
    return g;
  }

  // XGMI from rsmi_topo_get_link_type (direct links are one hop), or from KFD when the
  // library lacks the call.
  static rocm::XgmiCounts XgmiFromLibrary(const RocmSmiLibrary& lib, const CallChecker& check,
                                          const std::vector<GpuInfo>& gpus,
                                          const std::vector<uint32_t>& device_of_gpu,
                                          const std::vector<rocm::KfdNode>& kfd) {
    if (lib.api().topo_get_link_type == nullptr) return rocm::XgmiCountsFromKfd(kfd);
    rocm::XgmiCounts out;
    for (size_t a = 0; a < gpus.size(); ++a) {
      for (size_t b = a + 1; b < gpus.size(); ++b) {
        uint64_t hops = 0;
        uint32_t type = 0;
        RsmiStatus s =
            lib.api().topo_get_link_type(device_of_gpu[a], device_of_gpu[b], &hops, &type);
        if (!check.Ok("rsmi_topo_get_link_type", device_of_gpu[a], s)) continue;
        if (type == rocm::kRsmiIoLinkXgmi && hops == 1) {
          const std::string& x = gpus[a].pci_bus_id;
          const std::string& y = gpus[b].pci_bus_id;
          out[x < y ? std::make_pair(x, y) : std::make_pair(y, x)] = 1;
        }
      }
    }
    return out;
  }

  std::string NameFromSysfs(const SysfsReader& reader, const std::string& bus_id) const {
    const std::string dir = "bus/pci/devices/" + bus_id;
    if (auto product = reader.ReadText(dir + "/product_name"); product && !product->empty()) {
      return SanitizeUtf8(*product);
    }
    const auto device =
        static_cast<uint32_t>(reader.ReadHex(dir + "/device", nullptr, 0xffff).value_or(0));
    if (device == 0) return "AMD GPU";
    return GpuNameFromPciIds(kPciVendorAmd, device,
                             LookupPciDeviceNames(pci_ids_files_, {{kPciVendorAmd, device}}));
  }

  static std::string LibraryDescription(const RocmSmiLibrary& lib) {
    std::string out = "ROCm SMI";
    rocm::RsmiVersion v{};
    if (lib.api().version_get != nullptr && lib.api().version_get(&v) == rocm::kRsmiSuccess) {
      out += " " + std::to_string(v.major) + "." + std::to_string(v.minor) + "." +
             std::to_string(v.patch);
    }
    return out + " (" + lib.path() + ")";
  }

  void FillDriverInfo(const SysfsReader& reader, DriverInfo* driver) const {
    if (driver->version.empty()) {
      if (auto v = reader.ReadText("module/amdgpu/version"); v && !v->empty()) {
        driver->version = SanitizeUtf8(*v);
      }
    }
    std::error_code ec;
    if (std::filesystem::exists(options_.dev_root + "/kfd", ec)) {
      driver->control_nodes.push_back("/dev/kfd");  // canonical container path
    }
    // ROCm installs lay out <root>/lib/librocm_smi64.so and <root>/.info/version.
    std::vector<std::string> version_files;
    if (!library_path_.empty() && library_path_[0] == '/') {
      std::filesystem::path root = std::filesystem::path(library_path_).parent_path().parent_path();
      version_files.push_back((root / ".info" / "version").string());
    }
    version_files.push_back("/opt/rocm/.info/version");
    for (const std::string& f : version_files) {
      Result<std::string> v = ReadFileToString(f, 4096);
      if (!v.ok()) continue;
      const std::string_view text = Trim(*v);
      if (!text.empty() && text.size() < 64) {
        driver->runtime_version = SanitizeUtf8(text);
        break;
      }
    }
  }

  DiscoveryOptions options_;
  std::vector<std::string> pci_ids_files_;
  std::string library_path_;  // of the last Discover(), for the ROCm version file
};

}  // namespace

std::unique_ptr<GpuBackend> NewRocmSmiBackend(const DiscoveryOptions& options) {
  return NewRocmSmiBackendWithPciIds(options, DefaultPciIdsFiles());
}

std::unique_ptr<GpuBackend> NewRocmSmiBackendWithPciIds(const DiscoveryOptions& options,
                                                        std::vector<std::string> pci_ids_files) {
  return std::make_unique<RocmSmiBackend>(options, std::move(pci_ids_files));
}

}  // namespace gpupool::gpu
