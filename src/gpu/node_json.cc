#include "gpu/node_json.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "common/strings.h"

namespace gpupool::gpu {
namespace {

// ---- writing --------------------------------------------------------------------------

void PutString(OrderedJson& j, const char* key, const std::string& value) {
  if (!value.empty()) j[key] = value;
}

void PutList(OrderedJson& j, const char* key, const std::vector<std::string>& values) {
  if (!values.empty()) j[key] = values;
}

void PutDouble(OrderedJson& j, const char* key, const std::optional<double>& value) {
  // NaN and infinity have no JSON form; they are as good as unknown.
  if (value && std::isfinite(*value)) j[key] = *value;
}

OrderedJson DriverToJson(const DriverInfo& d) {
  OrderedJson j = OrderedJson::object();
  PutString(j, "version", d.version);
  PutString(j, "runtime_version", d.runtime_version);
  PutList(j, "libraries", d.libraries);
  PutList(j, "control_nodes", d.control_nodes);
  return j;
}

OrderedJson MigToJson(const MigDevice& m) {
  OrderedJson j = OrderedJson::object();
  PutString(j, "uuid", m.uuid);
  PutString(j, "profile", m.profile);
  if (m.gpu_instance_id >= 0) j["gpu_instance_id"] = m.gpu_instance_id;
  if (m.compute_instance_id >= 0) j["compute_instance_id"] = m.compute_instance_id;
  j["memory_total_bytes"] = m.memory_total_bytes;
  PutList(j, "device_nodes", m.device_nodes);
  return j;
}

OrderedJson GpuToJson(const GpuInfo& g) {
  OrderedJson j = OrderedJson::object();
  j["vendor"] = std::string(VendorName(g.vendor));
  if (g.index >= 0) j["index"] = g.index;
  PutString(j, "name", g.name);
  PutString(j, "uuid", g.uuid);
  PutString(j, "pci_bus_id", g.pci_bus_id);
  j["memory_total_bytes"] = g.memory_total_bytes;
  j["memory_used_bytes"] = g.memory_used_bytes;
  if (g.compute_capability) {
    j["compute_capability"] = std::to_string(g.compute_capability->major) + "." +
                              std::to_string(g.compute_capability->minor);
  }
  PutString(j, "gfx_target", g.gfx_target);
  if (g.minor_number >= 0) j["minor_number"] = g.minor_number;
  PutList(j, "device_nodes", g.device_nodes);
  if (g.numa_node >= 0) j["numa_node"] = g.numa_node;
  PutString(j, "cpu_affinity", g.cpu_affinity);
  if (g.mig_enabled) j["mig_enabled"] = *g.mig_enabled;
  if (!g.mig_devices.empty()) {
    OrderedJson migs = OrderedJson::array();
    for (const MigDevice& m : g.mig_devices) migs.push_back(MigToJson(m));
    j["mig_devices"] = std::move(migs);
  }
  if (g.ecc_enabled) j["ecc_enabled"] = *g.ecc_enabled;
  PutString(j, "compute_partition", g.compute_partition);
  PutString(j, "memory_partition", g.memory_partition);
  if (g.compute_units > 0) j["compute_units"] = g.compute_units;
  if (g.utilization_percent) j["utilization_percent"] = *g.utilization_percent;
  if (g.temperature_celsius) j["temperature_celsius"] = *g.temperature_celsius;
  PutDouble(j, "power_watts", g.power_watts);
  PutDouble(j, "power_limit_watts", g.power_limit_watts);
  PutString(j, "backend", g.backend);
  PutString(j, "enforcement", g.enforcement);
  return j;
}

OrderedJson LinkToJson(const GpuLink& l) {
  OrderedJson j = OrderedJson::object();
  j["a"] = l.a;
  j["b"] = l.b;
  if (l.nvlink_count != 0) j["nvlink_count"] = l.nvlink_count;
  if (l.xgmi_count != 0) j["xgmi_count"] = l.xgmi_count;
  if (l.pcie_level != PcieLevel::kUnknown)
    j["pcie_level"] = std::string(PcieLevelName(l.pcie_level));
  return j;
}

// ---- reading --------------------------------------------------------------------------

std::string Index(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

void CheckLength(JsonFields& f, std::string_view key, const std::string& value,
                 size_t max = kMaxStringBytes) {
  if (value.size() > max) {
    f.Fail(key, "is " + std::to_string(value.size()) + " bytes long, over the limit of " +
                    std::to_string(max) + "; shorten it");
  }
}

void ReadString(JsonFields& f, std::string_view key, std::string* out,
                size_t max = kMaxStringBytes) {
  f.Optional(key, out);
  CheckLength(f, key, *out, max);
}

// Paths that end up in container specs: absolute, no "..", under /dev for device nodes.
bool IsCleanAbsolutePath(const std::string& p) {
  if (p.empty() || p[0] != '/') return false;
  for (const std::string& part : Split(p, '/')) {
    if (part == "..") return false;
  }
  return p.find('\0') == std::string::npos;
}

enum class PathKind { kDevice, kFile };

void ReadPathList(JsonFields& f, std::string_view key, std::vector<std::string>* out,
                  PathKind kind) {
  f.Optional(key, out);
  if (!f.ok()) return;
  if (out->size() > kMaxListEntries) {
    return f.Fail(key, "has " + std::to_string(out->size()) + " entries, over the limit of " +
                           std::to_string(kMaxListEntries));
  }
  for (size_t i = 0; i < out->size(); ++i) {
    const std::string& p = (*out)[i];
    const std::string item = std::string(key) + "[" + std::to_string(i) + "]";
    CheckLength(f, item, p);
    if (!IsCleanAbsolutePath(p)) {
      return f.Fail(item, "'" + SanitizeUtf8(p.substr(0, 200)) +
                              "' is not an absolute path without '..'; write it like /dev/nvidia0");
    }
    if (std::any_of(p.begin(), p.end(), [](char c) {
          return static_cast<unsigned char>(c) <= ' ' || c == 0x7f || c == ',';
        })) {
      return f.Fail(item, "'" + SanitizeUtf8(p.substr(0, 200)) +
                              "' contains a space, comma or control character; config files "
                              "that list it (gres.conf, CDI) cannot carry those");
    }
    if (kind == PathKind::kDevice && !StartsWith(p, "/dev/")) {
      return f.Fail(item, "'" + SanitizeUtf8(p.substr(0, 200)) +
                              "' is not under /dev; device nodes are container paths like "
                              "/dev/nvidia0 (use --dev-root for the host's location)");
    }
  }
}

// "0-23,48-71": digits, ranges and commas, as the kernel writes CPU lists.
bool IsCpuList(const std::string& s) {
  for (const std::string& part : Split(s, ',')) {
    const std::vector<std::string> range = Split(part, '-');
    if (range.size() > 2) return false;
    std::optional<uint64_t> first;
    for (const std::string& n : range) {
      auto v = ParseUint64(n);
      if (!v || n.empty() || n.size() > 6 || !std::isdigit(static_cast<unsigned char>(n[0]))) {
        return false;
      }
      if (first && *v < *first) return false;
      first = v;
    }
  }
  return true;
}

bool ParseCapability(const std::string& s, ComputeCapability* out) {
  const std::vector<std::string> parts = Split(s, '.');
  if (parts.size() != 2) return false;
  for (const std::string& p : parts) {
    if (p.empty() || p.size() > 2 || !std::isdigit(static_cast<unsigned char>(p[0]))) return false;
  }
  auto major = ParseInt64(parts[0]);
  auto minor = ParseInt64(parts[1]);
  if (!major || !minor || *major < 0 || *minor < 0) return false;
  // Only canonical spellings, so that writing the value back gives the same text.
  if (std::to_string(*major) != parts[0] || std::to_string(*minor) != parts[1]) return false;
  *out = {static_cast<int>(*major), static_cast<int>(*minor)};
  return true;
}

// A canonical PCI bus id is the only spelling accepted, so a file round-trips exactly.
bool IsCanonicalBusId(const std::string& s) {
  if (s.size() != 12) return false;
  return CanonicalPciBusId(s) == s && s[4] == ':' && s[7] == ':' && s[10] == '.';
}

void ReadDouble(JsonFields& f, std::string_view key, std::optional<double>* out, double max) {
  f.Optional(key, out);
  if (f.ok() && *out && (**out < 0 || **out > max)) {
    f.Fail(key, std::to_string(**out) + " is outside the range 0.." + std::to_string(max));
  }
}

Status ReadDriver(const Json& j, const std::string& path, DriverInfo* d, bool strict) {
  JsonFields f(j, path, strict);
  ReadString(f, "version", &d->version);
  ReadString(f, "runtime_version", &d->runtime_version);
  ReadPathList(f, "libraries", &d->libraries, PathKind::kFile);
  ReadPathList(f, "control_nodes", &d->control_nodes, PathKind::kDevice);
  return f.Finish();
}

Status ReadMig(const Json& j, const std::string& path, MigDevice* m, bool strict) {
  JsonFields f(j, path, strict);
  ReadString(f, "uuid", &m->uuid);
  ReadString(f, "profile", &m->profile);
  f.Optional("gpu_instance_id", &m->gpu_instance_id, -1, 1 << 20);
  f.Optional("compute_instance_id", &m->compute_instance_id, -1, 1 << 20);
  f.Optional("memory_total_bytes", &m->memory_total_bytes);
  ReadPathList(f, "device_nodes", &m->device_nodes, PathKind::kDevice);
  return f.Finish();
}

Status ReadGpu(const Json& j, const std::string& path, GpuInfo* g, bool strict) {
  JsonFields f(j, path, strict);
  std::string vendor;
  f.Required("vendor", &vendor);
  if (f.ok()) {
    auto v = ParseVendor(vendor);
    if (!v) {
      f.Fail("vendor", "'" + SanitizeUtf8(vendor.substr(0, 100)) +
                           "' is not a known vendor; use nvidia, amd, intel or unknown");
    } else {
      g->vendor = *v;
    }
  }
  f.Optional("index", &g->index, -1, static_cast<int>(kMaxGpusPerNode) * 64);
  ReadString(f, "name", &g->name);
  ReadString(f, "uuid", &g->uuid);
  ReadString(f, "pci_bus_id", &g->pci_bus_id);
  if (f.ok() && !g->pci_bus_id.empty() && !IsCanonicalBusId(g->pci_bus_id)) {
    f.Fail("pci_bus_id", "'" + SanitizeUtf8(g->pci_bus_id.substr(0, 100)) +
                             "' is not a PCI bus id in canonical form; write it like 0000:3b:00.0 "
                             "(lower case, 4-digit domain)");
  }
  f.Optional("memory_total_bytes", &g->memory_total_bytes);
  f.Optional("memory_used_bytes", &g->memory_used_bytes);
  std::string cc;
  ReadString(f, "compute_capability", &cc, 16);
  if (f.ok() && !cc.empty()) {
    ComputeCapability parsed;
    if (!ParseCapability(cc, &parsed)) {
      f.Fail("compute_capability",
             "'" + SanitizeUtf8(cc) + "' is not a compute capability; write it like \"9.0\"");
    } else {
      g->compute_capability = parsed;
    }
  }
  ReadString(f, "gfx_target", &g->gfx_target, 64);
  f.Optional("minor_number", &g->minor_number, -1, 1 << 20);
  ReadPathList(f, "device_nodes", &g->device_nodes, PathKind::kDevice);
  f.Optional("numa_node", &g->numa_node, -1, 4095);
  ReadString(f, "cpu_affinity", &g->cpu_affinity);
  if (f.ok() && !g->cpu_affinity.empty() && !IsCpuList(g->cpu_affinity)) {
    f.Fail("cpu_affinity", "'" + SanitizeUtf8(g->cpu_affinity.substr(0, 100)) +
                               "' is not a CPU list; write it like \"0-23,48-71\"");
  }
  f.Optional("mig_enabled", &g->mig_enabled);
  if (const Json* migs = f.Array("mig_devices"); migs != nullptr && f.ok()) {
    if (migs->size() > 128) {
      f.Fail("mig_devices", std::to_string(migs->size()) +
                                " MIG devices is more than a GPU can have (at most 128)");
    }
    for (size_t i = 0; f.ok() && i < migs->size(); ++i) {
      MigDevice m;
      if (Status s = ReadMig((*migs)[i], Index(f.PathOf("mig_devices"), i), &m, strict); !s.ok()) {
        return s;
      }
      g->mig_devices.push_back(std::move(m));
    }
  }
  f.Optional("ecc_enabled", &g->ecc_enabled);
  ReadString(f, "compute_partition", &g->compute_partition, 16);
  if (f.ok() && !g->compute_partition.empty() && !IsComputePartitionMode(g->compute_partition)) {
    f.Fail("compute_partition", "'" + SanitizeUtf8(g->compute_partition) +
                                    "' is not a compute partition mode; use SPX, DPX, TPX, QPX "
                                    "or CPX, or leave it out");
  }
  ReadString(f, "memory_partition", &g->memory_partition, 16);
  if (f.ok() && !g->memory_partition.empty() && !IsMemoryPartitionMode(g->memory_partition)) {
    f.Fail("memory_partition", "'" + SanitizeUtf8(g->memory_partition) +
                                   "' is not a memory partition mode; use NPS1, NPS2, NPS4 or "
                                   "NPS8, or leave it out");
  }
  f.Optional("compute_units", &g->compute_units, 0, 1 << 16);
  f.Optional("utilization_percent", &g->utilization_percent, 0, 100);
  f.Optional("temperature_celsius", &g->temperature_celsius, -273, 1000);
  ReadDouble(f, "power_watts", &g->power_watts, 100000);
  ReadDouble(f, "power_limit_watts", &g->power_limit_watts, 100000);
  ReadString(f, "backend", &g->backend, 64);
  ReadString(f, "enforcement", &g->enforcement, 16);
  if (f.ok() && !g->enforcement.empty() && !IsEnforcementMode(g->enforcement)) {
    f.Fail("enforcement", "'" + SanitizeUtf8(g->enforcement) +
                              "' is not an enforcement mode; use mps, mig, dmem or none");
  }
  return f.Finish();
}

Status ReadLink(const Json& j, const std::string& path, GpuLink* l, bool strict) {
  JsonFields f(j, path, strict);
  f.Required("a", &l->a);
  f.Required("b", &l->b);
  CheckLength(f, "a", l->a, 64);
  CheckLength(f, "b", l->b, 64);
  f.Optional("nvlink_count", &l->nvlink_count, 0, 1024);
  f.Optional("xgmi_count", &l->xgmi_count, 0, 1024);
  std::string level;
  ReadString(f, "pcie_level", &level, 16);
  if (f.ok() && !level.empty()) {
    auto parsed = ParsePcieLevel(level);
    if (!parsed) {
      f.Fail("pcie_level", "'" + SanitizeUtf8(level) +
                               "' is not a PCIe level; use BOARD, PIX, PXB, PHB, NODE, SYS or ?");
    } else {
      l->pcie_level = *parsed;
    }
  }
  return f.Finish();
}

// Two GPUs on one device would each be granted it (the device rules, CDI, gres.conf): two
// jobs on one device. A minor number is per vendor (NVIDIA's /dev/nvidiaN, the others' DRM
// render minor), as is an index.
Status CheckOwnDevices(const NodeInfo& node) {
  std::map<std::pair<Vendor, int>, size_t> by_minor;
  std::map<std::string, size_t> by_device_node;
  for (size_t i = 0; i < node.gpus.size(); ++i) {
    const GpuInfo& g = node.gpus[i];
    const std::string path = Index("gpus", i);
    if (g.minor_number >= 0) {
      auto [it, fresh] = by_minor.emplace(std::make_pair(g.vendor, g.minor_number), i);
      if (!fresh) {
        return Status::InvalidArgument(
            path + ".minor_number: " + std::string(VendorName(g.vendor)) + " minor number " +
            std::to_string(g.minor_number) + " is already that of " + Index("gpus", it->second) +
            "; every GPU needs its own device (two jobs would share one)");
      }
    }
    for (const std::string& dev : g.device_nodes) {
      auto [it, fresh] = by_device_node.emplace(dev, i);
      if (!fresh && it->second != i) {
        return Status::InvalidArgument(path + ".device_nodes: " + SanitizeUtf8(dev) +
                                       " is already a device node of " + Index("gpus", it->second) +
                                       "; every GPU needs its own device nodes (two jobs would "
                                       "share one device)");
      }
    }
  }
  return Status::Ok();
}

}  // namespace

// Cross-field rules: ids and devices unique within the node, links between GPUs that exist.
Status CheckNode(const NodeInfo& node) {
  std::map<std::string, size_t> by_bus;
  std::map<std::pair<Vendor, int>, size_t> by_index;
  std::map<std::string, std::string> by_uuid;
  for (size_t i = 0; i < node.gpus.size(); ++i) {
    const GpuInfo& g = node.gpus[i];
    const std::string path = Index("gpus", i);
    if (!g.pci_bus_id.empty()) {
      auto [it, fresh] = by_bus.emplace(g.pci_bus_id, i);
      if (!fresh) {
        return Status::InvalidArgument(path + ".pci_bus_id: " + g.pci_bus_id +
                                       " is already used by " + Index("gpus", it->second) +
                                       "; every GPU needs its own PCI bus id");
      }
    }
    if (g.index >= 0) {
      auto [it, fresh] = by_index.emplace(std::make_pair(g.vendor, g.index), i);
      if (!fresh) {
        return Status::InvalidArgument(path + ".index: " + std::string(VendorName(g.vendor)) +
                                       " GPU " + std::to_string(g.index) + " is already " +
                                       Index("gpus", it->second) +
                                       "; indices must be unique per vendor");
      }
    }
    auto claim_uuid = [&](const std::string& uuid, const std::string& where) -> Status {
      if (uuid.empty()) return Status::Ok();
      auto [it, fresh] = by_uuid.emplace(uuid, where);
      if (!fresh) {
        return Status::InvalidArgument(where + ".uuid: " + SanitizeUtf8(uuid) +
                                       " is already used by " + it->second +
                                       "; every GPU and MIG device needs its own uuid");
      }
      return Status::Ok();
    };
    GP_RETURN_IF_ERROR(claim_uuid(g.uuid, path));
    for (size_t m = 0; m < g.mig_devices.size(); ++m) {
      GP_RETURN_IF_ERROR(claim_uuid(g.mig_devices[m].uuid, Index(path + ".mig_devices", m)));
    }
  }
  GP_RETURN_IF_ERROR(CheckOwnDevices(node));
  std::set<std::pair<std::string, std::string>> pairs;
  for (size_t i = 0; i < node.links.size(); ++i) {
    const GpuLink& l = node.links[i];
    const std::string path = Index("links", i);
    for (const auto* end : {&l.a, &l.b}) {
      if (by_bus.find(*end) == by_bus.end()) {
        return Status::InvalidArgument(
            path + "." + (end == &l.a ? "a" : "b") + ": '" + SanitizeUtf8(*end) +
            "' is not the pci_bus_id of any GPU in gpus; links must name GPUs of this node");
      }
    }
    if (l.a == l.b) {
      return Status::InvalidArgument(path + ": links a GPU (" + l.a +
                                     ") to itself; remove it, a GPU's own entry is implied");
    }
    auto key = l.a < l.b ? std::make_pair(l.a, l.b) : std::make_pair(l.b, l.a);
    if (!pairs.insert(key).second) {
      return Status::InvalidArgument(path + ": the pair " + l.a + " / " + l.b +
                                     " is listed twice; keep one entry per pair");
    }
  }
  return Status::Ok();
}

namespace {

// The node file's "host" object (HostResources): CPUs (a number, thousandths count) and
// memory in bytes, each optional and above zero.
Status ReadHost(const Json& j, bool strict, HostResources* out) {
  JsonFields f(j, "host", strict);
  double cpus = 0;
  int64_t bytes = 0;
  f.Optional("cpus", &cpus);
  f.Optional("memory_bytes", &bytes, 0, int64_t{1} << 50);
  if (f.ok() && (cpus < 0 || cpus > 1e6)) f.Fail("cpus", "a number of CPUs, e.g. 16 or 0.5");
  GP_RETURN_IF_ERROR(f.Finish());
  out->cpu_milli = std::llround(cpus * 1000);  // cpus >= 0 here
  out->memory_mib = bytes >> 20;
  return Status::Ok();
}

Status ReadNode(const Json& j, NodeInfo* node, bool strict) {
  if (!j.is_object()) {
    return Status::InvalidArgument("expected a JSON object (a gpupool node description), found " +
                                   std::string(JsonTypeName(j)));
  }
  JsonFields f(j, "", strict);
  const Json* schema = f.Member("schema");
  if (schema == nullptr) {
    return Status::InvalidArgument(
        "schema: required field is missing; a node file starts with \"schema\": \"" +
        std::string(kNodeSchema) + "\" (capture one with `gpupool gpus --json`)");
  }
  if (!schema->is_string() || schema->get<std::string>() != kNodeSchema) {
    return Status::InvalidArgument("schema: expected \"" + std::string(kNodeSchema) + "\", found " +
                                   SanitizeUtf8(DumpJson(*schema).substr(0, 100)) +
                                   "; this gpupool reads only that schema");
  }
  ReadString(f, "hostname", &node->hostname, 255);
  if (const Json* host = f.Member("host"); host != nullptr && f.ok()) {
    HostResources ignored;  // HostResourcesFromJson's; checked here as every field is
    GP_RETURN_IF_ERROR(ReadHost(*host, strict, &ignored));
  }
  if (const Json* drivers = f.Member("drivers"); drivers != nullptr && f.ok()) {
    JsonFields df(*drivers, "drivers", strict);
    for (const char* vendor : {"nvidia", "amd"}) {
      const Json* d = df.Member(vendor);
      if (d == nullptr || !df.ok()) continue;
      DriverInfo info;
      GP_RETURN_IF_ERROR(ReadDriver(*d, df.PathOf(vendor), &info, strict));
      (std::string_view(vendor) == "nvidia" ? node->nvidia : node->amd) = std::move(info);
    }
    GP_RETURN_IF_ERROR(df.Finish());
  }
  if (const Json* gpus = f.Array("gpus"); gpus != nullptr && f.ok()) {
    if (gpus->size() > kMaxGpusPerNode) {
      return Status::ResourceExhausted(
          "gpus: " + std::to_string(gpus->size()) + " GPUs is more than the " +
          std::to_string(kMaxGpusPerNode) +
          " one node can have; a node file describes one machine, split larger inventories");
    }
    for (size_t i = 0; i < gpus->size(); ++i) {
      GpuInfo g;
      GP_RETURN_IF_ERROR(ReadGpu((*gpus)[i], Index("gpus", i), &g, strict));
      node->gpus.push_back(std::move(g));
    }
  }
  if (const Json* links = f.Array("links"); links != nullptr && f.ok()) {
    const size_t n = node->gpus.size();
    if (links->size() > n * (n - (n > 0 ? 1 : 0)) / 2) {
      return Status::InvalidArgument("links: " + std::to_string(links->size()) +
                                     " links is more than one per pair of the " +
                                     std::to_string(n) + " GPUs");
    }
    for (size_t i = 0; i < links->size(); ++i) {
      GpuLink l;
      GP_RETURN_IF_ERROR(ReadLink((*links)[i], Index("links", i), &l, strict));
      node->links.push_back(std::move(l));
    }
  }
  if (const Json* diags = f.Array("diagnostics"); diags != nullptr && f.ok()) {
    if (diags->size() > kMaxListEntries) {
      return Status::InvalidArgument("diagnostics: " + std::to_string(diags->size()) +
                                     " entries, over the limit of " +
                                     std::to_string(kMaxListEntries));
    }
    for (size_t i = 0; i < diags->size(); ++i) {
      JsonFields df((*diags)[i], Index("diagnostics", i), strict);
      Diagnostic d;
      df.Required("backend", &d.backend);
      CheckLength(df, "backend", d.backend, 64);
      df.Required("message", &d.message);
      CheckLength(df, "message", d.message, kMaxMessageBytes);
      GP_RETURN_IF_ERROR(df.Finish());
      node->diagnostics.push_back(std::move(d));
    }
  }
  GP_RETURN_IF_ERROR(f.Finish());
  return CheckNode(*node);
}

}  // namespace

Result<HostResources> HostResourcesFromJson(const Json& node, std::string_view source) {
  HostResources out;
  if (!node.is_object()) return out;
  auto it = node.find("host");
  if (it == node.end()) return out;
  if (Status s = ReadHost(*it, true, &out); !s.ok()) return s.WithContext(source);
  return out;
}

OrderedJson NodeToJson(const NodeInfo& node) {
  OrderedJson j = OrderedJson::object();
  j["schema"] = std::string(kNodeSchema);
  PutString(j, "hostname", node.hostname);
  if (node.nvidia || node.amd) {
    OrderedJson drivers = OrderedJson::object();
    if (node.nvidia) drivers["nvidia"] = DriverToJson(*node.nvidia);
    if (node.amd) drivers["amd"] = DriverToJson(*node.amd);
    j["drivers"] = std::move(drivers);
  }
  OrderedJson gpus = OrderedJson::array();
  for (const GpuInfo& g : node.gpus) gpus.push_back(GpuToJson(g));
  j["gpus"] = std::move(gpus);
  if (!node.links.empty()) {
    OrderedJson links = OrderedJson::array();
    for (const GpuLink& l : node.links) links.push_back(LinkToJson(l));
    j["links"] = std::move(links);
  }
  if (!node.diagnostics.empty()) {
    OrderedJson diags = OrderedJson::array();
    for (const Diagnostic& d : node.diagnostics) {
      diags.push_back(OrderedJson{{"backend", d.backend}, {"message", d.message}});
    }
    j["diagnostics"] = std::move(diags);
  }
  return j;
}

Result<NodeInfo> NodeFromJson(const Json& json, std::string_view source, bool reject_unknown) {
  NodeInfo node;
  if (Status s = ReadNode(json, &node, reject_unknown); !s.ok()) return s.WithContext(source);
  return node;
}

}  // namespace gpupool::gpu
