// The NVML backend: loads libnvidia-ml at run time and reports the node's NVIDIA GPUs.
#include "gpu/nvml/nvml_backend.h"

#include <unistd.h>

#include "gpu/nvml/nvml_device.h"
#include "gpu/nvml/nvml_diagnostics.h"
#include "gpu/nvml/nvml_driver.h"
#include "gpu/nvml/nvml_library.h"
#include "gpu/nvml/nvml_mig_minors.h"
#include "gpu/nvml/nvml_topology.h"

namespace gpupool::gpu {
namespace {

// No real node has more; a larger count means a broken driver, and honouring it would
// mean millions of calls and a giant answer.
constexpr unsigned kMaxGpus = 1024;

class NvmlBackend final : public GpuBackend {
 public:
  explicit NvmlBackend(DiscoveryOptions options) : options_(std::move(options)) {}
  std::string_view name() const override { return "nvml"; }
  Result<NodeInfo> Discover() override;

 private:
  DiscoveryOptions options_;
};

Result<NodeInfo> NvmlBackend::Discover() {
  // Declaration order is teardown order in reverse: nvmlShutdown runs before dlclose,
  // on every return path.
  GP_ASSIGN_OR_RETURN(auto library, nvml::NvmlLibrary::Open(options_.nvml_library));
  GP_ASSIGN_OR_RETURN(auto session, nvml::NvmlSession::Start(*library));
  const nvml::Functions& fn = library->fn();
  nvml::DiagnosticSink sink(*library);

  unsigned count = 0;
  if (nvml::Return rc = fn.device_get_count_v2(&count); rc != nvml::kSuccess) {
    return Status::Unavailable("nvmlDeviceGetCount_v2 failed: " + library->ErrorText(rc) +
                               "; check that the NVIDIA driver works (nvidia-smi)");
  }
  if (count > kMaxGpus) {
    return Status::InvalidArgument("NVML reports " + std::to_string(count) +
                                   " GPUs, more than the " + std::to_string(kMaxGpus) +
                                   " a node can have: the NVIDIA driver or libnvidia-ml is "
                                   "broken; reinstall the driver");
  }

  NodeInfo node;
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) node.hostname = host;
  node.nvidia = nvml::QueryDriver(*library, options_, &sink);

  std::vector<nvml::TopologyGpu> topology;
  for (unsigned i = 0; i < count; ++i) {
    const int index = static_cast<int>(i);
    nvml::Device device = nullptr;
    const nvml::Return rc = fn.device_get_handle_by_index_v2(i, &device);
    if (rc != nvml::kSuccess || device == nullptr) {
      const std::string why =
          rc == nvml::kSuccess ? "it returned no handle" : library->ErrorText(rc);
      sink.Note("GPU " + std::to_string(i) +
                " is skipped: nvmlDeviceGetHandleByIndex_v2 failed: " + why +
                (rc == nvml::kErrorNoPermission ? "; check the permissions of /dev/nvidia*"
                                                : "; check the GPU with nvidia-smi"));
      continue;
    }
    node.gpus.push_back(nvml::QueryGpu(*library, options_, index, device, &sink));
    topology.push_back({index, device, node.gpus.back().pci_bus_id});
  }
  nvml::FillMigDeviceNodes(options_.proc_root, &node.gpus, &sink);
  node.links = nvml::QueryLinks(*library, topology, &sink);
  node.diagnostics = sink.Take();
  return node;
}

}  // namespace

std::unique_ptr<GpuBackend> NewNvmlBackend(const DiscoveryOptions& options) {
  return std::make_unique<NvmlBackend>(options);
}

}  // namespace gpupool::gpu
