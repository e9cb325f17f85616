// The answers of a compare-and-set that lost, of jobs (Store::UpdateJobs) and of
// settings (Store::PutSettingIf), one definition for both backends (internal to src/store).
#pragma once

#include <cstdint>
#include <map>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "jobs/job.h"
#include "store/store.h"

namespace gpupool::store::internal {

// What the store holds of a job, as the compare-and-set checks it.
struct StoredVersion {
  jobs::JobState state = jobs::JobState::kPending;
  int64_t version = 0;
};

// The FailedPrecondition (IsConflict) naming `c`; `more` other jobs conflicted too.
Status ConflictError(const JobConflict& c, size_t more);

// The FailedPrecondition (IsConflict) of a setting's compare-and-set (PutSettingIf) that
// found revision `found` where the writer expected `expected`.
Status SettingConflictError(std::string_view key, int64_t found, int64_t expected);

// The answer to a transaction of `updates` in which update `failed` matched no row,
// from what the store held of the updates' jobs (`found` by id, read after the failed
// transaction; a job absent from it does not exist): NotFound for the first job that
// does not exist, else ConflictError for the first whose state or version differs.
// `conflicts` (may be null) gets every job that differs, each compared at its first
// update. When nothing differs any more (a writer raced the read), update `failed` is
// named, with what was read.
Status CasFailure(const std::vector<Store::JobUpdate>& updates, size_t failed,
                  const std::map<int64_t, StoredVersion>& found,
                  std::vector<JobConflict>* conflicts);

}  // namespace gpupool::store::internal
