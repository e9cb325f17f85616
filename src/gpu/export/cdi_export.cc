// A Container Device Interface spec for one vendor's GPUs, so podman (and other CDI
// runtimes) can hand a container exactly one GPU: `podman run --device nvidia.com/gpu=0`.
//
// Devices: "<index>" and "<uuid>" per GPU, "<gpu>:<mig>" and "<mig uuid>" per MIG device,
// and "all". Each carries its own device nodes and an environment variable naming what it
// grants (GPUPOOL_GPU_<index>=<uuid>, GPUPOOL_MIG_<gpu>_<mig>=<uuid>): distinct names per
// device, so requesting several devices merges cleanly and the job can list what it got.
// The spec-wide edits carry the vendor's control nodes and GPUPOOL_CDI_KIND; for NVIDIA
// also the driver's libraries, tools and firmware as read-only bind mounts, and the
// createContainer hook (`gpupool cdi-hook`) that links the libraries' SONAMEs
// (libcuda.so.1 -> libcuda.so.550.54.15) and updates the container's linker cache, without
// which a stock CUDA image finds no driver. AMD specs mount no libraries: ROCm's user space
// (HIP, HSA runtime, rocm-smi) is versioned with the image that was built against it, and
// only the kernel driver (/dev/kfd, /dev/dri/*) comes from the host.
//
// cdiVersion 0.5.0: the newest that Debian 12's podman 4.3.1 (container-device-interface
// 0.5) accepts: it ignores a spec of 0.6.0 or later ("unresolvable CDI devices"). 0.5.0
// has everything the spec uses: device nodes, mounts, environment and hooks.
#include <cctype>
#include <set>
#include <string>
#include <vector>

#include "common/json.h"
#include "common/strings.h"
#include "gpu/export/export_util.h"
#include "gpu/export/exporters.h"

namespace gpupool::gpu {
namespace {

using export_internal::GpuDeviceNodes;

constexpr const char* kCdiVersion = "0.5.0";

// CDI device names: letters, digits and _ . : -, starting with a letter or digit.
bool IsCdiName(std::string_view name) {
  if (name.empty() || !std::isalnum(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != ':' &&
        c != '-') {
      return false;
    }
  }
  return true;
}

// A CDI kind: VENDOR/CLASS, the vendor a domain-like name ([A-Za-z0-9][A-Za-z0-9.-]*),
// the class [A-Za-z0-9][A-Za-z0-9_.-]* (the rules of the CDI spec's parser).
bool IsCdiKind(std::string_view kind) {
  const size_t slash = kind.find('/');
  if (slash == std::string_view::npos || slash == 0 || slash + 1 >= kind.size()) return false;
  auto part_ok = [](std::string_view p, std::string_view extra) {
    if (!std::isalnum(static_cast<unsigned char>(p[0]))) return false;
    for (char c : p) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && extra.find(c) == std::string_view::npos) {
        return false;
      }
    }
    return true;
  };
  return part_ok(kind.substr(0, slash), ".-") && part_ok(kind.substr(slash + 1), "_.-");
}

class SpecWriter {
 public:
  explicit SpecWriter(std::string host_dev_root) : root_(std::move(host_dev_root)) {
    while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
    if (root_.empty()) root_ = "/dev";
  }

  // {"path": "/dev/nvidia0", "hostPath": "<root>/nvidia0"}
  OrderedJson DeviceNode(const std::string& path) const {
    OrderedJson j = OrderedJson::object();
    j["path"] = path;
    j["hostPath"] = StartsWith(path, "/dev/") ? root_ + path.substr(4) : path;
    return j;
  }

  OrderedJson Edits(const std::vector<std::string>& nodes,
                    const std::vector<std::string>& env) const {
    OrderedJson edits = OrderedJson::object();
    if (!env.empty()) edits["env"] = env;
    OrderedJson dev = OrderedJson::array();
    std::set<std::string> seen;
    for (const std::string& n : nodes) {
      if (seen.insert(n).second) dev.push_back(DeviceNode(n));
    }
    edits["deviceNodes"] = std::move(dev);
    return edits;
  }

 private:
  std::string root_;
};

std::string GpuValue(const GpuInfo& g) { return g.uuid.empty() ? g.pci_bus_id : g.uuid; }

// A read-only bind mount of a driver file at its own path, from under `host_root`.
OrderedJson ReadOnlyMount(const std::string& host_root, const std::string& path) {
  std::string host = host_root;
  while (!host.empty() && host.back() == '/') host.pop_back();
  return OrderedJson{{"hostPath", host + path},
                     {"containerPath", path},
                     {"options", {"ro", "nosuid", "nodev", "bind"}}};
}

// The createContainer hook that makes the mounted libraries usable by SONAME.
OrderedJson LinkerHook(const std::string& hook_path, const std::vector<std::string>& libraries) {
  std::vector<std::string> args = {"gpupool", "cdi-hook"};
  for (const std::string& lib : libraries) args.insert(args.end(), {"--library", lib});
  return OrderedJson{{"hookName", "createContainer"}, {"path", hook_path}, {"args", args}};
}

Result<Vendor> PickVendor(const NodeInfo& node, const CdiOptions& options) {
  bool nvidia = false;
  bool amd = false;
  for (const GpuInfo& g : node.gpus) {
    nvidia |= g.vendor == Vendor::kNvidia;
    amd |= g.vendor == Vendor::kAmd;
  }
  if (options.vendor) {
    const Vendor v = *options.vendor;
    if (v != Vendor::kNvidia && v != Vendor::kAmd) {
      return Status::InvalidArgument("CDI specs are written for nvidia or amd GPUs, not " +
                                     std::string(VendorName(v)));
    }
    if ((v == Vendor::kNvidia && !nvidia) || (v == Vendor::kAmd && !amd)) {
      return Status::NotFound("this node has no " + std::string(VendorName(v)) +
                              " GPUs to put in a CDI spec");
    }
    return v;
  }
  if (nvidia && amd) {
    return Status::InvalidArgument(
        "this node has both NVIDIA and AMD GPUs: choose the spec's vendor with "
        "--cdi-vendor nvidia or --cdi-vendor amd");
  }
  if (nvidia) return Vendor::kNvidia;
  if (amd) return Vendor::kAmd;
  return Status::NotFound(
      "no NVIDIA or AMD GPUs found: there is nothing to put in a CDI spec (try a fake node: "
      "gpupool gpus --fake examples/nodes/nvidia-1gpu.json --format cdi)");
}

}  // namespace

Result<std::string> ExportCdi(const NodeInfo& node, const CdiOptions& options) {
  GP_ASSIGN_OR_RETURN(const Vendor vendor, PickVendor(node, options));
  const std::optional<DriverInfo>& driver = vendor == Vendor::kNvidia ? node.nvidia : node.amd;
  if (!options.kind.empty() && !IsCdiKind(options.kind)) {
    return Status::InvalidArgument("'" + options.kind +
                                   "' is not a CDI kind: expected VENDOR/CLASS such as "
                                   "gpupool.local/gpu (letters, digits, '.', '-'; '_' in CLASS)");
  }
  if (!options.hook_path.empty() && options.hook_path[0] != '/') {
    return Status::InvalidArgument("the CDI hook '" + options.hook_path +
                                   "' must be an absolute path: runtimes run it from their "
                                   "own directory");
  }
  const std::string kind = !options.kind.empty()       ? options.kind
                           : vendor == Vendor::kNvidia ? "nvidia.com/gpu"
                                                       : "amd.com/gpu";
  const SpecWriter writer(options.host_dev_root);

  OrderedJson devices = OrderedJson::array();
  std::vector<std::string> all_nodes;
  std::vector<std::string> all_env;
  std::set<std::string> names;
  auto add = [&](const std::string& name, const std::vector<std::string>& nodes,
                 const std::vector<std::string>& env) {
    // Names that CDI would reject, or that two GPUs share, are left out rather than
    // making podman refuse the whole spec.
    if (!IsCdiName(name) || !names.insert(name).second) return;
    devices.push_back(OrderedJson{{"name", name}, {"containerEdits", writer.Edits(nodes, env)}});
  };

  for (size_t i = 0; i < node.gpus.size(); ++i) {
    const GpuInfo& g = node.gpus[i];
    if (g.vendor != vendor) continue;
    const std::vector<std::string> nodes = GpuDeviceNodes(g);
    const std::string index = std::to_string(g.index >= 0 ? static_cast<size_t>(g.index) : i);
    if (nodes.empty()) {
      return Status::FailedPrecondition(
          "GPU " + index + " (" + (g.pci_bus_id.empty() ? "no bus id" : g.pci_bus_id) +
          ") has no device node, so a container could not use it; rerun discovery with the "
          "vendor library (nvml or rocm-smi) or add device_nodes to the node file");
    }
    const std::vector<std::string> env = {"GPUPOOL_GPU_" + index + "=" + GpuValue(g)};
    add(index, nodes, env);
    if (!g.uuid.empty()) add(g.uuid, nodes, env);
    all_nodes.insert(all_nodes.end(), nodes.begin(), nodes.end());
    all_env.insert(all_env.end(), env.begin(), env.end());
    for (size_t m = 0; m < g.mig_devices.size(); ++m) {
      const MigDevice& mig = g.mig_devices[m];
      std::vector<std::string> mig_nodes = nodes;
      mig_nodes.insert(mig_nodes.end(), mig.device_nodes.begin(), mig.device_nodes.end());
      const std::string mig_env = "GPUPOOL_MIG_" + index + "_" + std::to_string(m) + "=" +
                                  (mig.uuid.empty() ? index + ":" + std::to_string(m) : mig.uuid);
      add(index + ":" + std::to_string(m), mig_nodes, {mig_env});
      if (!mig.uuid.empty()) add(mig.uuid, mig_nodes, {mig_env});
    }
  }
  add("all", all_nodes, all_env);

  OrderedJson top = OrderedJson::object();
  top["env"] = std::vector<std::string>{"GPUPOOL_CDI_KIND=" + kind};
  OrderedJson control = OrderedJson::array();
  OrderedJson mounts = OrderedJson::array();
  std::vector<std::string> libraries;
  if (driver) {
    for (const std::string& n : driver->control_nodes) control.push_back(writer.DeviceNode(n));
    if (vendor == Vendor::kNvidia) {
      std::set<std::string> seen;
      auto mount = [&](const std::string& path) {
        if (path.empty() || path[0] != '/' || !seen.insert(path).second) return false;
        mounts.push_back(ReadOnlyMount(options.host_file_root, path));
        return true;
      };
      for (const std::string& lib : driver->libraries) {
        if (mount(lib)) libraries.push_back(lib);
      }
      for (const std::string& f : options.driver_files) mount(f);
    }
  }
  top["deviceNodes"] = std::move(control);
  if (!mounts.empty()) top["mounts"] = std::move(mounts);
  if (!libraries.empty() && !options.hook_path.empty()) {
    top["hooks"] = OrderedJson::array({LinkerHook(options.hook_path, libraries)});
  }

  OrderedJson spec = OrderedJson::object();
  spec["cdiVersion"] = kCdiVersion;
  spec["kind"] = kind;
  spec["devices"] = std::move(devices);
  spec["containerEdits"] = std::move(top);
  return DumpJson(spec, 2) + "\n";
}

}  // namespace gpupool::gpu
