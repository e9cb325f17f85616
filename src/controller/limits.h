// The usage limits live with the QuotaLimit gate that enforces them
// (sched/admission/limits.h); the controller stores them and checks max_queued at submit,
// and who may charge which project (project_access.h).
#pragma once

#include <cstdint>
#include <functional>

#include "common/status.h"
#include "sched/admission/limits.h"
#include "sched/admission/project_access.h"

namespace gpupool::controller {

using sched::Limit;
using sched::LimitReason;
using sched::Limits;
using sched::LimitsFromJson;
using sched::LimitsToJson;
using sched::ProjectEnforcement;

// The limits with their revision in the store (store::SettingRecord): 0 while never set,
// one more at every write. GET /v1/limits answers it, and a PUT that names it is a
// compare-and-set on it.
struct RevisedLimits {
  Limits limits;
  int64_t revision = 0;
  friend bool operator==(const RevisedLimits&, const RevisedLimits&) = default;
};

// What a limits write must pass besides the admin's right to make it (the API's checks of
// the names it adds, api/admin.cc): `next` against the limits it replaces, read under the
// write, so that another admin's write landing first is checked against too. Its error
// refuses the write.
using LimitsCheck = std::function<Status(const Limits& next, const Limits& replaced)>;

}  // namespace gpupool::controller
