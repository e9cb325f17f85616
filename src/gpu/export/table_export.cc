// The readable table of `gpupool gpus`: what an admin wants at a glance, in the spirit of
// nvidia-smi and `nvidia-smi topo -m`, for any vendor. No fmt here: this file is linked
// into every binary that decodes a node (gpupool-exec, gpupool-agent-shim too), and fmt
// would bring its shared library and the shared libstdc++ into each of their starts.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/strings.h"
#include "gpu/export/export_util.h"
#include "gpu/export/exporters.h"

namespace gpupool::gpu {
namespace {

using export_internal::FindLink;
using export_internal::GpuLabel;
using export_internal::Mib;
using export_internal::Printable;

std::string OnOff(const std::optional<bool>& v) {
  if (!v) return "-";
  return *v ? "on" : "off";
}

std::string Watts(const std::optional<double>& v) {
  if (!v || !std::isfinite(*v)) return "-";
  return StrFormat("%.0f", *v);
}

// Left-aligned columns separated by two spaces; the last column is not padded.
std::string RenderColumns(const std::vector<std::vector<std::string>>& rows,
                          const std::string& indent) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line = indent;
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(width[c] - row[c].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

std::string DriverLine(const char* vendor, const char* runtime, const DriverInfo& d) {
  std::string line = std::string(vendor) + " driver " +
                     (d.version.empty() ? std::string("unknown") : Printable(d.version));
  if (!d.runtime_version.empty()) {
    line += std::string(", ") + runtime + " " + Printable(d.runtime_version);
  }
  return line + "\n";
}

std::string GpuRows(const NodeInfo& node) {
  std::vector<std::vector<std::string>> rows = {{"GPU", "VENDOR", "NAME", "MEMORY USED / TOTAL",
                                                 "UTIL", "TEMP", "POWER / LIMIT", "PCI BUS ID",
                                                 "NUMA", "MIG", "ECC"}};
  for (const GpuInfo& g : node.gpus) {
    std::string power = "-";
    if (g.power_watts || g.power_limit_watts) {
      power = Watts(g.power_watts) + " / " + Watts(g.power_limit_watts) + " W";
    }
    rows.push_back({
        g.index >= 0 ? std::to_string(g.index) : "-",
        std::string(VendorName(g.vendor)),
        g.name.empty() ? "-" : Printable(g.name),
        std::to_string(Mib(g.memory_used_bytes)) + " / " +
            std::to_string(Mib(g.memory_total_bytes)) + " MiB",
        g.utilization_percent ? std::to_string(*g.utilization_percent) + "%" : "-",
        g.temperature_celsius ? std::to_string(*g.temperature_celsius) + "C" : "-",
        power,
        g.pci_bus_id.empty() ? "-" : Printable(g.pci_bus_id),
        g.numa_node >= 0 ? std::to_string(g.numa_node) : "-",
        OnOff(g.mig_enabled),
        OnOff(g.ecc_enabled),
    });
  }
  return RenderColumns(rows, "");
}

std::string MigRows(const NodeInfo& node) {
  std::vector<std::vector<std::string>> rows = {
      {"GPU", "MIG", "PROFILE", "GI", "CI", "MEMORY", "UUID"}};
  for (size_t i = 0; i < node.gpus.size(); ++i) {
    const GpuInfo& g = node.gpus[i];
    for (size_t m = 0; m < g.mig_devices.size(); ++m) {
      const MigDevice& d = g.mig_devices[m];
      rows.push_back({
          GpuLabel(g, i),
          std::to_string(m),
          d.profile.empty() ? "-" : Printable(d.profile),
          d.gpu_instance_id >= 0 ? std::to_string(d.gpu_instance_id) : "-",
          d.compute_instance_id >= 0 ? std::to_string(d.compute_instance_id) : "-",
          std::to_string(Mib(d.memory_total_bytes)) + " MiB",
          d.uuid.empty() ? "-" : Printable(d.uuid),
      });
    }
  }
  if (rows.size() == 1) return "";
  return "\nMIG devices:\n" + RenderColumns(rows, "  ");
}

// AMD compute/memory partitioning (docs/sharing.md, "AMD"), for the GPUs that report it.
std::string PartitionRows(const NodeInfo& node) {
  std::vector<std::vector<std::string>> rows = {{"GPU", "COMPUTE", "MEMORY", "CUS"}};
  for (size_t i = 0; i < node.gpus.size(); ++i) {
    const GpuInfo& g = node.gpus[i];
    if (g.compute_partition.empty() && g.memory_partition.empty()) continue;
    rows.push_back({
        GpuLabel(g, i),
        g.compute_partition.empty() ? "-" : Printable(g.compute_partition),
        g.memory_partition.empty() ? "-" : Printable(g.memory_partition),
        g.compute_units > 0 ? std::to_string(g.compute_units) : "-",
    });
  }
  if (rows.size() == 1) return "";
  return "\nAMD partitions (each partition is its own device):\n" + RenderColumns(rows, "  ");
}

std::string LinkCell(const NodeInfo& node, const GpuInfo& a, const GpuInfo& b) {
  if (&a == &b) return "X";
  const GpuLink* l = FindLink(node, a.pci_bus_id, b.pci_bus_id);
  if (l == nullptr || a.pci_bus_id.empty()) return "?";
  if (l->nvlink_count > 0) return "NV" + std::to_string(l->nvlink_count);
  if (l->xgmi_count > 0) return "XGMI" + std::to_string(l->xgmi_count);
  return std::string(PcieLevelName(l->pcie_level));
}

// `nvidia-smi topo -m` style: how each pair of GPUs is connected, plus CPU/NUMA affinity.
std::string TopologyMatrix(const NodeInfo& node) {
  if (node.links.empty() || node.gpus.size() < 2) return "";
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header = {""};
  for (size_t i = 0; i < node.gpus.size(); ++i) header.push_back(GpuLabel(node.gpus[i], i));
  header.push_back("NUMA");
  header.push_back("CPU AFFINITY");
  rows.push_back(header);
  for (size_t i = 0; i < node.gpus.size(); ++i) {
    const GpuInfo& a = node.gpus[i];
    std::vector<std::string> row = {GpuLabel(a, i)};
    for (const GpuInfo& b : node.gpus) row.push_back(LinkCell(node, a, b));
    row.push_back(a.numa_node >= 0 ? std::to_string(a.numa_node) : "-");
    row.push_back(a.cpu_affinity.empty() ? "-" : Printable(a.cpu_affinity));
    rows.push_back(row);
  }
  return "\nTopology:\n" + RenderColumns(rows, "  ") +
         "Legend: X = self, NV# = # NVLinks, XGMI# = # XGMI links, BOARD = same board,\n"
         "  PIX = at most one PCIe switch, PXB = several PCIe switches, PHB = a PCIe host "
         "bridge,\n"
         "  NODE = across host bridges in one NUMA node, SYS = across NUMA nodes, ? = unknown\n";
}

std::string Diagnostics(const NodeInfo& node) {
  if (node.diagnostics.empty()) return "";
  std::string out = "\nDiagnostics:\n";
  for (const Diagnostic& d : node.diagnostics) {
    out += "  [" + Printable(d.backend) + "] " + Printable(d.message) + "\n";
  }
  return out;
}

}  // namespace

std::string ExportTable(const NodeInfo& node) {
  const std::string host = node.hostname.empty() ? "this node" : Printable(node.hostname);
  std::string out;
  if (node.gpus.empty()) {
    out = "No GPUs found on " + host + "\n";
  } else {
    out = "Node " + host + ": " + std::to_string(node.gpus.size()) + " GPU" +
          (node.gpus.size() == 1 ? "" : "s") + "\n";
  }
  if (node.nvidia) out += DriverLine("NVIDIA", "CUDA", *node.nvidia);
  if (node.amd) out += DriverLine("AMD", "ROCm", *node.amd);
  if (!node.gpus.empty()) {
    out += '\n';
    out += GpuRows(node);
    out += MigRows(node);
    out += PartitionRows(node);
    out += TopologyMatrix(node);
  }
  return out + Diagnostics(node);
}

}  // namespace gpupool::gpu
