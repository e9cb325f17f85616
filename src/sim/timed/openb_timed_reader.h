// Reads an openb pod list (../shared/traces/openb/openb_pod_list_*.csv) as a time-driven
// workload: each pod is a one-task job submitted at creation_time that runs for
// deletion_time - scheduled_time (creation_time when the pod was never scheduled, as
// for the trace's Pending pods). The pod's QoS class (LS, BE, ...) is its user and
// project, so fair share runs between QoS classes. Columns are found by name; the
// variants without times (multigpu20) are refused with the missing column named.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "sim/csv_table.h"
#include "sim/timed/trace_job.h"

namespace gpupool::sim {

Result<std::vector<TraceJob>> ReadOpenbTimedJobs(const CsvTable& table, size_t max_jobs = 0);
Result<std::vector<TraceJob>> ReadOpenbTimedFile(const std::string& path, size_t max_jobs = 0);

}  // namespace gpupool::sim
