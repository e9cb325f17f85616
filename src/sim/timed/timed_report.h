// Renders a time-driven run for people (text), programs (JSON) and plots (CSV). Pure
// string building; the caller decides where it goes.
#pragma once

#include <cstdint>
#include <string>

#include "common/json.h"
#include "sim/timed/timed_experiment.h"
#include "sim/timed/timed_metrics.h"

namespace gpupool::sim {

// What was run, echoed in every report so results can be reproduced.
struct TimedRunInfo {
  std::string workload;  // trace path or name
  std::string trace_format;
  std::string cluster;  // spec or node file
  int32_t nodes = 0;
  std::string queue_policy;
  std::string start_rule;
  std::string placement_policy;
  std::string fair_group;
  uint64_t seed = 0;
  std::string gpu_failures;  // how GPU failures were made; empty without them
};

OrderedJson TimedReportJson(const TimedRunInfo& info, const TimedRun& run,
                            const TimedSummary& summary);
std::string TimedReportText(const TimedRunInfo& info, const TimedRun& run,
                            const TimedSummary& summary);
// time_s,gpu_alloc_pct,running_jobs,pending_jobs
std::string AllocationCsv(const TimedSummary& summary);
// group,jobs,mean_jct_s,mean_delay_s,gpu_hours,gpu_hours_share,service_ratio
std::string GroupsCsv(const TimedSummary& summary);
// id,user,project,submit_s,start_s,end_s,duration_s,gpu_milli,tasks,fate,reason,
// waited_s,preemptions,lost_s,gpu_failures: start_s is its first start, waited_s its wait
// over every attempt (-1 if it never started), lost_s the run time preemptions and GPU
// failures cost it.
std::string JobsCsv(const TimedRun& run);

}  // namespace gpupool::sim
