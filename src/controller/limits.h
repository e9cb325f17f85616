// The usage limits live with the QuotaLimit gate that enforces them
// (sched/admission/limits.h); the controller stores them and checks max_queued at submit.
#pragma once

#include "sched/admission/limits.h"

namespace gpupool::controller {

using sched::Limit;
using sched::LimitReason;
using sched::Limits;
using sched::LimitsFromJson;
using sched::LimitsToJson;

}  // namespace gpupool::controller
