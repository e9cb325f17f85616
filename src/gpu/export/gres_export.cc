// Slurm gres.conf for one node, ready to paste: what `AutoDetect=nvml` would find,
// written out so a cluster can pin it (and so AMD and fake nodes get the same treatment):
//   # slurm.conf needs:
//   #   GresTypes=gpu
//   #   NodeName=dgx01 CPUs=224 Boards=1 SocketsPerBoard=2 ... Gres=gpu:nvidia_h100_80gb_hbm3:8
//   NodeName=dgx01 Name=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/nvidia0 Cores=0-55 Links=-1,18,...
// Cores are Slurm's core ids (gpu/cpu_topology.h), left out when the node's CPU topology
// is not known. Links lists, in the order the GPUs of that vendor appear, the NVLink (or
// XGMI) count to each other GPU, -1 for the GPU itself and 0 for none; left out when
// unknown. A GPU in MIG mode is replaced by one line per MIG device, whose Type carries
// the profile and MultipleFiles the parent and capability nodes; a MIG device without
// capability nodes becomes a comment, since the parent's node alone would hand every
// job the whole GPU (and slurmd refuses MultipleFiles with one file).
#include <algorithm>
#include <cctype>
#include <string>
#include <utility>
#include <vector>

#include "common/strings.h"
#include "gpu/export/export_util.h"
#include "gpu/export/exporters.h"

namespace gpupool::gpu {
namespace {

using export_internal::FindLink;
using export_internal::GpuDeviceNodes;
using export_internal::Printable;

// Marketing words that say nothing about the model.
bool IsBrandWord(const std::string& w) {
  static const char* const kBrands[] = {"nvidia", "amd",      "intel",  "tesla", "geforce",
                                        "quadro", "instinct", "radeon", "(r)",   "(tm)"};
  for (const char* b : kBrands) {
    if (w == b) return true;
  }
  return false;
}

// Words that only make sense with the word after them: "RTX 4090" -> "rtx4090".
bool IsSeriesWord(const std::string& w) {
  return w == "rtx" || w == "gtx" || w == "rx" || w == "titan" || w == "pro" || w == "arc";
}

// What a Type can carry through gres.conf and slurm.conf's Gres=gpu:TYPE:N: no space,
// '=', ':', ',' or '#', nothing outside ASCII.
bool IsTypeChar(char c) {
  const auto u = static_cast<unsigned char>(c);
  return (std::isalnum(u) && u < 0x80) || c == '.' || c == '_' || c == '-';
}

std::string KeepTypeChars(std::string_view s) {
  std::string out;
  for (char c : s) {
    const char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (IsTypeChar(l) && l != '-') out += l;
  }
  return out;
}

// Slurm's gpu_common_underscorify_tolower (src/plugins/gpu/common/gpu_common.c), which
// gpu_nvml.c's _nvml_get_device_name applies to what nvmlDeviceGetName returns: every
// character tolower()ed, ' ' replaced by '_'. Characters that no Slurm file could carry
// are then dropped (NVML names have none).
std::string SlurmNvmlName(std::string_view nvml_name) {
  std::string out;
  for (char c : nvml_name) {
    char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (l == ' ') l = '_';
    if (IsTypeChar(l)) out += l;
  }
  return out;
}

// A name NVML gave (not one the sysfs backend made up from pci.ids).
bool HasNvmlName(const GpuInfo& g) {
  return g.vendor == Vendor::kNvidia && g.backend != "sysfs" && !g.name.empty();
}

// Slurm node names: host names and hostlist expressions ("gpu[01-04]").
bool IsSlurmNodeName(std::string_view name) {
  if (name.empty() || name.size() > 255) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return (std::isalnum(u) && u < 0x80) || c == '.' || c == '_' || c == '-' || c == '[' ||
           c == ']' || c == ',';
  });
}

Result<std::string> NodeNameFor(const NodeInfo& node, const GresOptions& options) {
  if (!options.node_name.empty()) {
    if (!IsSlurmNodeName(options.node_name)) {
      return Status::InvalidArgument("'" + Printable(options.node_name) +
                                     "' is not a Slurm node name: use letters, digits, '.', "
                                     "'_', '-' (or a hostlist like gpu[01-04])");
    }
    return options.node_name;
  }
  const std::string short_name = node.hostname.substr(0, node.hostname.find('.'));
  if (short_name.empty()) {
    return Status::InvalidArgument(
        "the node has no host name to use as Slurm's NodeName: pass --node-name NAME");
  }
  if (!IsSlurmNodeName(short_name)) {
    return Status::InvalidArgument("the host name '" + Printable(short_name) +
                                   "' is not a Slurm node name: pass --node-name NAME");
  }
  return short_name;
}

// The node the GPU is scheduled by: NVIDIA /dev/nvidiaN, AMD its render node.
std::string PrimaryFile(const GpuInfo& g) {
  const std::vector<std::string> nodes = GpuDeviceNodes(g);
  if (g.vendor == Vendor::kAmd) {
    for (const std::string& n : nodes) {
      if (StartsWith(n, "/dev/dri/renderD")) return n;
    }
  }
  return nodes.empty() ? "" : nodes.front();
}

std::string LinksField(const NodeInfo& node, const std::vector<const GpuInfo*>& peers,
                       const GpuInfo& self) {
  if (self.pci_bus_id.empty()) return "";
  bool any = false;
  std::string out;
  for (const GpuInfo* p : peers) {
    int count = 0;
    if (p == &self) {
      count = -1;
    } else if (const GpuLink* l = FindLink(node, self.pci_bus_id, p->pci_bus_id); l != nullptr) {
      count = std::max(0, self.vendor == Vendor::kAmd ? l->xgmi_count : l->nvlink_count);
      any |= count > 0;
    }
    if (!out.empty()) out += ',';
    out += std::to_string(count);
  }
  return any ? out : "";
}

bool InMigMode(const GpuInfo& g) { return g.mig_enabled.value_or(false) && !g.mig_devices.empty(); }

// Counts per Type in order of first appearance, for slurm.conf's Gres=.
class GresCounts {
 public:
  void Add(const std::string& type) {
    auto it = std::find_if(counts_.begin(), counts_.end(),
                           [&](const auto& c) { return c.first == type; });
    if (it == counts_.end()) {
      counts_.emplace_back(type, 1);
    } else {
      ++it->second;
    }
  }
  // "gpu:nvidia_h100_80gb_hbm3:8,gpu:2" (untyped GPUs as gpu:N).
  std::string Field() const {
    std::string out;
    for (const auto& [type, n] : counts_) {
      if (!out.empty()) out += ',';
      out += "gpu:" + (type.empty() ? "" : type + ":") + std::to_string(n);
    }
    return out;
  }

 private:
  std::vector<std::pair<std::string, int>> counts_;
};

}  // namespace

std::string GresShortTypeName(std::string_view device_name) {
  std::vector<std::string> words;
  for (const std::string& w : Split(ToLower(device_name), ' ')) {
    if (!w.empty() && !IsBrandWord(w)) words.push_back(w);
  }
  if (words.empty()) return "";
  std::string first = words[0];
  if (IsSeriesWord(first) && words.size() > 1) first += words[1];
  // "a100-sxm4-80gb" -> "a100": the form factor and memory are not part of the model.
  if (auto dash = first.find('-'); dash != std::string::npos && dash > 0) {
    first = first.substr(0, dash);
  }
  return KeepTypeChars(first);
}

std::string GresTypeName(const GpuInfo& gpu, const MigDevice* mig) {
  if (HasNvmlName(gpu)) {
    std::string type = SlurmNvmlName(gpu.name);
    if (mig == nullptr) return type;
    // gpu_nvml.c, _get_system_gpu_list_nvml: for MIG devices the GPU's type is cut at
    // its first '-' ("nvidia_a100-sxm4-40gb" -> "nvidia_a100"), and _handle_mig appends
    // "_" and the profile, taken from the MIG device's NVML name after "mig" (Slurm 23.02
    // and later; 22.05 rebuilds it from the slice count and memory, "_1g.5gb", which is
    // the same text for every profile without a compute-instance part like "1c.").
    type = type.substr(0, type.find('-'));
    const std::string profile = SlurmNvmlName(mig->profile);
    return profile.empty() ? type : type + "_" + profile;
  }
  std::string type = GresShortTypeName(gpu.name);
  if (mig == nullptr || type.empty()) return type;
  const std::string profile = KeepTypeChars(mig->profile);
  return profile.empty() ? type : type + "_" + profile;
}

Result<std::string> ExportGres(const NodeInfo& node, const GresOptions& options) {
  GP_ASSIGN_OR_RETURN(const std::string node_name, NodeNameFor(node, options));
  const std::string header = "# gres.conf for " +
                             (node.hostname.empty() ? node_name : Printable(node.hostname)) +
                             ", written by `gpupool gpus --format gres`\n";
  if (node.gpus.empty()) return header + "# no GPUs found\n";

  std::optional<SlurmCoreNumbering> numbering;
  std::string cores_note;
  if (options.cpu_topology) {
    Result<SlurmCoreNumbering> n = SlurmCoreNumbering::Of(*options.cpu_topology);
    if (n.ok()) {
      numbering = std::move(*n);
    } else {
      cores_note = "the node's CPU topology cannot be numbered: " + Printable(n.status().message());
    }
  } else {
    cores_note =
        "the node's CPU topology is not known here, and kernel CPU ids are not Slurm core "
        "ids: run `gpupool gpus --format gres` on the node itself";
  }
  bool cores_left_out = false;
  auto cores_field = [&](const GpuInfo& g) -> std::string {
    if (g.cpu_affinity.empty()) return "";
    if (!numbering) {
      cores_left_out = true;
      return "";
    }
    Result<std::string> cores = numbering->CoresOf(g.cpu_affinity);
    if (!cores.ok() || cores->empty()) {
      cores_left_out = true;
      if (cores_note.empty()) {
        cores_note = "the CPUs of GPU " + std::to_string(g.index) + " (" +
                     Printable(g.cpu_affinity) + ") are not among the node's online CPUs";
      }
      return "";
    }
    return " Cores=" + *cores;
  };

  const std::string prefix = "NodeName=" + node_name + " Name=gpu";
  GresCounts counts;
  std::string lines;
  std::string notes;
  for (const GpuInfo& g : node.gpus) {
    std::vector<const GpuInfo*> peers;
    for (const GpuInfo& p : node.gpus) {
      // Links index the gres lines of whole GPUs; MIG devices have their own lines.
      if (p.vendor == g.vendor && !InMigMode(p)) peers.push_back(&p);
    }
    const std::string file = Printable(PrimaryFile(g));
    const std::string cores = cores_field(g);
    if (InMigMode(g)) {
      for (const MigDevice& m : g.mig_devices) {
        if (m.device_nodes.empty()) {
          notes += "# left out: MIG device " + Printable(m.uuid) + " of GPU " +
                   std::to_string(g.index) +
                   " has no /dev/nvidia-caps nodes (see the discovery diagnostics)\n";
          continue;
        }
        const std::string type = GresTypeName(g, &m);
        counts.Add(type);
        std::string line = prefix;
        if (!type.empty()) line += " Type=" + type;
        std::string files = file;
        for (const std::string& n : m.device_nodes) {
          if (!files.empty()) files += ',';
          files += Printable(n);
        }
        // slurmd refuses MultipleFiles naming one file.
        line += (files.find(',') == std::string::npos ? " File=" : " MultipleFiles=") + files;
        lines += line + cores + "\n";
      }
      continue;
    }
    const std::string type = GresTypeName(g);
    counts.Add(type);
    std::string line = prefix;
    if (!type.empty()) line += " Type=" + type;
    if (!file.empty()) line += " File=" + file;
    line += cores;
    if (const std::string links = LinksField(node, peers, g); !links.empty()) {
      line += " Links=" + links;
    }
    lines += line + "\n";
  }

  std::string out = header;
  out += "# slurm.conf needs (merge into the node's own NodeName line):\n";
  out += "#   GresTypes=gpu\n";
  out += "#   NodeName=" + node_name;
  if (numbering) out += " " + numbering->SlurmConfLayout();
  const std::string gres = counts.Field();
  if (!gres.empty()) out += " Gres=" + gres;
  out += "\n";
  if (cores_left_out) out += "# Cores= left out: " + cores_note + "\n";
  return out + notes + lines;
}

}  // namespace gpupool::gpu
