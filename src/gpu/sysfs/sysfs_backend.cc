// PLACEHOLDER: replaced by the real backend.
#include "gpu/sysfs/sysfs_backend.h"

namespace gpupool::gpu {
namespace {
class Placeholder final : public GpuBackend {
 public:
  std::string_view name() const override { return "sysfs"; }
  Result<NodeInfo> Discover() override { return Status::Unimplemented("sysfs backend not built yet"); }
};
}  // namespace
std::unique_ptr<GpuBackend> NewSysfsBackend(const DiscoveryOptions&) { return std::make_unique<Placeholder>(); }
}  // namespace gpupool::gpu
