// Reads the Philly job list (`timestamp,duration,num_gpus,gpu_time,cluster`, as in
// ../shared/traces/philly) into TraceJobs. The virtual cluster becomes both the user and
// the project, so fair share runs between virtual clusters. Jobs wider than a node become
// gangs of per-node tasks: full nodes first, then the remainder (12 GPUs on 8-GPU nodes
// = 8 + 4). Philly lists GPUs only; CPU and memory per GPU are options.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "sim/csv_table.h"
#include "sim/timed/trace_job.h"

namespace gpupool::sim {

struct PhillyOptions {
  int gpus_per_node = 8;           // the widest task; wider jobs are split
  int64_t cpu_milli_per_gpu = 0;   // given to each task per GPU it uses
  int64_t memory_mib_per_gpu = 0;  // given to each task per GPU it uses
  // Philly has no time limits. 0 leaves jobs without one; otherwise each job's limit is
  // ceil(duration x factor), i.e. a user estimate that many times the true run time.
  double time_limit_factor = 0;
  size_t max_jobs = 0;  // read only the first N jobs; 0 = all
};

// Submission times are seconds since the Unix epoch (the trace's timestamps are UTC).
Result<std::vector<TraceJob>> ReadPhillyJobs(const CsvTable& table, const PhillyOptions& options);
Result<std::vector<TraceJob>> ReadPhillyFile(const std::string& path, const PhillyOptions& options);

// Splits `num_gpus` into per-node task widths: full nodes first, then the remainder.
std::vector<int> SplitGpusPerNode(int num_gpus, int gpus_per_node);

}  // namespace gpupool::sim
