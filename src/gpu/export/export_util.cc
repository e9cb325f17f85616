#include "gpu/export/export_util.h"

#include "common/strings.h"

namespace gpupool::gpu::export_internal {

std::string Printable(std::string_view s) {
  std::string out = SanitizeUtf8(s);
  for (char& c : out) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) c = '?';
  }
  return out;
}

std::vector<std::string> GpuDeviceNodes(const GpuInfo& gpu) {
  if (!gpu.device_nodes.empty()) return gpu.device_nodes;
  // NVIDIA's node names follow the minor number by driver convention; other vendors'
  // render nodes do not follow it reliably enough to guess.
  if (gpu.vendor == Vendor::kNvidia && gpu.minor_number >= 0) {
    return {"/dev/nvidia" + std::to_string(gpu.minor_number)};
  }
  return {};
}

std::string GpuLabel(const GpuInfo& gpu, size_t position) {
  std::string prefix = "GPU";
  if (gpu.vendor == Vendor::kAmd) prefix = "AMD";
  if (gpu.vendor == Vendor::kIntel) prefix = "INTEL";
  return prefix + std::to_string(gpu.index >= 0 ? static_cast<size_t>(gpu.index) : position);
}

const GpuLink* FindLink(const NodeInfo& node, std::string_view a, std::string_view b) {
  for (const GpuLink& l : node.links) {
    if ((l.a == a && l.b == b) || (l.a == b && l.b == a)) return &l;
  }
  return nullptr;
}

bool ParseMajorMinor(std::string_view text, int* major, int* minor) {
  const std::vector<std::string> parts = Split(text, '.');
  if (parts.size() < 2) return false;
  auto ma = ParseInt64(parts[0]);
  auto mi = ParseInt64(parts[1]);
  if (!ma || !mi || *ma < 0 || *ma > 999 || *mi < 0 || *mi > 99) return false;
  *major = static_cast<int>(*ma);
  *minor = static_cast<int>(*mi);
  return true;
}

}  // namespace gpupool::gpu::export_internal
