#include "gpu/sysfs/pci_device.h"

#include <cstdio>

#include "common/strings.h"

namespace gpupool::gpu {
namespace {

// Linux supports at most a few thousand NUMA nodes (CONFIG_NODES_SHIFT <= 10).
constexpr int64_t kMaxSysfsNumaNode = 1023;
constexpr std::string_view kRenderPrefix = "renderD";
constexpr std::string_view kCardPrefix = "card";

bool AllDigits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

}  // namespace

std::optional<std::string> ParsePciBusId(std::string_view text) {
  const std::string canonical = CanonicalPciBusId(text);
  // CanonicalPciBusId hands back the lower-cased input when it is not a bus id; a real
  // one comes back as exactly "dddd:bb:dd.f".
  if (canonical.size() != 12 || canonical[4] != ':' || canonical[7] != ':' ||
      canonical[10] != '.') {
    return std::nullopt;
  }
  return canonical;
}

bool IsDisplayController(uint32_t class_code) {
  const uint32_t base_sub = class_code >> 8;
  return base_sub == 0x0300 || base_sub == 0x0302 || base_sub == 0x0380;
}

Vendor VendorOfPciId(uint32_t vendor_id) {
  switch (vendor_id) {
    case kPciVendorNvidia:
      return Vendor::kNvidia;
    case kPciVendorAmd:
      return Vendor::kAmd;
    case kPciVendorIntel:
      return Vendor::kIntel;
    default:
      return Vendor::kUnknown;
  }
}

std::string_view VendorDisplayName(Vendor vendor) {
  switch (vendor) {
    case Vendor::kNvidia:
      return "NVIDIA";
    case Vendor::kAmd:
      return "AMD";
    case Vendor::kIntel:
      return "Intel";
    case Vendor::kUnknown:
      return "unknown";
  }
  return "unknown";
}

PciDevice ReadPciDevice(const SysfsReader& reader, const std::string& rel_dir,
                        const std::string& bus_id, DiagnosticSink* sink) {
  PciDevice d;
  d.bus_id = bus_id;
  d.vendor_id =
      static_cast<uint32_t>(reader.ReadHex(rel_dir + "/vendor", sink, 0xffff).value_or(0));
  d.device_id =
      static_cast<uint32_t>(reader.ReadHex(rel_dir + "/device", sink, 0xffff).value_or(0));
  d.class_code =
      static_cast<uint32_t>(reader.ReadHex(rel_dir + "/class", sink, 0xffffff).value_or(0));
  // The kernel writes -1 when the platform gives no NUMA information.
  if (auto numa = reader.ReadInt(rel_dir + "/numa_node", sink, -1, kMaxSysfsNumaNode)) {
    d.numa_node = static_cast<int>(*numa);
  }
  if (auto cpus = reader.ReadText(rel_dir + "/local_cpulist")) {
    // A CPU list has only digits, commas and dashes; anything else is not one.
    if (cpus->find_first_not_of("0123456789,-") == std::string::npos) {
      d.cpu_affinity = *cpus;
    } else if (sink != nullptr) {
      sink->Add("ignored " + reader.Path(rel_dir + "/local_cpulist") + ": " +
                QuoteForMessage(*cpus) + " is not a CPU list");
    }
  }
  for (const std::string& name : reader.ListDir(rel_dir + "/drm")) {
    std::string_view n = name;
    if (StartsWith(n, kRenderPrefix) && AllDigits(n.substr(kRenderPrefix.size()))) {
      if (auto minor = ParseInt64(n.substr(kRenderPrefix.size())); minor && *minor < 1 << 20) {
        d.render_minor = static_cast<int>(*minor);
        d.render_node = "/dev/dri/" + name;
      }
    } else if (StartsWith(n, kCardPrefix) && AllDigits(n.substr(kCardPrefix.size()))) {
      d.card_node = "/dev/dri/" + name;
    }
  }
  return d;
}

std::optional<std::string> PciBusIdOfDir(const SysfsReader& reader, const std::string& rel_dir) {
  if (auto id = ParsePciBusId(reader.ResolvedName(rel_dir))) return id;
  std::optional<std::string> text = reader.ReadText(rel_dir + "/uevent");
  if (!text) return std::nullopt;
  for (const std::string& line : Split(*text, '\n')) {
    std::string_view l = Trim(line);
    constexpr std::string_view kKey = "PCI_SLOT_NAME=";
    if (StartsWith(l, kKey)) return ParsePciBusId(l.substr(kKey.size()));
  }
  return std::nullopt;
}

PcieLevel PcieLevelFromNuma(int numa_a, int numa_b) {
  if (numa_a < 0 || numa_b < 0) return PcieLevel::kUnknown;
  return numa_a == numa_b ? PcieLevel::kNode : PcieLevel::kSystem;
}

}  // namespace gpupool::gpu
