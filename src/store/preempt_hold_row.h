// The stored form of a preemption hold's placement (PreemptHoldRecord::placement), one
// definition for both backends: JSON, as a job's placement is in its record.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "jobs/job.h"

namespace gpupool::store::internal {

std::string EncodeHoldPlacement(const std::vector<jobs::TaskPlacement>& placement);
// InvalidArgument, naming the hold, when `text` is not such a placement.
Result<std::vector<jobs::TaskPlacement>> DecodeHoldPlacement(std::string_view text,
                                                             int64_t preemptor);

}  // namespace gpupool::store::internal
