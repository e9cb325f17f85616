#include "sim/timed/philly_reader.h"

#include <fmt/format.h>

#include <cmath>

#include "common/strings.h"
#include "sim/timed/civil_time.h"

namespace gpupool::sim {

std::vector<int> SplitGpusPerNode(int num_gpus, int gpus_per_node) {
  std::vector<int> widths;
  if (num_gpus <= 0) return {0};
  if (gpus_per_node <= 0) return {num_gpus};
  while (num_gpus > 0) {
    const int w = std::min(num_gpus, gpus_per_node);
    widths.push_back(w);
    num_gpus -= w;
  }
  return widths;
}

Result<std::vector<TraceJob>> ReadPhillyJobs(const CsvTable& table, const PhillyOptions& options) {
  if (options.gpus_per_node <= 0) {
    return Status::InvalidArgument("Philly reader: GPUs per node must be at least 1");
  }
  if (options.time_limit_factor < 0 || !std::isfinite(options.time_limit_factor)) {
    return Status::InvalidArgument(
        "Philly reader: the time-limit factor must be 0 (no limits) or positive");
  }
  GP_RETURN_IF_ERROR(table.RequireColumns({"timestamp", "duration", "num_gpus", "cluster"}));
  const bool has_gpu_time = table.HasColumn("gpu_time");
  std::vector<TraceJob> jobs;
  size_t n = table.num_rows();
  if (options.max_jobs > 0 && options.max_jobs < n) n = options.max_jobs;
  jobs.reserve(n);
  for (size_t r = 0; r < n; ++r) {
    TraceJob job;
    job.id = fmt::format("philly-{:05}", r);
    std::optional<int64_t> submit = ParseTimestampSeconds(table.Field(r, "timestamp"));
    if (!submit) {
      return Status::InvalidArgument(fmt::format(
          "{}: '{}' is not a time; expected 'YYYY-MM-DD HH:MM:SS' or seconds",
          table.Where(r, "timestamp"), SanitizeUtf8(table.Field(r, "timestamp").substr(0, 40))));
    }
    if (*submit < 0) {
      return Status::InvalidArgument(table.Where(r, "timestamp") +
                                     ": negative time is not allowed");
    }
    job.submit_s = *submit;
    GP_ASSIGN_OR_RETURN(double duration, table.Number(r, "duration", 0));
    if (duration > 1e12) {
      return Status::InvalidArgument(table.Where(r, "duration") +
                                     ": longer than 30,000 years; check the unit (seconds)");
    }
    job.duration_s = static_cast<int64_t>(std::ceil(duration));
    GP_ASSIGN_OR_RETURN(int64_t num_gpus, table.Int(r, "num_gpus", 0, 1 << 20));
    if (has_gpu_time) {
      // Not used (it is duration x num_gpus), but a broken value means a broken line.
      GP_RETURN_IF_ERROR(table.Number(r, "gpu_time", 0, 0.0).status());
    }
    std::string cluster(Trim(table.Field(r, "cluster")));
    if (cluster.empty()) {
      return Status::InvalidArgument(table.Where(r, "cluster") +
                                     ": empty; every job needs its virtual cluster");
    }
    job.user = cluster;
    job.project = std::move(cluster);
    if (options.time_limit_factor > 0) {
      job.time_limit_s = std::max<int64_t>(
          1, static_cast<int64_t>(std::ceil(duration * options.time_limit_factor)));
    }
    for (int width : SplitGpusPerNode(static_cast<int>(num_gpus), options.gpus_per_node)) {
      TraceTask task;
      task.num_gpu = width;
      task.gpu_milli = width > 0 ? 1000 : 0;
      task.cpu_milli = options.cpu_milli_per_gpu * std::max(width, 1);
      task.memory_mib = options.memory_mib_per_gpu * std::max(width, 1);
      job.tasks.push_back(std::move(task));
    }
    jobs.push_back(std::move(job));
  }
  return jobs;
}

Result<std::vector<TraceJob>> ReadPhillyFile(const std::string& path,
                                             const PhillyOptions& options) {
  GP_ASSIGN_OR_RETURN(CsvTable table, CsvTable::ReadFile(path));
  return ReadPhillyJobs(table, options);
}

}  // namespace gpupool::sim
