#include "sched/queue/queued_job.h"

namespace gpupool::sched {

Resources QueuedJob::Total() const {
  Resources sum;
  for (const Task& t : tasks) sum += t.Total();
  return sum;
}

Resources ChargedUse(const ClusterState& cluster, const RunningJob& run) {
  const QueuedJob& job = *run.job;
  if (run.placements.size() != job.tasks.size()) return job.Total();
  Resources sum;
  for (size_t k = 0; k < job.tasks.size(); ++k) {
    const Task& t = job.tasks[k];
    sum += Resources{t.cpu_milli, t.memory_mib, cluster.ChargedGpuMilli(t, run.placements[k])};
  }
  return sum;
}

std::optional<int64_t> QueuedJob::SjfRuntime() const {
  if (runtime_estimate_s > 0) return runtime_estimate_s;
  if (time_limit_s > 0) return time_limit_s;
  return std::nullopt;
}

std::optional<int64_t> QueuedJob::PlanningRuntime() const {
  if (time_limit_s > 0) return time_limit_s;
  if (runtime_estimate_s > 0) return runtime_estimate_s;
  return std::nullopt;
}

int64_t RunningJob::PlannedEnd() const {
  std::optional<int64_t> runtime = job->PlanningRuntime();
  if (!runtime) return kNoPlannedEnd;
  if (start_s > kNoPlannedEnd - *runtime) return kNoPlannedEnd;
  return start_s + *runtime;
}

}  // namespace gpupool::sched
