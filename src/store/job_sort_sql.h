// The ORDER BY of a sorted job listing (JobFilter::sort, jobs/job_sort.h) for both
// backends: the same values JobSortLess compares in memory, read from the job's row, its
// state record (jobs.body) and its submission (job_specs.body, or the whole job in
// jobs.body for a row written before job_specs; job_record.h). Fields equal to a default
// job's are not stored, so each value falls back to the default's.
#pragma once

#include <string>
#include <vector>

#include "jobs/job_sort.h"

namespace gpupool::store::internal {

enum class SqlDialect { kSqlite, kPostgres };

// " ORDER BY ..., jobs.id" for `keys` (not empty); `now_param` is the SQL text of the
// parameter holding the time (µs) that wait and runtime run to ("?5", "$3").
// Whether that ORDER BY reads `now_param` (wait and runtime do): PostgreSQL refuses a
// parameter the statement does not use.
bool JobSortUsesNow(const std::vector<jobs::JobSortKey>& keys);

std::string JobOrderBySql(const std::vector<jobs::JobSortKey>& keys, SqlDialect dialect,
                          const std::string& now_param);

}  // namespace gpupool::store::internal
