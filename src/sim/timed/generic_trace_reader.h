// Reads gpupool's own job trace format, in CSV or JSON (see docs/sim.md, "Generic trace
// format"). One record per job; every job has `tasks` identical tasks, each asking for
// `gpus_per_task` GPUs of `gpu_milli` thousandths, `cpu_milli` and `memory_mib`.
//
//   job_id,user,project,submit_time,duration,time_limit,runtime_estimate,tasks,
//   gpus_per_task,gpu_milli,cpu_milli,memory_mib,gpu_model,priority
//
// Required: job_id, submit_time, duration. Everything else has a default (user
// "default", project = user, no time limit or estimate, 1 task, 0 GPUs, gpu_milli 1000
// when GPUs are asked for, 0 CPU and memory, any model, priority 0). Unknown columns or
// keys are errors, so a typo cannot silently drop a constraint. JSON is either an array
// of job objects or {"jobs": [...]}, with the same names; gpu_model is a string of
// `|`-separated models in both. Times are whole seconds; in CSV, submit_time may also
// be a UTC timestamp "YYYY-MM-DD HH:MM:SS".
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "sim/csv_table.h"
#include "sim/timed/trace_job.h"

namespace gpupool::sim {

Result<std::vector<TraceJob>> ReadGenericCsv(const CsvTable& table);
// `source` names the input in errors.
Result<std::vector<TraceJob>> ReadGenericJson(std::string_view text, const std::string& source);
// Picks CSV or JSON by the first non-blank character ('[' or '{' = JSON).
Result<std::vector<TraceJob>> ReadGenericTraceText(std::string_view text,
                                                   const std::string& source);
Result<std::vector<TraceJob>> ReadGenericTraceFile(const std::string& path);

}  // namespace gpupool::sim
