// The usage limits live with the QuotaLimit gate that enforces them
// (sched/admission/limits.h); the controller stores them and checks max_queued at submit,
// and who may charge which project (project_access.h).
#pragma once

#include "sched/admission/limits.h"
#include "sched/admission/project_access.h"

namespace gpupool::controller {

using sched::Limit;
using sched::LimitReason;
using sched::Limits;
using sched::LimitsFromJson;
using sched::LimitsToJson;
using sched::ProjectEnforcement;

}  // namespace gpupool::controller
