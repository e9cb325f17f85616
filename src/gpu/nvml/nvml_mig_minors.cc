#include "gpu/nvml/nvml_mig_minors.h"

#include <algorithm>

#include "common/file_util.h"
#include "common/strings.h"

namespace gpupool::gpu::nvml {
namespace {

// The real file lists every possible instance of every GPU: some tens of KiB.
constexpr size_t kMaxMigMinorsBytes = 4u << 20;
constexpr uint64_t kMaxCapMinor = 1u << 20;

std::string InstanceKey(int gpu_minor, int gi) {
  return "gpu" + std::to_string(gpu_minor) + "/gi" + std::to_string(gi);
}

std::string CapNode(unsigned minor) {
  return "/dev/nvidia-caps/nvidia-cap" + std::to_string(minor);
}

std::string Who(const GpuInfo& gpu) { return "GPU " + std::to_string(gpu.index); }

}  // namespace

MigMinors MigMinors::Parse(std::string_view text) {
  MigMinors m;
  for (const std::string& raw : Split(text, '\n')) {
    const std::string_view line = Trim(raw);
    const size_t space = line.find_first_of(" \t");
    if (space == std::string_view::npos) continue;
    const auto minor = ParseUint64(Trim(line.substr(space + 1)));
    if (!minor || *minor > kMaxCapMinor) continue;
    m.minors_[std::string(line.substr(0, space))] = static_cast<unsigned>(*minor);
  }
  return m;
}

std::vector<std::string> MigMinors::DeviceNodes(int gpu_minor, int gi, int ci) const {
  if (gpu_minor < 0 || gi < 0 || ci < 0) return {};
  const std::string instance = InstanceKey(gpu_minor, gi);
  auto g = minors_.find(instance + "/access");
  auto c = minors_.find(instance + "/ci" + std::to_string(ci) + "/access");
  if (g == minors_.end() || c == minors_.end()) return {};
  return {CapNode(g->second), CapNode(c->second)};
}

std::string MigMinorsPath(std::string_view proc_root) {
  std::string root(proc_root);
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  return root + "/driver/nvidia-caps/mig-minors";
}

void FillMigDeviceNodes(std::string_view proc_root, std::vector<GpuInfo>* gpus,
                        DiagnosticSink* sink) {
  const bool any_mig = std::any_of(gpus->begin(), gpus->end(),
                                   [](const GpuInfo& g) { return !g.mig_devices.empty(); });
  if (!any_mig) return;
  const std::string path = MigMinorsPath(proc_root);
  Result<std::string> text = ReadFileToString(path, kMaxMigMinorsBytes);
  if (!text.ok()) {
    std::string which;
    size_t count = 0;
    for (const GpuInfo& g : *gpus) {
      if (g.mig_devices.empty()) continue;
      which += (which.empty() ? "" : ", ") + std::to_string(g.index);
      count += g.mig_devices.size();
    }
    sink->Note(text.status().message() + ": the " + std::to_string(count) + " MIG devices of GPU " +
               which +
               " have no /dev/nvidia-caps nodes, so Slurm and containers cannot be given one "
               "alone; check that the NVIDIA driver is loaded with MIG support");
    return;
  }
  const MigMinors minors = MigMinors::Parse(*text);
  for (GpuInfo& g : *gpus) {
    for (MigDevice& m : g.mig_devices) {
      m.device_nodes = minors.DeviceNodes(g.minor_number, m.gpu_instance_id, m.compute_instance_id);
      if (!m.device_nodes.empty()) continue;
      std::string why;
      if (g.minor_number < 0) {
        why = "the GPU's minor number is unknown";
      } else if (m.gpu_instance_id < 0 || m.compute_instance_id < 0) {
        why = "its GPU or compute instance id is unknown";
      } else {
        why = "gpu" + std::to_string(g.minor_number) + "/gi" + std::to_string(m.gpu_instance_id) +
              "[/ci" + std::to_string(m.compute_instance_id) + "]/access is not in " + path;
      }
      sink->Note(Who(g) + ": MIG device " + m.uuid + " has no /dev/nvidia-caps nodes (" + why +
                 "), so Slurm and containers cannot be given it alone");
    }
  }
}

}  // namespace gpupool::gpu::nvml
