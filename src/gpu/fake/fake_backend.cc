// Fake backend: replays a node description file (schema gpupool.node/v1) through the
// same NodeFromJson validation as any other input, so a capture from a real node can be
// exercised anywhere and a hostile file ends in an error naming the file and the field.
#include "gpu/fake/fake_backend.h"

#include "common/json.h"
#include "gpu/node_json.h"

namespace gpupool::gpu {
namespace {

class FakeBackend final : public GpuBackend {
 public:
  explicit FakeBackend(std::string file) : file_(std::move(file)) {}

  std::string_view name() const override { return "fake"; }

  Result<NodeInfo> Discover() override {
    if (file_.empty()) {
      return Status::InvalidArgument(
          "the fake backend needs a node file: pass --fake FILE (a `gpupool gpus --json` "
          "capture)");
    }
    // ReadJsonFile and NodeFromJson both name the file in their errors.
    GP_ASSIGN_OR_RETURN(Json json, ReadJsonFile(file_));
    // The telemetry profile is the sampler's (gpu/telemetry.h), not the node's.
    if (json.is_object()) json.erase("telemetry");
    GP_ASSIGN_OR_RETURN(NodeInfo node, NodeFromJson(json, file_));
    // A capture keeps the backend that found each GPU; hand-written files may leave it out.
    for (GpuInfo& g : node.gpus) {
      if (g.backend.empty()) g.backend = "fake";
    }
    return node;
  }

 private:
  std::string file_;
};

}  // namespace

std::unique_ptr<GpuBackend> NewFakeBackend(const DiscoveryOptions& options) {
  return std::make_unique<FakeBackend>(options.fake_node_file);
}

}  // namespace gpupool::gpu
