// TraceJob: one job of a time-driven workload, as the trace readers produce it and the
// time-driven experiment consumes it. A plain value type with no dependency on the
// scheduling core, so readers can be written and tested on their own; the experiment
// converts it into the scheduler's job type (timed_experiment.cc).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpupool::sim {

// What one task of a job asks for. All tasks of a job are placed together or not at all.
struct TraceTask {
  int num_gpu = 0;        // GPUs on one node; 0 = CPU-only task
  int gpu_milli = 0;      // share of each GPU in thousandths (1..1000; < 1000 only if num_gpu == 1)
  int64_t cpu_milli = 0;  // CPU in thousandths of a core
  int64_t memory_mib = 0;               // memory in MiB
  std::vector<std::string> gpu_models;  // allowed GPU models; empty = any
  // GPU memory a share needs, in MiB (`--gpu-mem`); 0 = its share of the GPU's memory.
  // Decides which MIG instances it fits; only for shares (gpu_milli < 1000).
  int64_t gpu_memory_mib = 0;

  int64_t TotalGpuMilli() const { return static_cast<int64_t>(num_gpu) * gpu_milli; }
};

struct TraceJob {
  std::string id;
  std::string user;                // for fair share by user
  std::string project;             // for fair share by project (Philly: the virtual cluster)
  int64_t submit_s = 0;            // submission time, seconds from the trace's origin
  int64_t duration_s = 0;          // run time once started, seconds
  int64_t time_limit_s = 0;        // the user's limit, seconds; 0 = none given
  int64_t runtime_estimate_s = 0;  // a run-time guess for shortest-job-first; 0 = none
  int priority = 0;                // larger runs first under the `priority` queue policy
  std::vector<TraceTask> tasks;
  // Admission, as the live scheduler has it (sched/admission/gates.h):
  std::string array;          // jobs naming the same array are its elements; empty = none
  int array_max_running = 0;  // at most this many of the array's elements run at once; 0 = any
  int64_t held_for_s = 0;     // held this long after submission, then released; 0 = not held
  bool requeue = false;       // goes back to the queue when a GPU failure ends it (--requeue)

  int64_t TotalGpuMilli() const {
    int64_t sum = 0;
    for (const TraceTask& t : tasks) sum += t.TotalGpuMilli();
    return sum;
  }
};

// Checks a task's invariants: 0 <= gpu_milli <= 1000, num_gpu == 0 exactly when
// gpu_milli == 0, fractional shares only with one GPU, no negative amounts. `where`
// starts the message ("jobs.csv:12").
Status ValidateTraceTask(const TraceTask& task, std::string_view where);

}  // namespace gpupool::sim
