#include "gpu/rocm/kfd_topology.h"

#include <algorithm>
#include <map>
#include <optional>

#include "common/strings.h"

namespace gpupool::gpu::rocm {
namespace {

constexpr std::string_view kNodesDir = "class/kfd/kfd/topology/nodes";
// Bounds that no real topology reaches; values beyond them are garbage, not hardware.
constexpr uint64_t kMaxNodeId = 1u << 16;
constexpr uint64_t kMaxRenderMinor = 1u << 20;

// A numeric property: absent -> nullopt silently, garbled -> nullopt and a Diagnostic.
std::optional<uint64_t> NumberProperty(const std::map<std::string, std::string>& props,
                                       const std::string& key, const std::string& path,
                                       uint64_t max, DiagnosticSink* sink) {
  auto it = props.find(key);
  if (it == props.end()) return std::nullopt;
  std::optional<uint64_t> v = ParseUint64(it->second);
  if (!v || *v > max) {
    sink->Add("ignored '" + key + "' in " + path + ": " + QuoteForMessage(it->second) +
              " is not a number between 0 and " + std::to_string(max));
    return std::nullopt;
  }
  return v;
}

}  // namespace

std::string KfdBusId(uint64_t domain, uint64_t location_id) {
  unsigned function = static_cast<unsigned>(location_id & 0x7);
  const unsigned partition = static_cast<unsigned>((location_id >> 28) & 0xf);
  if (function == 0 && partition > 0 && partition < 8) function = partition;
  return StrFormat("%04x:%02x:%02x.%x", static_cast<unsigned>(domain & 0xffffffff),
                   static_cast<unsigned>((location_id >> 8) & 0xff),
                   static_cast<unsigned>((location_id >> 3) & 0x1f), function);
}

std::string KfdNode::pci_bus_id() const { return KfdBusId(domain, location_id); }

std::vector<KfdNode> ReadKfdTopology(const SysfsReader& reader, DiagnosticSink* sink) {
  std::vector<KfdNode> nodes;
  for (const std::string& name : reader.ListDir(kNodesDir)) {
    std::optional<uint64_t> id = ParseUint64(name);
    if (!id || *id > kMaxNodeId) continue;
    const std::string dir = std::string(kNodesDir) + "/" + name;
    auto props = reader.ReadKeyValues(dir + "/properties");
    if (!props) continue;
    const std::string path = reader.Path(dir + "/properties");
    KfdNode n;
    n.id = static_cast<int>(*id);
    n.simd_count = NumberProperty(*props, "simd_count", path, UINT32_MAX, sink).value_or(0);
    n.simd_per_cu = NumberProperty(*props, "simd_per_cu", path, 1024, sink).value_or(0);
    n.gfx_target_version =
        NumberProperty(*props, "gfx_target_version", path, 999999, sink).value_or(0);
    n.location_id = NumberProperty(*props, "location_id", path, UINT32_MAX, sink).value_or(0);
    n.domain = NumberProperty(*props, "domain", path, 0xffff, sink).value_or(0);
    if (auto minor = NumberProperty(*props, "drm_render_minor", path, kMaxRenderMinor, sink)) {
      n.drm_render_minor = static_cast<int>(*minor);
    }
    n.unique_id = NumberProperty(*props, "unique_id", path, UINT64_MAX, sink).value_or(0);
    for (const std::string& link : reader.ListDir(dir + "/io_links")) {
      const std::string link_path = dir + "/io_links/" + link + "/properties";
      auto lp = reader.ReadKeyValues(link_path);
      if (!lp) continue;
      KfdIoLink l;
      l.type = NumberProperty(*lp, "type", reader.Path(link_path), UINT32_MAX, sink).value_or(0);
      if (auto to = NumberProperty(*lp, "node_to", reader.Path(link_path), kMaxNodeId, sink)) {
        l.node_to = static_cast<int>(*to);
      }
      n.io_links.push_back(l);
    }
    nodes.push_back(std::move(n));
  }
  std::sort(nodes.begin(), nodes.end(),
            [](const KfdNode& a, const KfdNode& b) { return a.id < b.id; });
  return nodes;
}

std::string GfxTargetName(uint64_t v) {
  if (v == 0) return "";
  return StrFormat("gfx%u%x%x", static_cast<unsigned>(v / 10000),
                   static_cast<unsigned>((v / 100) % 100), static_cast<unsigned>(v % 100));
}

const KfdNode* FindKfdGpu(const std::vector<KfdNode>& nodes, const std::string& pci_bus_id) {
  for (const KfdNode& n : nodes) {
    if (n.is_gpu() && n.pci_bus_id() == pci_bus_id) return &n;
  }
  return nullptr;
}

}  // namespace gpupool::gpu::rocm
