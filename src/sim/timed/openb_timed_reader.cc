#include "sim/timed/openb_timed_reader.h"

#include <fmt/format.h>

#include "common/strings.h"

namespace gpupool::sim {

Result<std::vector<TraceJob>> ReadOpenbTimedJobs(const CsvTable& t, size_t max_jobs) {
  GP_RETURN_IF_ERROR(t.RequireColumns({"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli",
                                       "creation_time", "deletion_time"}));
  size_t n = t.num_rows();
  if (max_jobs > 0 && max_jobs < n) n = max_jobs;
  std::vector<TraceJob> jobs;
  jobs.reserve(n);
  for (size_t r = 0; r < n; ++r) {
    TraceJob job;
    job.id = std::string(Trim(t.Field(r, "name")));
    if (job.id.empty()) return Status::InvalidArgument(t.Where(r, "name") + ": empty pod name");
    std::string qos(Trim(t.Field(r, "qos")));
    job.user = qos.empty() ? "default" : qos;
    job.project = job.user;
    TraceTask task;
    GP_ASSIGN_OR_RETURN(task.cpu_milli, t.Int(r, "cpu_milli", 0));
    GP_ASSIGN_OR_RETURN(task.memory_mib, t.Int(r, "memory_mib", 0));
    GP_ASSIGN_OR_RETURN(int64_t num_gpu, t.Int(r, "num_gpu", 0, 4096));
    GP_ASSIGN_OR_RETURN(int64_t gpu_milli, t.Int(r, "gpu_milli", 0));
    if (gpu_milli > 1000) {
      return Status::InvalidArgument(
          fmt::format("{}: GPU share {} is above 1000 (thousandths of one GPU)",
                      t.Where(r, "gpu_milli"), gpu_milli));
    }
    task.num_gpu = static_cast<int>(num_gpu);
    task.gpu_milli = static_cast<int>(gpu_milli);
    task.gpu_models = {};
    for (const std::string& m : Split(t.Field(r, "gpu_spec"), '|')) {
      std::string model(Trim(m));
      if (!model.empty()) task.gpu_models.push_back(std::move(model));
    }
    GP_RETURN_IF_ERROR(ValidateTraceTask(task, t.Where(r, "gpu_milli")));
    GP_ASSIGN_OR_RETURN(int64_t created, t.Int(r, "creation_time", 0));
    GP_ASSIGN_OR_RETURN(int64_t deleted, t.Int(r, "deletion_time", 0));
    int64_t started = created;
    if (t.HasColumn("scheduled_time")) {
      GP_ASSIGN_OR_RETURN(started, t.Int(r, "scheduled_time", 0, INT64_MAX, created));
    }
    if (deleted < started) {
      return Status::InvalidArgument(
          fmt::format("{}: {} is before the pod started ({}); deletion must not precede scheduling",
                      t.Where(r, "deletion_time"), deleted, started));
    }
    job.submit_s = created;
    job.duration_s = deleted - started;
    job.tasks.push_back(std::move(task));
    jobs.push_back(std::move(job));
  }
  return jobs;
}

Result<std::vector<TraceJob>> ReadOpenbTimedFile(const std::string& path, size_t max_jobs) {
  GP_ASSIGN_OR_RETURN(CsvTable table, CsvTable::ReadFile(path));
  return ReadOpenbTimedJobs(table, max_jobs);
}

}  // namespace gpupool::sim
