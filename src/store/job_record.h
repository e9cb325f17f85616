// How both stores lay a job out (internal to src/store): its submission ("spec": the
// fields a user gives at submit and nothing changes afterwards, such as the command and
// the environment variables) apart from its state. The spec is stored once per distinct
// content, in job_specs keyed by its SHA-256, and every job with that content refers to
// it: the 1,000 elements of an array, or the same job submitted again, share one copy.
// Fields equal to a default job's are left out of both. Issue 25 item 7: a whole job
// per row made an array element cost its submission's size (4 KB with a 40-variable
// environment, 8 KB in the red team's flood) instead of its state's (about 130 bytes
// of store).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "common/json.h"
#include "common/status.h"
#include "jobs/job.h"

namespace gpupool::store::internal {

struct JobRecord {
  std::string body;       // its state: its JSON less the id (the row's), the spec's fields
                          // and the fields a default job has
  std::string spec;       // the spec's JSON (compact, keys in JobToJson's order)
  std::string spec_hash;  // SHA-256 of `spec`, 64 lowercase hex digits
};

JobRecord EncodeJobRecord(const jobs::Job& job);

// The job from its row: its id, its body and the text of the spec it refers to; `spec`
// empty for a row written whole (before job_specs existed). Errors name "stored job".
Result<jobs::Job> DecodeJobRecord(int64_t id, std::string_view body, std::string_view spec);

// The same, with the spec already parsed (nullptr: none).
Result<jobs::Job> DecodeJobRecord(int64_t id, std::string_view body, const Json* spec);

// Specs parsed once per listing: the elements of an array share one.
class SpecCache {
 public:
  // The spec of job_specs row `id`, parsed from `text()` the first time it is asked for.
  Result<const Json*> Get(int64_t id, const std::function<std::string()>& text);

 private:
  std::map<int64_t, Json> parsed_;
};

}  // namespace gpupool::store::internal
