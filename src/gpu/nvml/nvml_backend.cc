// PLACEHOLDER: replaced by the real backend.
#include "gpu/nvml/nvml_backend.h"

namespace gpupool::gpu {
namespace {
class Placeholder final : public GpuBackend {
 public:
  std::string_view name() const override { return "nvml"; }
  Result<NodeInfo> Discover() override { return Status::Unimplemented("nvml backend not built yet"); }
};
}  // namespace
std::unique_ptr<GpuBackend> NewNvmlBackend(const DiscoveryOptions&) { return std::make_unique<Placeholder>(); }
}  // namespace gpupool::gpu
