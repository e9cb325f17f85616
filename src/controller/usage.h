// GPU-hours accounting: how much GPU each user or project held in a time window.
// A job holds num_gpus x gpu_milli/1000 GPUs per task from its start to its end (or
// `now` while it runs); only the part inside the window counts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "jobs/job.h"

namespace gpupool::controller {

struct UsageRow {
  std::string key;  // user or project
  double gpu_hours = 0;
  int jobs = 0;
};

// The GPU-hours job `j` held inside [since_us, until_us) (up to now_us while it runs).
double JobGpuHours(const jobs::Job& j, int64_t since_us, int64_t until_us, int64_t now_us);

// `by` is "user" or "project". Rows sorted by GPU-hours, largest first.
std::vector<UsageRow> ComputeUsage(const std::vector<jobs::Job>& jobs, int64_t since_us,
                                   int64_t until_us, int64_t now_us, const std::string& by);

}  // namespace gpupool::controller
