// The hardware health fields of a GPU telemetry sample on the wire (gpu::HardwareHealth in
// protocol::GpuTelemetry, POST /v1/agent/telemetry, added within protocol 1.3): flat keys
// beside the sample's others, each optional, so older controllers ignore them and older
// agents leave them out. agent_protocol.cc calls these for each sample.
#pragma once

#include <string>

#include "common/json.h"
#include "common/status.h"
#include "gpu/health_policy.h"

namespace gpupool::protocol {

// Writes the fields of `hw` that are set into the sample object `j`.
void EncodeHardwareHealth(const gpu::HardwareHealth& hw, OrderedJson* j);
// Reads them from the sample object `j` (at `path`, for errors): counts are integers in
// 0..2^40, flags booleans; absent or null leaves a field unset. InvalidArgument naming the
// field otherwise (network input).
Status DecodeHardwareHealth(const Json& j, const std::string& path, gpu::HardwareHealth* hw);

}  // namespace gpupool::protocol
