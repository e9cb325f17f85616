// The orders a job listing can come in (GET /v1/jobs?sort=, `gpupool queue --sort`): the
// fields, their parsing ("state,-priority", Slurm's squeue --sort style) and the order of
// two jobs in memory. The store orders its rows by the same values in SQL
// (src/store/job_sort_sql.h). Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "jobs/job.h"

namespace gpupool::jobs {

enum class JobSortField {
  kId,
  kUser,
  kName,
  kProject,
  kState,      // lifecycle order: PENDING, ASSIGNED, RUNNING, SUCCEEDED, FAILED, ...
  kPriority,   // --priority
  kGpus,       // GPUs of all tasks, in thousandths (a share counts its part)
  kNodes,      // the first task's node ("" while not placed)
  kSubmitted,  // submit time
  kStart,      // start time (0 while not started)
  kEnded,      // end time (0 while not ended)
  kWait,       // from submit to start, else to its end, else to now
  kRuntime,    // from start to its end, else to now; 0 while not started
  kTimeLimit,  // --time, seconds (0: none)
};

struct JobSortKey {
  JobSortField field = JobSortField::kId;
  bool descending = false;
};

std::string_view JobSortFieldName(JobSortField f);

// "id, user, name, ...": the fields, for help texts and errors.
std::string JobSortFieldList();

// A comma list of fields, each ascending or, written -FIELD, descending ("+FIELD" is
// ascending too); `descending_default` turns the unsigned ones around (the API's
// order=desc). Errors name `what` (the parameter or flag) and the fields allowed.
Result<std::vector<JobSortKey>> ParseJobSort(std::string_view text, bool descending_default,
                                             std::string_view what);

// The keys back as text, "state,-priority" (what the CLI sends).
std::string JobSortText(const std::vector<JobSortKey>& keys);

// Whether `a` comes before `b` in the order of `keys`; `now_us` for wait and runtime.
// Ties go by id, in the direction of the first key, so that pages of one order never
// overlap.
bool JobSortLess(const Job& a, const Job& b, const std::vector<JobSortKey>& keys, int64_t now_us);

// The integer a job sorts by for the fields that are numbers (all but user, name,
// project and nodes); 0 for those.
int64_t JobSortNumber(const Job& job, JobSortField f, int64_t now_us);

}  // namespace gpupool::jobs
