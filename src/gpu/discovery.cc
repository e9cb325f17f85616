// Backend registry and the merge of several backends' answers into one NodeInfo.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>

#include "gpu/fake/fake_backend.h"
#include "gpu/gpu_backend.h"
#include "gpu/node_json.h"
#include "gpu/nvml/nvml_backend.h"
#include "gpu/rocm/rocm_smi_backend.h"
#include "gpu/sysfs/sysfs_backend.h"

namespace gpupool::gpu {
namespace {

using Factory = std::function<std::unique_ptr<GpuBackend>(const DiscoveryOptions&)>;

const std::map<std::string, Factory, std::less<>>& Registry() {
  static const auto* const kRegistry = new std::map<std::string, Factory, std::less<>>{
      {"nvml", NewNvmlBackend},
      {"rocm-smi", NewRocmSmiBackend},
      {"sysfs", NewSysfsBackend},
      {"fake", NewFakeBackend},
  };
  return *kRegistry;
}

std::string KnownBackendNames() {
  std::string out;
  for (const auto& [name, factory] : Registry()) out += (out.empty() ? "" : ", ") + name;
  return out;
}

std::string LocalHostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

void MergeDriver(std::optional<DriverInfo>* into, const std::optional<DriverInfo>& from) {
  if (!from) return;
  if (!*into) {
    *into = from;
    return;
  }
  DriverInfo& d = **into;
  if (d.version.empty()) d.version = from->version;
  if (d.runtime_version.empty()) d.runtime_version = from->runtime_version;
  if (d.libraries.empty()) d.libraries = from->libraries;
  if (d.control_nodes.empty()) d.control_nodes = from->control_nodes;
}

}  // namespace

DiscoveryOptions WithEnvironmentOverrides(DiscoveryOptions options) {
  auto env = [](const char* name, std::string* out) {
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') *out = v;
  };
  env("GPUPOOL_NVML_LIBRARY", &options.nvml_library);
  env("GPUPOOL_ROCM_SMI_LIBRARY", &options.rocm_smi_library);
  env("GPUPOOL_SYSFS_ROOT", &options.sysfs_root);
  env("GPUPOOL_DEV_ROOT", &options.dev_root);
  env("GPUPOOL_PROC_ROOT", &options.proc_root);
  return options;
}

Result<std::unique_ptr<GpuBackend>> CreateBackend(std::string_view name,
                                                  const DiscoveryOptions& options) {
  auto it = Registry().find(name);
  if (it == Registry().end()) {
    return Status::InvalidArgument("unknown GPU backend '" + std::string(name) + "': use one of " +
                                   KnownBackendNames() + " or auto");
  }
  if (name == "fake" && options.fake_node_file.empty()) {
    return Status::InvalidArgument(
        "the fake backend needs a node file: pass --fake FILE (a `gpupool gpus --json` capture)");
  }
  return it->second(options);
}

Result<NodeInfo> DiscoverNode(const DiscoveryOptions& options) {
  std::vector<std::string> names = options.backends;
  const bool automatic = names.empty() || (names.size() == 1 && names[0] == "auto");
  if (automatic) {
    names = {"nvml", "rocm-smi", "sysfs"};
    if (!options.fake_node_file.empty()) names.insert(names.begin(), "fake");
  }

  NodeInfo merged;
  std::set<std::string> seen_pci;
  std::set<Vendor> vendor_backend_worked;  // vendors whose own library backend succeeded
  std::set<std::string> unavailable;       // backends that could not run here
  for (const std::string& name : names) {
    GP_ASSIGN_OR_RETURN(auto backend, CreateBackend(name, options));
    Result<NodeInfo> found = backend->Discover();
    if (!found.ok()) {
      // An explicitly chosen backend that cannot run is the user's error to see; while
      // probing, it is only worth a note.
      if (!automatic) return found.status().WithContext(name);
      merged.diagnostics.push_back({name, found.status().message()});
      unavailable.insert(name);
      continue;
    }
    NodeInfo& node = *found;
    if (name == "nvml") vendor_backend_worked.insert(Vendor::kNvidia);
    if (name == "rocm-smi") vendor_backend_worked.insert(Vendor::kAmd);
    if (merged.hostname.empty()) merged.hostname = node.hostname;
    MergeDriver(&merged.nvidia, node.nvidia);
    MergeDriver(&merged.amd, node.amd);
    for (GpuInfo& g : node.gpus) {
      // GPUs without a bus id cannot be matched across backends; keep them all.
      if (!g.pci_bus_id.empty() && !seen_pci.insert(g.pci_bus_id).second) continue;
      merged.gpus.push_back(std::move(g));
    }
    for (GpuLink& l : node.links) {
      const bool known = std::any_of(merged.links.begin(), merged.links.end(), [&](const auto& m) {
        return (m.a == l.a && m.b == l.b) || (m.a == l.b && m.b == l.a);
      });
      if (!known) merged.links.push_back(std::move(l));
    }
    for (Diagnostic& d : node.diagnostics) merged.diagnostics.push_back(std::move(d));
  }
  if (automatic) {
    // The sysfs backend cannot know that a vendor backend listed the same GPUs; its "library
    // missing" note would be a false warning on a healthy node.
    std::erase_if(merged.diagnostics, [&](const Diagnostic& d) {
      return std::any_of(vendor_backend_worked.begin(), vendor_backend_worked.end(),
                         [&](Vendor v) { return IsMissingLibraryDiagnostic(d, v); });
    });
    // A vendor backend that cannot run on a machine without that vendor's GPUs is
    // expected, not news: keep its note only when some backend saw such a GPU.
    auto has_vendor = [&](Vendor v) {
      return std::any_of(merged.gpus.begin(), merged.gpus.end(),
                         [v](const GpuInfo& g) { return g.vendor == v; });
    };
    std::erase_if(merged.diagnostics, [&](const Diagnostic& d) {
      if (unavailable.count(d.backend) == 0) return false;
      if (d.backend == "nvml") return !has_vendor(Vendor::kNvidia);
      if (d.backend == "rocm-smi") return !has_vendor(Vendor::kAmd);
      return false;
    });
  }
  if (merged.hostname.empty()) merged.hostname = LocalHostname();
  std::stable_sort(merged.gpus.begin(), merged.gpus.end(), [](const GpuInfo& a, const GpuInfo& b) {
    if (a.vendor != b.vendor) return a.vendor < b.vendor;
    return a.index < b.index;
  });
  // Backends that list two GPUs on one device node or minor number describe a node whose
  // GPUs cannot all be given out: the agent refuses it (NodeAgent::Discover); `gpupool
  // gpus` still lists it, saying what is wrong (gpus[N] as in its --json, hence sorted).
  if (Status s = CheckNode(merged); !s.ok()) {
    merged.diagnostics.push_back(
        {"discovery", s.message() + "; an agent does not start with these GPUs"});
  }
  return merged;
}

}  // namespace gpupool::gpu
