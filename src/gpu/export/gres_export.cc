// Slurm gres.conf lines for one node, what `AutoDetect=nvml` would find, written out so
// a cluster can pin them (and so AMD and fake nodes get the same treatment):
//   Name=gpu Type=h100 File=/dev/nvidia0 Cores=0-55,112-167 Links=-1,18,18,18,18,18,18,18
// Links lists, in the order the GPUs of that vendor appear, the NVLink (or XGMI) count to
// each other GPU, -1 for the GPU itself and 0 for none; it and Cores are left out when
// unknown. A GPU in MIG mode is replaced by one line per MIG device, whose Type carries
// the profile (a100_1g.10gb) and MultipleFiles the parent and capability nodes.
#include <algorithm>
#include <cctype>
#include <string>
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

std::string KeepTypeChars(std::string_view s) {
  std::string out;
  for (char c : s) {
    const char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (std::isalnum(static_cast<unsigned char>(l)) || l == '.' || l == '_') out += l;
  }
  return out;
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

}  // namespace

std::string GresTypeName(std::string_view device_name) {
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

std::string ExportGres(const NodeInfo& node) {
  std::string out = "# gres.conf for " +
                    (node.hostname.empty() ? std::string("this node") : Printable(node.hostname)) +
                    ", written by `gpupool gpus --format gres`\n";
  if (node.gpus.empty()) return out + "# no GPUs found\n";
  for (const GpuInfo& g : node.gpus) {
    std::vector<const GpuInfo*> peers;
    for (const GpuInfo& p : node.gpus) {
      // Links index the gres lines of whole GPUs; MIG devices have their own lines.
      if (p.vendor == g.vendor && !InMigMode(p)) peers.push_back(&p);
    }
    const std::string type = GresTypeName(g.name);
    const std::string file = Printable(PrimaryFile(g));
    std::string cores;
    if (!g.cpu_affinity.empty()) {
      cores = " Cores=";
      cores += Printable(g.cpu_affinity);
    }
    if (InMigMode(g)) {
      for (const MigDevice& m : g.mig_devices) {
        std::string line = "Name=gpu";
        const std::string profile = KeepTypeChars(m.profile);
        if (!type.empty()) {
          line += " Type=";
          line += type;
          if (!profile.empty()) {
            line += '_';
            line += profile;
          }
        }
        std::string files = file;
        for (const std::string& n : m.device_nodes) {
          if (!files.empty()) files += ',';
          files += Printable(n);
        }
        if (!files.empty()) line += " MultipleFiles=" + files;
        out += line + cores + "\n";
      }
      continue;
    }
    std::string line = "Name=gpu";
    if (!type.empty()) line += " Type=" + type;
    if (!file.empty()) line += " File=" + file;
    line += cores;
    if (const std::string links = LinksField(node, peers, g); !links.empty()) {
      line += " Links=" + links;
    }
    out += line + "\n";
  }
  return out;
}

}  // namespace gpupool::gpu
