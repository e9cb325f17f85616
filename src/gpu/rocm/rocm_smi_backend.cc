// PLACEHOLDER: replaced by the real backend.
#include "gpu/rocm/rocm_smi_backend.h"

namespace gpupool::gpu {
namespace {
class Placeholder final : public GpuBackend {
 public:
  std::string_view name() const override { return "rocm"; }
  Result<NodeInfo> Discover() override { return Status::Unimplemented("rocm backend not built yet"); }
};
}  // namespace
std::unique_ptr<GpuBackend> NewRocmSmiBackend(const DiscoveryOptions&) { return std::make_unique<Placeholder>(); }
}  // namespace gpupool::gpu
