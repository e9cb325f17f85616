// PLACEHOLDER: replaced by the real backend.
#include "gpu/fake/fake_backend.h"

namespace gpupool::gpu {
namespace {
class Placeholder final : public GpuBackend {
 public:
  std::string_view name() const override { return "fake"; }
  Result<NodeInfo> Discover() override { return Status::Unimplemented("fake backend not built yet"); }
};
}  // namespace
std::unique_ptr<GpuBackend> NewFakeBackend(const DiscoveryOptions&) { return std::make_unique<Placeholder>(); }
}  // namespace gpupool::gpu
