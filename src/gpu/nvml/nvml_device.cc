#include "gpu/nvml/nvml_device.h"

#include <string>

#include "common/file_util.h"
#include "common/strings.h"
#include "gpu/nvml/nvml_values.h"

namespace gpupool::gpu::nvml {
namespace {

// Sanity bounds: values outside them come from a broken driver or library, and
// reporting them would mislead a scheduler more than reporting nothing.
constexpr unsigned kMaxMinorNumber = 4096;
constexpr unsigned kMaxNvmlNumaNode = 4096;
constexpr unsigned kMaxTemperatureCelsius = 300;
constexpr unsigned kMaxMilliwatts = 100'000'000;  // 100 kW: no board draws that
constexpr unsigned kMaxMigDevices = 64;           // A100/H100 have 7 slots
constexpr unsigned kCpuMaskWords = 64;            // 4096 CPUs with 64-bit longs

// What one GPU's queries share.
struct Ctx {
  const Functions& fn;
  DiagnosticSink* sink;
  int index;
  std::string Who() const { return "GPU " + std::to_string(index); }
};

std::string ReadString(const Ctx& c, DeviceStringFn fn, const char* symbol, Device dev,
                       const char* what) {
  if (fn == nullptr) {
    c.sink->MissingSymbol(symbol, std::string(what) + " is unknown");
    return "";
  }
  char buf[kDeviceNameBufferSize + 1] = {};
  const Return rc = fn(dev, buf, kDeviceNameBufferSize);
  if (rc != kSuccess) {
    c.sink->CallFailed(symbol, rc, c.index);
    return "";
  }
  return BoundedString(buf, kDeviceNameBufferSize);
}

void QueryPci(const Ctx& c, Device dev, GpuInfo* gpu) {
  DevicePciFn fn = c.fn.device_get_pci_info_v3;
  const char* symbol = "nvmlDeviceGetPciInfo_v3";
  if (fn == nullptr) {
    fn = c.fn.device_get_pci_info_v2;  // same struct, older driver
    symbol = "nvmlDeviceGetPciInfo_v2";
  }
  if (fn == nullptr) {
    c.sink->MissingSymbol("nvmlDeviceGetPciInfo_v3",
                          "PCI bus ids, NUMA nodes and topology are unknown");
    return;
  }
  PciInfo info{};
  const Return rc = fn(dev, &info);
  if (rc != kSuccess) {
    c.sink->CallFailed(symbol, rc, c.index);
    return;
  }
  if (auto id = PciBusIdFromInfo(info, /*legacy_layout=*/false)) {
    gpu->pci_bus_id = *id;
  } else {
    c.sink->Note(c.Who() + ": NVML reports an unusable PCI bus id '" +
                 BoundedString(info.bus_id, sizeof info.bus_id) + "'; it is left unknown");
  }
}

void QueryMemory(const Ctx& c, Device dev, uint64_t* total, uint64_t* used) {
  if (c.fn.device_get_memory_info == nullptr) {
    c.sink->MissingSymbol("nvmlDeviceGetMemoryInfo", "GPU memory sizes are unknown");
    return;
  }
  Memory mem{};
  const Return rc = c.fn.device_get_memory_info(dev, &mem);
  if (rc != kSuccess) {
    c.sink->CallFailed("nvmlDeviceGetMemoryInfo", rc, c.index);
    return;
  }
  if (mem.total == 0) {
    c.sink->Note(c.Who() + ": NVML reports 0 bytes of memory; memory is left unknown");
    return;
  }
  *total = mem.total;
  *used = mem.used;
  if (mem.used > mem.total) {
    // A scheduler computing total - used must not see a wrapped-around free size.
    c.sink->Note(c.Who() + ": NVML reports " + std::to_string(mem.used) + " bytes used of " +
                 std::to_string(mem.total) + " in total; used memory is capped at the total");
    *used = mem.total;
  }
}

void QueryComputeCapability(const Ctx& c, Device dev, GpuInfo* gpu) {
  if (c.fn.device_get_cuda_compute_capability == nullptr) {
    c.sink->MissingSymbol("nvmlDeviceGetCudaComputeCapability", "compute capability is unknown");
    return;
  }
  int major = 0;
  int minor = 0;
  const Return rc = c.fn.device_get_cuda_compute_capability(dev, &major, &minor);
  if (rc != kSuccess) {
    c.sink->CallFailed("nvmlDeviceGetCudaComputeCapability", rc, c.index);
  } else if (major < 1 || major > 99 || minor < 0 || minor > 99) {
    c.sink->Note(c.Who() + ": NVML reports compute capability " + std::to_string(major) + "." +
                 std::to_string(minor) + "; it is left unknown");
  } else {
    gpu->compute_capability = ComputeCapability{major, minor};
  }
}

void QueryMinor(const Ctx& c, Device dev, GpuInfo* gpu) {
  if (c.fn.device_get_minor_number == nullptr) {
    c.sink->MissingSymbol("nvmlDeviceGetMinorNumber", "device nodes /dev/nvidiaN are unknown");
    return;
  }
  unsigned minor = 0;
  const Return rc = c.fn.device_get_minor_number(dev, &minor);
  if (rc != kSuccess) {
    c.sink->CallFailed("nvmlDeviceGetMinorNumber", rc, c.index);
  } else if (minor >= kMaxMinorNumber) {
    c.sink->Note(c.Who() + ": NVML reports device minor number " + std::to_string(minor) +
                 "; the device node is left unknown");
  } else {
    gpu->minor_number = static_cast<int>(minor);
    // Reported as the path inside a container whether or not dev_root has it: CDI and
    // the launcher need the name, and a missing node is the driver's problem to show.
    gpu->device_nodes = {"/dev/nvidia" + std::to_string(minor)};
  }
}

std::string SysfsDeviceFile(const DiscoveryOptions& options, const std::string& bus_id,
                            const char* file) {
  return options.sysfs_root + "/bus/pci/devices/" + bus_id + "/" + file;
}

void QueryNuma(const Ctx& c, const DiscoveryOptions& options, Device dev, GpuInfo* gpu) {
  if (c.fn.device_get_numa_node_id == nullptr) {
    c.sink->MissingSymbol("nvmlDeviceGetNumaNodeId", "NUMA nodes are read from sysfs instead");
  } else {
    unsigned node = 0;
    const Return rc = c.fn.device_get_numa_node_id(dev, &node);
    if (rc == kSuccess && node < kMaxNvmlNumaNode) {
      gpu->numa_node = static_cast<int>(node);
      return;
    }
    // NOT_SUPPORTED is the normal answer on machines without NUMA; sysfs then decides.
    if (rc != kSuccess && rc != kErrorNotSupported) {
      c.sink->CallFailed("nvmlDeviceGetNumaNodeId", rc, c.index);
    }
  }
  if (gpu->pci_bus_id.empty()) return;
  auto text = ReadFileToString(SysfsDeviceFile(options, gpu->pci_bus_id, "numa_node"), 64);
  if (!text.ok()) return;
  if (auto n = ParseUint64(Trim(*text)); n && *n < kMaxNvmlNumaNode) {
    gpu->numa_node = static_cast<int>(*n);  // "-1" (no NUMA) fails the parse: unknown
  }
}

void QueryCpuAffinity(const Ctx& c, const DiscoveryOptions& options, Device dev, GpuInfo* gpu) {
  if (c.fn.device_get_cpu_affinity == nullptr) {
    c.sink->MissingSymbol("nvmlDeviceGetCpuAffinity", "CPU affinity is read from sysfs instead");
  } else {
    unsigned long mask[kCpuMaskWords] = {};
    const Return rc = c.fn.device_get_cpu_affinity(dev, kCpuMaskWords, mask);
    if (rc == kSuccess) {
      gpu->cpu_affinity = CpuListFromMask(mask, kCpuMaskWords);
      if (!gpu->cpu_affinity.empty()) return;
    } else if (rc != kErrorNotSupported) {
      c.sink->CallFailed("nvmlDeviceGetCpuAffinity", rc, c.index);
    }
  }
  if (gpu->pci_bus_id.empty()) return;
  auto text = ReadFileToString(SysfsDeviceFile(options, gpu->pci_bus_id, "local_cpulist"), 4096);
  if (!text.ok()) return;
  const std::string_view list = Trim(*text);
  if (IsCpuList(list)) gpu->cpu_affinity = std::string(list);
}

std::optional<int> InstanceId(const Ctx& c, DeviceUintFn fn, const char* symbol, Device mig) {
  if (fn == nullptr) {
    c.sink->MissingSymbol(symbol, "MIG instance ids are unknown");
    return std::nullopt;
  }
  unsigned id = 0;
  const Return rc = fn(mig, &id);
  if (rc != kSuccess) {
    c.sink->CallFailed(symbol, rc, c.index);
    return std::nullopt;
  }
  if (id > 1024) return std::nullopt;
  return static_cast<int>(id);
}

void QueryMigDevices(const Ctx& c, Device dev, GpuInfo* gpu) {
  if (c.fn.device_get_max_mig_device_count == nullptr ||
      c.fn.device_get_mig_device_handle_by_index == nullptr) {
    c.sink->MissingSymbol(c.fn.device_get_max_mig_device_count == nullptr
                              ? "nvmlDeviceGetMaxMigDeviceCount"
                              : "nvmlDeviceGetMigDeviceHandleByIndex",
                          "MIG devices are unknown");
    return;
  }
  unsigned max = 0;
  if (Return rc = c.fn.device_get_max_mig_device_count(dev, &max); rc != kSuccess) {
    c.sink->CallFailed("nvmlDeviceGetMaxMigDeviceCount", rc, c.index);
    return;
  }
  if (max > kMaxMigDevices) {
    c.sink->Note(c.Who() + ": NVML reports " + std::to_string(max) + " MIG slots; only the first " +
                 std::to_string(kMaxMigDevices) + " are read");
    max = kMaxMigDevices;
  }
  for (unsigned slot = 0; slot < max; ++slot) {
    Device mig = nullptr;
    const Return rc = c.fn.device_get_mig_device_handle_by_index(dev, slot, &mig);
    if (rc == kErrorNotFound) continue;  // an empty slot
    if (rc != kSuccess || mig == nullptr) {
      c.sink->CallFailed("nvmlDeviceGetMigDeviceHandleByIndex", rc, c.index);
      continue;
    }
    MigDevice m;
    m.uuid = ReadString(c, c.fn.device_get_uuid, "nvmlDeviceGetUUID", mig, "the UUID");
    m.profile = MigProfileFromName(
        ReadString(c, c.fn.device_get_name, "nvmlDeviceGetName", mig, "the name"));
    uint64_t used = 0;
    QueryMemory(c, mig, &m.memory_total_bytes, &used);
    m.gpu_instance_id =
        InstanceId(c, c.fn.device_get_gpu_instance_id, "nvmlDeviceGetGpuInstanceId", mig)
            .value_or(-1);
    m.compute_instance_id =
        InstanceId(c, c.fn.device_get_compute_instance_id, "nvmlDeviceGetComputeInstanceId", mig)
            .value_or(-1);
    gpu->mig_devices.push_back(std::move(m));
  }
}

void QueryMig(const Ctx& c, Device dev, GpuInfo* gpu) {
  if (c.fn.device_get_mig_mode == nullptr) {
    c.sink->MissingSymbol("nvmlDeviceGetMigMode", "MIG mode and MIG devices are unknown");
    return;
  }
  unsigned current = 0;
  unsigned pending = 0;
  const Return rc = c.fn.device_get_mig_mode(dev, &current, &pending);
  if (rc == kErrorNotSupported) {
    gpu->mig_enabled = false;  // a GPU without MIG is certainly not in MIG mode
    return;
  }
  if (rc != kSuccess) {
    c.sink->CallFailed("nvmlDeviceGetMigMode", rc, c.index);
    return;
  }
  if (current != kMigEnable && current != kMigDisable) {
    c.sink->Note(c.Who() + ": NVML reports MIG mode " + std::to_string(current) +
                 "; it is left unknown");
    return;
  }
  gpu->mig_enabled = current == kMigEnable;
  if (*gpu->mig_enabled) QueryMigDevices(c, dev, gpu);
}

void QueryEcc(const Ctx& c, Device dev, GpuInfo* gpu) {
  if (c.fn.device_get_ecc_mode == nullptr) {
    c.sink->MissingSymbol("nvmlDeviceGetEccMode", "ECC mode is unknown");
    return;
  }
  unsigned current = 0;
  unsigned pending = 0;
  const Return rc = c.fn.device_get_ecc_mode(dev, &current, &pending);
  if (rc == kErrorNotSupported) {
    gpu->ecc_enabled = false;  // GPUs without ECC (GeForce) run without it
  } else if (rc != kSuccess) {
    c.sink->CallFailed("nvmlDeviceGetEccMode", rc, c.index);
  } else if (current == kFeatureEnabled || current == kFeatureDisabled) {
    gpu->ecc_enabled = current == kFeatureEnabled;
  } else {
    c.sink->Note(c.Who() + ": NVML reports ECC mode " + std::to_string(current) +
                 "; it is left unknown");
  }
}

void QueryTelemetry(const Ctx& c, Device dev, GpuInfo* gpu) {
  if (c.fn.device_get_utilization_rates == nullptr) {
    c.sink->MissingSymbol("nvmlDeviceGetUtilizationRates", "utilisation is unknown");
  } else {
    Utilization u{};
    const Return rc = c.fn.device_get_utilization_rates(dev, &u);
    if (rc != kSuccess) {
      c.sink->CallFailed("nvmlDeviceGetUtilizationRates", rc, c.index);
    } else if (u.gpu > 100) {
      c.sink->Note(c.Who() + ": NVML reports " + std::to_string(u.gpu) +
                   "% utilisation; it is left unknown");
    } else {
      gpu->utilization_percent = static_cast<int>(u.gpu);
    }
  }
  if (c.fn.device_get_temperature == nullptr) {
    c.sink->MissingSymbol("nvmlDeviceGetTemperature", "temperature is unknown");
  } else {
    unsigned t = 0;
    const Return rc = c.fn.device_get_temperature(dev, kTemperatureGpu, &t);
    if (rc != kSuccess) {
      c.sink->CallFailed("nvmlDeviceGetTemperature", rc, c.index);
    } else if (t > kMaxTemperatureCelsius) {
      c.sink->Note(c.Who() + ": NVML reports " + std::to_string(t) +
                   " degrees Celsius; the temperature is left unknown");
    } else {
      gpu->temperature_celsius = static_cast<int>(t);
    }
  }
  auto watts = [&](DeviceUintFn fn, const char* symbol, const char* what,
                   std::optional<double>* out) {
    if (fn == nullptr) {
      c.sink->MissingSymbol(symbol, std::string(what) + " is unknown");
      return;
    }
    unsigned milliwatts = 0;
    const Return rc = fn(dev, &milliwatts);
    if (rc != kSuccess) {
      c.sink->CallFailed(symbol, rc, c.index);
      return;
    }
    if (milliwatts > kMaxMilliwatts) {
      c.sink->Note(c.Who() + ": NVML reports " + std::to_string(milliwatts) + " mW of " + what +
                   "; it is left unknown");
      return;
    }
    *out = milliwatts / 1000.0;
  };
  watts(c.fn.device_get_power_usage, "nvmlDeviceGetPowerUsage", "power draw", &gpu->power_watts);
  watts(c.fn.device_get_enforced_power_limit, "nvmlDeviceGetEnforcedPowerLimit", "power limit",
        &gpu->power_limit_watts);
}

}  // namespace

GpuInfo QueryGpu(const NvmlLibrary& library, const DiscoveryOptions& options, int index,
                 Device device, DiagnosticSink* sink) {
  const Ctx c{library.fn(), sink, index};
  GpuInfo gpu;
  gpu.vendor = Vendor::kNvidia;
  gpu.backend = "nvml";
  gpu.index = index;
  gpu.name = ReadString(c, c.fn.device_get_name, "nvmlDeviceGetName", device, "the GPU name");
  gpu.uuid = ReadString(c, c.fn.device_get_uuid, "nvmlDeviceGetUUID", device, "the GPU UUID");
  QueryPci(c, device, &gpu);
  QueryMemory(c, device, &gpu.memory_total_bytes, &gpu.memory_used_bytes);
  QueryComputeCapability(c, device, &gpu);
  QueryMinor(c, device, &gpu);
  QueryNuma(c, options, device, &gpu);
  QueryCpuAffinity(c, options, device, &gpu);
  QueryMig(c, device, &gpu);
  QueryEcc(c, device, &gpu);
  QueryTelemetry(c, device, &gpu);
  return gpu;
}

}  // namespace gpupool::gpu::nvml
