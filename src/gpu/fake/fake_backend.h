// Fake backend: a node description file in the JSON schema that `gpupool gpus --json`
// prints (see docs/node-schema.md), so a real node can be captured once and replayed.
#pragma once

#include <memory>

#include "gpu/gpu_backend.h"

namespace gpupool::gpu {
std::unique_ptr<GpuBackend> NewFakeBackend(const DiscoveryOptions& options);
}  // namespace gpupool::gpu
