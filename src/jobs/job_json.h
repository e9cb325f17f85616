// JSON form of jobs: the REST API's request and response bodies and the store's record.
//
// JobFromJson checks every field (types, ranges, unknown fields) and the request's
// invariants, so a job that gets past it is well formed. Errors name the field and the fix.
#pragma once

#include <string_view>

#include "common/json.h"
#include "common/status.h"
#include "jobs/job.h"

namespace gpupool::jobs {

OrderedJson RequestToJson(const ResourceRequest& r);
// `reject_unknown`: an unknown field is an error (what users send); readers of network
// messages from other gpupool versions pass false and ignore such fields.
Result<ResourceRequest> RequestFromJson(const Json& j, std::string_view path,
                                        bool reject_unknown = true);

OrderedJson NeedsToJson(const EnvNeeds& n);
Result<EnvNeeds> NeedsFromJson(const Json& j, std::string_view path, bool reject_unknown = true);

OrderedJson TaskStatusToJson(const TaskStatus& t);
Result<TaskStatus> TaskStatusFromJson(const Json& j, std::string_view path,
                                      bool reject_unknown = true);

OrderedJson JobToJson(const Job& job);
// Reads a full job record (all fields optional except the request's invariants).
Result<Job> JobFromJson(const Json& j, std::string_view path = "job", bool reject_unknown = true);

// Checks a resource request's invariants and sane limits.
Status ValidateRequest(const ResourceRequest& r);

}  // namespace gpupool::jobs
