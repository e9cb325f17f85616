// HTCondor ClassAd attributes in the style of condor_gpu_discovery, so a startd can take
// gpupool's discovery as its GPU resource source (MACHINE_RESOURCE_INVENTORY_GPUs).
//
// Nested form (HTCondor 9+ default):
//   DetectedGPUs="GPU-5368a050, GPU-5d2744da"
//   Common=[ Capability=9.0; DeviceName="..."; DriverVersion=12.4; ...; ]
//   GPU_5368a050=[ id="GPU-5368a050"; DevicePciBusId="0000:18:00.0"; DeviceUuid="GPU-..."; ]
// Legacy form: DetectedGPUs="CUDA0, CUDA1", CUDACapability=9.0, CUDA0DeviceUuid="...".
//
// Choices where HTCondor has no convention (docs/gpus.md): AMD GPUs are "AMD-<8 hex of
// the unique id>" with GfxTarget, ROCmVersion and AmdgpuVersion instead of
// Capability/DriverVersion; a GPU in MIG mode is replaced by its MIG devices, named by
// their full MIG UUID as HTCondor does, because CUDA jobs can only use those.
#include <cctype>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/strings.h"
#include "gpu/export/export_util.h"
#include "gpu/export/exporters.h"

namespace gpupool::gpu {
namespace {

using export_internal::Mib;
using export_internal::ParseMajorMinor;

// ClassAd string literal: quotes and backslashes escaped, control characters as octal
// escapes; valid UTF-8 passes through (ClassAds are UTF-8), invalid bytes become '?'.
std::string Quote(std::string_view s) {
  std::string out = "\"";
  for (char c : SanitizeUtf8(s)) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      static const char kOctal[] = "01234567";
      out += '\\';
      out += kOctal[(u >> 6) & 7];
      out += kOctal[(u >> 3) & 7];
      out += kOctal[u & 7];
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string Bool(bool b) { return b ? "true" : "false"; }

// HTCondor prints bus ids the way CUDA does: upper-case hex.
std::string UpperBusId(const std::string& id) {
  std::string out = id;
  for (char& c : out) {
    if (c >= 'a' && c <= 'f') c = static_cast<char>(c - 'a' + 'A');
  }
  return out;
}

// Keeps letters, digits and '-' so an id can become an attribute name.
std::string IdChars(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '-') out += c;
  }
  return out;
}

std::string AttrName(std::string_view id) {
  std::string out(id);
  for (char& c : out) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return out;
}

struct AdDevice {
  Vendor vendor = Vendor::kUnknown;
  std::string id;       // nested id: "GPU-5368a050", "MIG-<uuid>", "AMD-1a2b3c4d"
  std::string full_id;  // fallback when short ids collide
  std::map<std::string, std::string> attrs;  // name -> ClassAd literal, sorted by name
};

// Attributes that identify one device; never hoisted into Common.
const std::set<std::string>& IdentityAttrs() {
  static const auto* const kIds = new std::set<std::string>{"DeviceUuid", "DevicePciBusId"};
  return *kIds;
}

void AddDriverAttrs(const NodeInfo& node, Vendor vendor, AdDevice* d) {
  if (vendor == Vendor::kNvidia && node.nvidia) {
    int major = 0;
    int minor = 0;
    if (ParseMajorMinor(node.nvidia->runtime_version, &major, &minor)) {
      d->attrs["DriverVersion"] = std::to_string(major) + "." + std::to_string(minor);
      d->attrs["MaxSupportedVersion"] = std::to_string(major * 1000 + minor * 10);
    }
  }
  if (vendor == Vendor::kAmd && node.amd) {
    if (!node.amd->version.empty()) d->attrs["AmdgpuVersion"] = Quote(node.amd->version);
    if (!node.amd->runtime_version.empty()) {
      d->attrs["ROCmVersion"] = Quote(node.amd->runtime_version);
    }
  }
}

AdDevice GpuDevice(const NodeInfo& node, const GpuInfo& g, size_t position) {
  AdDevice d;
  d.vendor = g.vendor;
  const size_t index = g.index >= 0 ? static_cast<size_t>(g.index) : position;
  const std::string uuid = IdChars(g.uuid);
  if (g.vendor == Vendor::kNvidia) {
    if (StartsWith(uuid, "GPU-") && uuid.size() >= 12) {
      d.id = uuid.substr(0, 12);
      d.full_id = uuid;
    } else {
      d.id = uuid.empty() ? "CUDA" + std::to_string(index) : "GPU-" + uuid;
      d.full_id = d.id;
    }
  } else if (g.vendor == Vendor::kAmd) {
    std::string hex = ToLower(StartsWith(ToLower(uuid), "0x") ? uuid.substr(2) : uuid);
    d.id = hex.empty() ? "AMD" + std::to_string(index) : "AMD-" + hex.substr(0, 8);
    d.full_id = hex.empty() ? d.id : "AMD-" + hex;
  } else {
    d.id = uuid.empty() ? "GPU" + std::to_string(index) : "GPU-" + uuid;
    d.full_id = d.id;
  }
  if (g.compute_capability) {
    d.attrs["Capability"] = std::to_string(g.compute_capability->major) + "." +
                            std::to_string(g.compute_capability->minor);
  }
  if (!g.name.empty()) d.attrs["DeviceName"] = Quote(g.name);
  if (!g.pci_bus_id.empty()) d.attrs["DevicePciBusId"] = Quote(UpperBusId(g.pci_bus_id));
  if (!g.uuid.empty()) d.attrs["DeviceUuid"] = Quote(g.uuid);
  if (g.ecc_enabled) d.attrs["ECCEnabled"] = Bool(*g.ecc_enabled);
  if (!g.gfx_target.empty()) d.attrs["GfxTarget"] = Quote(g.gfx_target);
  if (g.memory_total_bytes > 0)
    d.attrs["GlobalMemoryMb"] = std::to_string(Mib(g.memory_total_bytes));
  AddDriverAttrs(node, g.vendor, &d);
  return d;
}

AdDevice MigAdDevice(const NodeInfo& node, const GpuInfo& g, const MigDevice& m, size_t gpu_pos,
                     size_t mig_pos) {
  AdDevice d = GpuDevice(node, g, gpu_pos);
  const std::string uuid = IdChars(m.uuid);
  const size_t index = g.index >= 0 ? static_cast<size_t>(g.index) : gpu_pos;
  d.id = uuid.empty() ? "MIG-" + std::to_string(index) + "-" + std::to_string(mig_pos) : uuid;
  d.full_id = d.id;
  d.attrs.erase("DeviceUuid");
  d.attrs.erase("GlobalMemoryMb");
  if (!m.uuid.empty()) d.attrs["DeviceUuid"] = Quote(m.uuid);
  if (!g.name.empty()) {
    d.attrs["DeviceName"] = Quote(g.name + (m.profile.empty() ? " MIG" : " MIG " + m.profile));
  }
  if (m.memory_total_bytes > 0)
    d.attrs["GlobalMemoryMb"] = std::to_string(Mib(m.memory_total_bytes));
  return d;
}

std::vector<AdDevice> Devices(const NodeInfo& node) {
  std::vector<AdDevice> out;
  for (size_t i = 0; i < node.gpus.size(); ++i) {
    const GpuInfo& g = node.gpus[i];
    if (g.vendor == Vendor::kNvidia && g.mig_enabled.value_or(false) && !g.mig_devices.empty()) {
      for (size_t m = 0; m < g.mig_devices.size(); ++m) {
        out.push_back(MigAdDevice(node, g, g.mig_devices[m], i, m));
      }
    } else {
      out.push_back(GpuDevice(node, g, i));
    }
  }
  // Short ids are 32 bits of a UUID; should two collide, both use their full id, and a
  // position suffix settles anything still equal.
  std::map<std::string, int> count;
  for (const AdDevice& d : out) ++count[d.id];
  for (AdDevice& d : out) {
    if (count[d.id] > 1) d.id = d.full_id;
  }
  std::set<std::string> seen;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!seen.insert(out[i].id).second) {
      out[i].id += '-';
      out[i].id += std::to_string(i);
      seen.insert(out[i].id);
    }
  }
  return out;
}

// The attributes every device in `group` has with the same value, identity ones excluded.
std::map<std::string, std::string> CommonAttrs(const std::vector<const AdDevice*>& group) {
  std::map<std::string, std::string> common;
  if (group.empty()) return common;
  for (const auto& [name, value] : group.front()->attrs) {
    if (IdentityAttrs().count(name) != 0) continue;
    bool shared = true;
    for (const AdDevice* d : group) {
      auto it = d->attrs.find(name);
      if (it == d->attrs.end() || it->second != value) {
        shared = false;
        break;
      }
    }
    if (shared) common[name] = value;
  }
  return common;
}

std::string Nested(const std::vector<AdDevice>& devices) {
  std::vector<const AdDevice*> all;
  std::string ids;
  for (const AdDevice& d : devices) {
    all.push_back(&d);
    ids += (ids.empty() ? "" : ", ") + d.id;
  }
  const auto common = CommonAttrs(all);
  std::string out = "DetectedGPUs=\"" + ids + "\"\n";
  if (!common.empty()) {
    out += "Common=[ ";
    for (const auto& [name, value] : common) {
      out.append(name).append("=").append(value).append("; ");
    }
    out += "]\n";
  }
  for (const AdDevice& d : devices) {
    out += AttrName(d.id) + "=[ id=\"" + d.id + "\"; ";
    for (const auto& [name, value] : d.attrs) {
      if (common.count(name) == 0) out.append(name).append("=").append(value).append("; ");
    }
    out += "]\n";
  }
  return out;
}

std::string LegacyPrefix(Vendor v) {
  switch (v) {
    case Vendor::kNvidia:
      return "CUDA";
    case Vendor::kAmd:
      return "AMD";
    case Vendor::kIntel:
      return "INTEL";
    case Vendor::kUnknown:
      return "GPU";
  }
  return "GPU";
}

// Flat, by index: each vendor's devices numbered from 0 under its prefix; a vendor's
// shared attributes once as <prefix><Attr>, the rest as <prefix><n><Attr>.
std::string Legacy(const std::vector<AdDevice>& devices) {
  std::map<Vendor, std::vector<const AdDevice*>> groups;
  std::string ids;
  for (const AdDevice& d : devices) {
    const std::string prefix = LegacyPrefix(d.vendor);
    auto& group = groups[d.vendor];
    ids += (ids.empty() ? "" : ", ") + prefix + std::to_string(group.size());
    group.push_back(&d);
  }
  std::string out = "DetectedGPUs=\"" + ids + "\"\n";
  for (const auto& [vendor, group] : groups) {
    const std::string prefix = LegacyPrefix(vendor);
    const auto common = CommonAttrs(group);
    for (const auto& [name, value] : common) {
      out.append(prefix).append(name).append("=").append(value).append("\n");
    }
    for (size_t i = 0; i < group.size(); ++i) {
      for (const auto& [name, value] : group[i]->attrs) {
        if (common.count(name) != 0) continue;
        std::string v = value;
        // Old HTCondor printed GPU UUIDs without their "GPU-" prefix.
        if (name == "DeviceUuid" && StartsWith(v, "\"GPU-")) v.erase(1, 4);
        out.append(prefix)
            .append(std::to_string(i))
            .append(name)
            .append("=")
            .append(v)
            .append("\n");
      }
    }
  }
  return out;
}

}  // namespace

std::string ExportClassAd(const NodeInfo& node, bool legacy) {
  const std::vector<AdDevice> devices = Devices(node);
  if (devices.empty()) return "DetectedGPUs=0\n";
  return legacy ? Legacy(devices) : Nested(devices);
}

}  // namespace gpupool::gpu
